"""Parity cases of issue 23: HeinsenRouting and HeinsenCapsule."""

import keras_capsules
from tests.parity.registry import Case, register, stateless
from tests.reference import heinsen as ref


def _router_inputs(n_in, dim, shared, with_scores):
    def inputs(rng):
        rows = 1 if shared else n_in
        arrays = {
            "votes": rng.normal(size=(2, n_in, 3, dim)),
            "beta_use": rng.normal(size=(rows, 3)),
            "beta_ign": rng.normal(size=(rows, 3)),
        }
        if with_scores:
            arrays["scores"] = rng.normal(size=(2, n_in))
        return arrays

    return inputs


def _register_router(name, iterations, shared=False, with_scores=True, dim=4):
    diff = ("votes", "beta_use", "beta_ign") + (("scores",) if with_scores else ())
    register(
        Case(
            name=f"heinsen-{name}",
            inputs=_router_inputs(5, dim, shared, with_scores),
            build=lambda: keras_capsules.routing.HeinsenRouting(
                iterations=iterations, share_weights=shared
            ),
            reference=lambda a: list(
                ref.heinsen_routing(
                    a["votes"], a.get("scores"), a["beta_use"], a["beta_ign"], iterations
                )
            ),
            forward=lambda layer, t: list(
                stateless(
                    layer,
                    t,
                    t["votes"],
                    t.get("scores"),
                    return_coefficients=True,
                    return_variances=True,
                )
            ),
            diff=diff,
        )
    )


for _iterations in (1, 2, 3):
    _register_router(f"it{_iterations}", _iterations)
_register_router("it3-shared", 3, shared=True)
_register_router("it2-no-scores", 2, with_scores=False)


def _capsule_inputs(rng):
    return {
        "poses": rng.normal(size=(2, 5, 2, 3)),  # d_cov 2, d_inp 3
        "scores": rng.normal(size=(2, 5)),
        "kernel": rng.normal(size=(5, 3, 3, 2)) / 3,  # 3 parents, d_out 2
        "bias": rng.normal(size=(5, 3, 2, 2)) * 0.3,
        "beta_use": rng.normal(size=(5, 3)),
        "beta_ign": rng.normal(size=(5, 3)),
    }


def _capsule_reference(a):
    votes = ref.heinsen_votes(a["poses"], a["kernel"], a["bias"])
    mu, a_out, _, sig2 = ref.heinsen_routing(
        votes, a["scores"], a["beta_use"], a["beta_ign"], iterations=2
    )
    return [mu.reshape(2, 3, 2, 2), a_out, sig2.reshape(2, 3, 2, 2)]


register(
    Case(
        name="heinsen-capsule",
        inputs=_capsule_inputs,
        build=lambda: keras_capsules.layers.HeinsenCapsule(
            3, 2, router=keras_capsules.routing.HeinsenRouting(iterations=2), return_variances=True
        ),
        reference=_capsule_reference,
        forward=lambda layer, t: list(stateless(layer, t, [t["poses"], t["scores"]])),
        diff=("poses", "scores", "kernel", "bias", "beta_use", "beta_ign"),
    )
)
