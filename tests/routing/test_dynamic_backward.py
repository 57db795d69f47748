"""DynamicRouting's hand-written backward pass equals automatic differentiation.

The gradient of `<poses, gp> + <coefficients, gc>` with respect to the votes
is compared for `backward="manual"` and `backward="autodiff"` in every mode
the backend has (TensorFlow: eager, `tf.function`, XLA; JAX: `jax.jit`;
torch: eager), for every agreement and `stop_gradient`, with a temperature
and step size other than 1: float64 within 1e-9, float32 within 1e-5
(relative to the gradient's largest entry). The parity rows
(`tests/parity/cases_foundation.py`) check both passes against finite
differences of the float64 reference for more temperatures and iterations.
"""

import keras
import numpy as np
import pytest
from keras import ops

import keras_capsules
from keras_capsules.routing import DynamicRouting, dynamic_backward
from tests.routing.backward_checks import (
    MODES,
    check_backward_option,
    check_fused_forms,
    float64,
    relative_error,
)
from tests.test_case import BACKEND, to_numpy

AGREEMENTS = ("dot", "cosine", "euclidean")


def _inputs(dtype, seed=0):
    rng = np.random.default_rng(seed)
    votes = rng.normal(size=(2, 7, 4, 5)).astype(dtype)
    cotangents = (
        rng.normal(size=(2, 4, 5)).astype(dtype),
        rng.normal(size=(2, 7, 4)).astype(dtype),
    )
    return votes, cotangents


def _votes_gradient(router, votes, cotangents, mode):
    """Gradient of `<poses, gp> + <coefficients, gc> + sum(lengths)`."""
    gp, gc = (ops.convert_to_tensor(c) for c in cotangents)

    def loss(x):
        poses, lengths, coefficients = router(x, return_coefficients=True)
        return ops.sum(poses * gp) + ops.sum(coefficients * gc) + ops.sum(lengths)

    if BACKEND == "tensorflow":
        import tensorflow as tf

        def grad(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                value = loss(x)
            return tape.gradient(value, x)

        if mode != "eager":
            router.xla = mode == "xla"
            grad = tf.function(grad, jit_compile=mode == "xla")
        return to_numpy(grad(tf.constant(votes)))
    if BACKEND == "jax":
        import jax

        grad = jax.grad(loss)
        return to_numpy((jax.jit(grad) if mode == "jit" else grad)(votes))
    import torch

    x = torch.tensor(votes, requires_grad=True)
    loss(x).backward()
    return to_numpy(x.grad)


@pytest.mark.parametrize("stop_gradient", (False, True))
@pytest.mark.parametrize("agreement", AGREEMENTS)
def test_float64_gradient_equals_autodiff(agreement, stop_gradient):
    votes, cotangents = _inputs("float64")
    with float64():
        # Other temperatures and iteration counts: the parity rows.
        for iterations, temperature, step_size in ((3, 0.5, 0.7),):
            kwargs = dict(
                iterations=iterations,
                temperature=temperature,
                step_size=step_size,
                agreement=agreement,
                stop_gradient=stop_gradient,
                dtype="float64",
            )
            for mode in MODES:
                manual = _votes_gradient(
                    DynamicRouting(backward="manual", **kwargs), votes, cotangents, mode
                )
                automatic = _votes_gradient(
                    DynamicRouting(backward="autodiff", **kwargs), votes, cotangents, mode
                )
                assert relative_error(manual, automatic) < 1e-9, (iterations, mode)


@pytest.mark.parametrize("agreement", AGREEMENTS)
def test_float32_gradient_equals_autodiff(agreement):
    votes, cotangents = _inputs("float32", seed=1)
    for mode in MODES:
        manual = _votes_gradient(DynamicRouting(agreement=agreement), votes, cotangents, mode)
        automatic = _votes_gradient(
            DynamicRouting(agreement=agreement, backward="autodiff"), votes, cotangents, mode
        )
        assert relative_error(manual, automatic) < 1e-5, mode


@pytest.mark.parametrize("agreement", AGREEMENTS)
def test_fused_and_matmul_forms_agree(agreement):
    """The XLA form (a sum of broadcast products) and the batched-matmul form
    of the votes' gradient are the same numbers, whichever runs."""
    votes, (gp, gc) = _inputs("float64", seed=2)
    check_fused_forms(
        lambda t, fused: dynamic_backward.dynamic_routing(
            t["u"], 3, 0.5, agreement, 1.0, False, fused=fused
        ),
        {"u": votes.transpose(0, 2, 1, 3)},
        (gp, gc.transpose(0, 2, 1)),  # parent-major, like the votes
    )


@pytest.mark.parametrize("policy", ("mixed_float16", "mixed_bfloat16"))
def test_gradient_is_finite_and_close_under_mixed_precision(policy):
    votes, cotangents = _inputs("float32", seed=3)
    cotangents = tuple(c.astype(policy.split("_")[1]) for c in cotangents)
    mixed = _votes_gradient(DynamicRouting(dtype=policy), votes, cotangents, MODES[-1])
    full = _votes_gradient(DynamicRouting(), votes, _inputs("float32", seed=3)[1], MODES[-1])
    assert np.isfinite(mixed).all()
    # The cotangents and outputs are rounded to the half dtype.
    np.testing.assert_allclose(mixed, full, atol=5e-2 * np.abs(full).max())


@pytest.mark.parametrize("agreement", AGREEMENTS)
def test_gradient_is_finite_for_zero_and_huge_votes(agreement):
    votes, cotangents = _inputs("float32", seed=4)
    votes[0] = 0.0
    votes[1, :3] *= 1e15
    grad = _votes_gradient(DynamicRouting(agreement=agreement), votes, cotangents, MODES[-1])
    assert np.isfinite(grad).all()


def test_backward_round_trips_and_is_validated():
    check_backward_option(DynamicRouting)


def test_set_xla_reaches_the_router_of_a_capsule_layer():
    capsule = keras_capsules.layers.Capsule(3, 4)
    model = keras.Sequential([keras.Input((6, 8)), capsule])
    keras_capsules.conv.set_xla(model, True)
    assert isinstance(capsule.router, DynamicRouting) and capsule.router.xla is True
