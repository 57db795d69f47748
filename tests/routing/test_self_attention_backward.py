"""SelfAttentionRouting's hand-written backward pass equals automatic
differentiation.

The gradients of `<poses, gp> + <lengths, ga> + <coefficients, gc>` with
respect to the votes and the priors are compared for `backward="manual"` and
`backward="autodiff"` in every mode the backend has (TensorFlow: eager,
`tf.function`, XLA; JAX: `jax.jit`; torch: eager), with and without priors
and for a temperature other than 1: float64 within 1e-9, float32 within
1e-5 (relative to each gradient's largest entry). The parity rows
(`tests/parity/cases_attention.py`) check both passes against finite
differences of the float64 reference.
"""

import numpy as np
import pytest

import keras_capsules
from keras_capsules.routing import SelfAttentionRouting, self_attention_backward
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
    "priors": dict(),
    "priors-t0.5": dict(temperature=0.5),
    "no-priors-t2": dict(use_priors=False, temperature=2.0),
}


def _inputs(dtype, use_priors=True, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {"votes": rng.normal(size=(2, 6, 3, 5))}
    if use_priors:
        arrays["priors"] = rng.normal(size=(6, 3)) * 0.3
    cotangents = (rng.normal(size=(2, 3, 5)), rng.normal(size=(2, 3)), rng.normal(size=(2, 6, 3)))
    return (
        {k: v.astype(dtype) for k, v in arrays.items()},
        tuple(c.astype(dtype) for c in cotangents),
    )


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_float64_gradients_equal_autodiff(option):
    kwargs = OPTIONS[option]
    arrays, cotangents = _inputs("float64", kwargs.get("use_priors", True))
    with float64():
        compare(
            SelfAttentionRouting,
            kwargs,
            arrays,
            cotangents,
            1e-9,
            dtype="float64",
            modes=MATH_MODES,
        )


def test_float32_gradients_equal_autodiff():
    arrays, cotangents = _inputs("float32", seed=1)
    compare(SelfAttentionRouting, {}, arrays, cotangents, 1e-5)


def test_fused_and_matmul_forms_agree():
    """The XLA form (a sum of broadcast products) and the batched-matmul form
    of the votes' gradient are the same numbers, whichever runs."""
    arrays, (gp, _, gc) = _inputs("float64", seed=2)
    check_fused_forms(
        lambda t, fused: self_attention_backward.self_attention_routing(
            t["u"], t["priors"], 0.7, fused=fused
        ),
        {"u": arrays["votes"].transpose(0, 2, 1, 3), "priors": arrays["priors"].T},
        (gp, gc.transpose(0, 2, 1)),  # parent-major, like the votes
    )


@pytest.mark.parametrize("policy", ("mixed_float16", "mixed_bfloat16"))
def test_gradients_are_finite_and_close_under_mixed_precision(policy):
    arrays, cotangents = _inputs("float32", seed=3)
    check_mixed_precision(SelfAttentionRouting, arrays, cotangents, policy)


def test_gradients_are_finite_for_zero_and_huge_votes():
    arrays, cotangents = _inputs("float32", seed=4)
    arrays["votes"][0] = 0.0
    # The scale of tests/test_extreme_inputs.py: at 1e8 the agreement
    # logits (~1e16 * in_caps) overflow the float32 softmax's gradient,
    # automatic differentiation's too.
    arrays["votes"][1, :3] *= 1e4
    check_finite(SelfAttentionRouting(), arrays, cotangents)


def test_backward_round_trips_and_is_validated():
    check_backward_option(SelfAttentionRouting)


def test_set_xla_reaches_the_router_of_a_capsule_layer():
    capsule = keras_capsules.layers.Capsule(3, 4, router=SelfAttentionRouting())
    keras_capsules.conv.set_xla(capsule, True)
    assert capsule.router.xla is True
