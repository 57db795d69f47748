"""Parity cases of issue 3: EMRouting, ConvCapsule1D/2D and the matrix layers."""

import keras_capsules
from tests.parity.registry import Case, register, stateless
from tests.reference import em as ref_em


def _em_inputs(dim, with_activations=True):
    def inputs(rng):
        arrays = {
            "votes": rng.normal(size=(2, 5, 3, dim)),
            "beta_u": rng.normal(size=(3,)) * 0.5,
            "beta_a": rng.normal(size=(3,)) * 0.5,
        }
        if with_activations:
            arrays["activations"] = rng.uniform(0.1, 0.9, size=(2, 5))
        return arrays

    return inputs


# With 16 pose elements the E-step log-likelihoods sum 16 terms and reach
# |log_p| ~ 1e2 once the assignments sharpen (iteration 3), so float32
# rounding (6e-8 relative) moves the assignment logits by ~1e-5: the float32
# results cannot meet atol=1e-6 there, whatever the implementation.
POSE16_TOLERANCE = dict(rtol=1e-4, atol=1e-5)


def _register_em(name, dim=4, with_activations=True, tolerance=None, **kwargs):
    diff = ("votes", "beta_u", "beta_a") + (("activations",) if with_activations else ())
    register(
        Case(
            name=f"em-{name}",
            inputs=_em_inputs(dim, with_activations),
            build=lambda: keras_capsules.routing.EMRouting(**kwargs),
            reference=lambda a: list(
                ref_em.em_routing(
                    a["votes"], a.get("activations"), a["beta_u"], a["beta_a"], **kwargs
                )
            ),
            forward=lambda layer, t: list(
                stateless(layer, t, t["votes"], t.get("activations"), return_coefficients=True)
            ),
            diff=diff,
            **(tolerance or {}),
        )
    )


for _iterations in (1, 2, 3):
    _register_em(f"it{_iterations}", iterations=_iterations)
    _register_em(f"it{_iterations}-lambda2", iterations=_iterations, inverse_temperature=2.0)
_register_em("it3-final-lambda0.5", iterations=3, final_lambda=0.5)
_register_em("it2-lambda-sequence", iterations=2, inverse_temperature=[0.5, 3.0])
_register_em("it2-pose16", dim=16, iterations=2)
_register_em("it3-pose16", dim=16, iterations=3, tolerance=POSE16_TOLERANCE)
_register_em("it2-no-activations", with_activations=False, iterations=2)
