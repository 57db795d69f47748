"""Parity cases of the attention-family routers."""

import keras_capsules
from tests.parity.registry import Case, register, stateless
from tests.reference import attention as ref


def _votes_and_priors(rng):
    return {"votes": rng.normal(size=(2, 5, 3, 4)), "priors": rng.normal(size=(5, 3)) * 0.1}


for _temperature in (0.5, 1.0):
    register(
        Case(
            name=f"self-attention-t{_temperature}",
            inputs=_votes_and_priors,
            build=lambda t=_temperature: keras_capsules.routing.SelfAttentionRouting(
                temperature=t
            ),
            reference=lambda a, t=_temperature: list(
                ref.self_attention_routing(a["votes"], a["priors"], t)
            ),
            forward=lambda layer, t: list(
                stateless(layer, t, t["votes"], return_coefficients=True)
            ),
            diff=("votes", "priors"),
        )
    )

register(
    Case(
        name="self-attention-no-priors",
        inputs=lambda rng: {"votes": rng.normal(size=(2, 5, 3, 4))},
        build=lambda: keras_capsules.routing.SelfAttentionRouting(use_priors=False),
        reference=lambda a: list(ref.self_attention_routing(a["votes"])),
        forward=lambda layer, t: list(layer(t["votes"], return_coefficients=True)),
        diff=("votes",),
    )
)
