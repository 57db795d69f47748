"""InvertedDotProductRouting's hand-written backward pass equals automatic
differentiation.

The gradients of `<poses, gp> + <activations, ga> + <coefficients, gc>` with
respect to the votes and the LayerNorm's scale and offset are compared for
`backward="manual"` and `backward="autodiff"` in every mode the backend has
(TensorFlow: eager, `tf.function`, XLA; JAX: `jax.jit`; torch: eager), for
1-3 iterations and a temperature other than 1: float64 within 1e-9, float32
within 1e-5 (relative to each gradient's largest entry). The parity rows
(`tests/parity/cases_attention.py`) check both passes against finite
differences of the float64 reference.
"""

import functools

import numpy as np
import pytest

import keras_capsules
from keras_capsules.routing import InvertedDotProductRouting, inverted_dot_product_backward
from tests.routing.backward_checks import (
    MATH_MODES,
    check_backward_option,
    check_finite,
    check_fused_forms,
    check_mixed_precision,
    compare,
    float64,
)


def _inputs(dtype, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {
        "votes": rng.normal(size=(2, 6, 3, 5)),
        "scale": 1.0 + 0.3 * rng.normal(size=(5,)),
        "offset": 0.3 * rng.normal(size=(5,)),
    }
    cotangents = (rng.normal(size=(2, 3, 5)), rng.normal(size=(2, 3)), rng.normal(size=(2, 6, 3)))
    return (
        {k: v.astype(dtype) for k, v in arrays.items()},
        tuple(c.astype(dtype) for c in cotangents),
    )


@pytest.mark.parametrize("iterations, temperature", ((1, 1.0), (2, 0.5), (3, 2.0)))
def test_float64_gradients_equal_autodiff(iterations, temperature):
    arrays, cotangents = _inputs("float64")
    kwargs = dict(iterations=iterations, temperature=temperature)
    with float64():
        compare(
            InvertedDotProductRouting,
            kwargs,
            arrays,
            cotangents,
            1e-9,
            dtype="float64",
            modes=MATH_MODES,
        )


def test_float32_gradients_equal_autodiff():
    arrays, cotangents = _inputs("float32", seed=1)
    compare(InvertedDotProductRouting, dict(iterations=3), arrays, cotangents, 1e-5)


def test_fused_and_matmul_forms_agree():
    """The XLA form (a sum of broadcast products) and the batched-matmul form
    of the votes' gradient are the same numbers, whichever runs."""
    arrays, (gp, _, gc) = _inputs("float64", seed=2)
    check_fused_forms(
        lambda t, fused: inverted_dot_product_backward.inverted_dot_product_routing(
            t["u"], t["scale"], t["offset"], 3, 0.7, 1e-5, fused=fused
        ),
        {
            "u": arrays["votes"].transpose(0, 2, 1, 3),
            "scale": arrays["scale"],
            "offset": arrays["offset"],
        },
        (gp, gp, gc.transpose(0, 2, 1)),  # parent-major, like the votes
    )


@pytest.mark.parametrize("policy", ("mixed_float16", "mixed_bfloat16"))
def test_gradients_are_finite_and_close_under_mixed_precision(policy):
    arrays, cotangents = _inputs("float32", seed=3)
    make = functools.partial(InvertedDotProductRouting, iterations=3)
    check_mixed_precision(make, arrays, cotangents, policy)


def test_gradients_are_finite_for_zero_and_huge_votes():
    arrays, cotangents = _inputs("float32", seed=4)
    arrays["votes"][0] = 0.0
    arrays["votes"][1, :3] *= 1e4  # the scale of tests/test_extreme_inputs.py
    check_finite(InvertedDotProductRouting(iterations=3), arrays, cotangents)


def test_backward_round_trips_and_is_validated():
    check_backward_option(InvertedDotProductRouting)


def test_set_xla_reaches_the_router_of_a_capsule_layer():
    capsule = keras_capsules.layers.Capsule(3, 4, router=InvertedDotProductRouting())
    keras_capsules.conv.set_xla(capsule, True)
    assert capsule.router.xla is True
