"""Checks shared by the tests of the routers' hand-written backward passes:
gradients of a router in each compile mode of the backend, compared between
`backward="manual"` and `backward="autodiff"`."""

import contextlib

import numpy as np
import pytest
from keras import ops

from tests.parity.registry import stateless
from tests.test_case import BACKEND, gradients, to_numpy

# JAX op by op is left out: it costs seconds per case and Keras jits on JAX.
MODES = {"tensorflow": ("eager", "graph", "xla"), "jax": ("jit",), "torch": ("eager",)}[BACKEND]


def float64():
    """JAX computes in float32 unless 64-bit types are enabled."""
    if BACKEND == "jax":
        import jax

        return jax.enable_x64(True)
    return contextlib.nullcontext()


def relative_error(got, expected):
    return np.max(np.abs(got - expected)) / np.max(np.abs(expected))


def router_gradients(router, arrays, cotangents, mode):
    """`{name: gradient}` of `<poses, gp> + <activations, ga> + <coefficients,
    gc>` (`cotangents`) w.r.t. every array in `arrays`: the votes, the
    activations (when given) and the router's weights, by name; `mode`: one
    of `MODES`."""
    tensors = {k: ops.convert_to_tensor(v) for k, v in arrays.items()}
    gp, ga, gc = (ops.convert_to_tensor(c) for c in cotangents)
    stateless(router, tensors, tensors["votes"], tensors.get("activations"))  # builds

    def loss(t):
        poses, activations, coefficients = stateless(
            router, t, t["votes"], t.get("activations"), return_coefficients=True
        )
        return ops.sum(poses * gp) + ops.sum(activations * ga) + ops.sum(coefficients * gc)

    diff = tuple(tensors)
    if BACKEND == "tensorflow" and mode != "eager":
        import tensorflow as tf

        router.xla = mode == "xla"
        compiled = tf.function(lambda t: gradients(loss, t, diff), jit_compile=mode == "xla")
        return {k: to_numpy(g) for k, g in compiled(tensors).items()}
    return {k: to_numpy(g) for k, g in gradients(loss, tensors, diff).items()}


# The options' float64 checks test the math: one mode is enough there (on
# TensorFlow each graph and XLA compilation costs seconds); the float32
# checks run every mode.
MATH_MODES = MODES[:1]


def compare(router_class, kwargs, arrays, cotangents, tolerance, dtype=None, modes=MODES):
    """Asserts that `router_class(**kwargs)`'s gradients (its default,
    hand-written backward) are finite and equal those of
    `backward="autodiff"` within `tolerance` (relative to each gradient's
    largest entry), in each of `modes`."""
    for mode in modes:
        manual = router_gradients(router_class(dtype=dtype, **kwargs), arrays, cotangents, mode)
        automatic = router_gradients(
            router_class(backward="autodiff", dtype=dtype, **kwargs), arrays, cotangents, mode
        )
        for name in arrays:
            assert np.isfinite(manual[name]).all(), (name, mode)
            error = relative_error(manual[name], automatic[name])
            assert error < tolerance, (name, mode, error)


def check_mixed_precision(make_router, arrays, cotangents, policy):
    """The gradients of `make_router(dtype=policy)` are finite and close to
    those of `make_router()` (float32)."""
    half = tuple(c.astype(policy.split("_")[1]) for c in cotangents)
    mixed = router_gradients(make_router(dtype=policy), arrays, half, MODES[-1])
    full = router_gradients(make_router(), arrays, cotangents, MODES[-1])
    for name in arrays:
        assert np.isfinite(mixed[name]).all(), name
        # The cotangents and outputs are rounded to the half dtype.
        np.testing.assert_allclose(mixed[name], full[name], atol=5e-2 * np.abs(full[name]).max())


def check_finite(router, arrays, cotangents):
    for name, grad in router_gradients(router, arrays, cotangents, MODES[-1]).items():
        assert np.isfinite(grad).all(), name


def check_backward_option(router_class):
    """`backward` defaults to "manual", survives the config and is checked."""
    router = router_class(backward="autodiff")
    assert router_class.from_config(router.get_config()).backward == "autodiff"
    assert router_class().backward == "manual"
    with pytest.raises(ValueError, match="backward='symbolic'"):
        router_class(backward="symbolic")


def check_fused_forms(route, tensors, cotangents):
    """The XLA form of a router's votes' gradient (sums of broadcast
    products) and its batched-matmul form are the same numbers (float64):
    `route(tensors, fused)` returns the routing's outputs; the loss is
    `sum <output, cotangent>`, differentiated with respect to `tensors["u"]`."""
    with float64():
        tensors = {k: ops.convert_to_tensor(v) for k, v in tensors.items()}
        grads = []
        for fused in (False, True):

            def loss(t, fused=fused):
                outputs = route(t, fused)
                return sum(
                    ops.sum(x * ops.convert_to_tensor(g)) for x, g in zip(outputs, cotangents)
                )

            grads.append(to_numpy(gradients(loss, tensors, ("u",))["u"]))
    assert relative_error(grads[1], grads[0]) < 1e-12
