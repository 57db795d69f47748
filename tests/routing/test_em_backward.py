"""EMRouting's hand-written backward pass equals automatic differentiation.

The gradient of `<poses, gp> + <activations, ga> + <coefficients, gc>` with
respect to the votes, the child activations, `beta_u` and `beta_a` is
compared for `backward="manual"` and `backward="autodiff"` in every mode
the backend has (TensorFlow: eager, `tf.function`, XLA; JAX: `jax.jit`;
torch: eager), with and without child activations and for each
inverse-temperature option: float64 within 1e-9, float32 within 1e-5
(relative to each gradient's largest entry). The parity rows
(`tests/parity/cases_matrix.py`) check both passes against finite
differences of the float64 reference.
"""

import numpy as np
import pytest

import keras_capsules
from keras_capsules.routing import EMRouting, em_backward
from tests.routing.backward_checks import (
    MATH_MODES,
    check_backward_option,
    check_finite,
    check_fused_forms,
    check_mixed_precision,
    compare,
    float64,
)

OPTIONS = {
    "schedule": dict(iterations=3),
    "lambda2": dict(iterations=3, inverse_temperature=2.0),
    "sequence-eps": dict(iterations=2, inverse_temperature=[0.5, 3.0], epsilon=1e-2),
    "one-iteration": dict(iterations=1),
}


def _inputs(dtype, with_activations=True, seed=0, dim=4):
    rng = np.random.default_rng(seed)
    arrays = {
        "votes": rng.normal(size=(2, 6, 3, dim)),
        "beta_u": rng.normal(size=(3,)) * 0.5,
        "beta_a": rng.normal(size=(3,)) * 0.5,
    }
    if with_activations:
        arrays["activations"] = rng.uniform(0.1, 0.9, size=(2, 6))
    cotangents = (rng.normal(size=(2, 3, dim)), rng.normal(size=(2, 3)), rng.normal(size=(2, 6, 3)))
    cast = {k: v.astype(dtype) for k, v in arrays.items()}
    return cast, tuple(c.astype(dtype) for c in cotangents)


@pytest.mark.parametrize("with_activations", (True, False))
@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_float64_gradients_equal_autodiff(option, with_activations):
    arrays, cotangents = _inputs("float64", with_activations)
    with float64():
        compare(
            EMRouting, OPTIONS[option], arrays, cotangents, 1e-9, dtype="float64", modes=MATH_MODES
        )


@pytest.mark.parametrize("dim", (4, 16))
def test_float32_gradients_equal_autodiff(dim):
    arrays, cotangents = _inputs("float32", seed=1, dim=dim)
    compare(EMRouting, dict(iterations=3), arrays, cotangents, 1e-5)


def test_fused_and_matmul_forms_agree():
    """The XLA form (sums of broadcast products) and the batched-matmul form
    of the votes' gradient are the same numbers, whichever runs."""
    arrays, (gp, ga, gc) = _inputs("float64", seed=2)
    check_fused_forms(
        lambda t, fused: em_backward.em_routing(
            t["u"], t["a"], t["bu"], t["ba"], [0.3, 0.6, 0.9], 1e-4, fused=fused
        ),
        {
            "u": arrays["votes"].transpose(0, 2, 1, 3),
            "a": arrays["activations"],
            "bu": arrays["beta_u"],
            "ba": arrays["beta_a"],
        },
        (gp, ga, gc.transpose(0, 2, 1)),  # parent-major, like the votes
    )


@pytest.mark.parametrize("policy", ("mixed_float16", "mixed_bfloat16"))
def test_gradients_are_finite_and_close_under_mixed_precision(policy):
    arrays, cotangents = _inputs("float32", seed=3)
    check_mixed_precision(EMRouting, arrays, cotangents, policy)


def test_gradients_are_finite_for_zero_and_huge_votes():
    arrays, cotangents = _inputs("float32", seed=4)
    arrays["votes"][0] = 0.0
    # EM squares the deviations and its gradient divides by var^2: votes of
    # 1e6 (var ~1e12) are within float32's range, 1e15 is not (autodiff
    # gives NaN there too).
    arrays["votes"][1, :3] *= 1e6
    check_finite(EMRouting(), arrays, cotangents)


def test_backward_round_trips_and_is_validated():
    check_backward_option(EMRouting)


def test_set_xla_reaches_the_router_of_a_matrix_capsule_layer():
    capsule = keras_capsules.layers.ClassMatrixCapsule(3)
    keras_capsules.conv.set_xla(capsule, True)
    assert isinstance(capsule.router, EMRouting) and capsule.router.xla is True
