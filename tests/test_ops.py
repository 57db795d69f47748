"""Capsule ops: finiteness at zero, for huge inputs and in half precision."""

import keras
import numpy as np
import pytest

from keras_capsules import ops as kc_ops
from tests.parity.backend_grad import gradients, to_numpy
from tests.reference import ops as ref_ops

OPS = ("safe_norm", "squash", "efficient_squash")


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", ("float16", "bfloat16", "float32"))
@pytest.mark.parametrize("scale", (0.0, 1.0, 1e4))
def test_finite_values_and_gradients(op, dtype, scale):
    x = np.random.default_rng(0).normal(size=(4, 8)) * scale
    x[0] = 0.0
    fn = getattr(kc_ops, op)
    t = keras.ops.cast(keras.ops.convert_to_tensor(x.astype("float32")), dtype)
    y = fn(t)
    assert keras.backend.standardize_dtype(y.dtype) == dtype
    assert np.all(np.isfinite(to_numpy(y)))
    grads = gradients(lambda d: keras.ops.sum(fn(d["x"])), {"x": t}, ["x"])
    assert np.all(np.isfinite(to_numpy(grads["x"])))


@pytest.mark.parametrize("op", OPS)
def test_half_precision_is_close_to_float64(op):
    x = np.random.default_rng(1).normal(size=(4, 8))
    y = to_numpy(getattr(kc_ops, op)(keras.ops.cast(x.astype("float32"), "float16")))
    np.testing.assert_allclose(y, getattr(ref_ops, op)(x), rtol=5e-3, atol=5e-3)


def test_squash_lengths():
    y = to_numpy(kc_ops.squash(keras.ops.ones((2, 4))))
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), 0.8, rtol=1e-5)


def test_safe_norm_keepdims_and_axis():
    x = keras.ops.ones((2, 3, 4))
    assert tuple(kc_ops.safe_norm(x, axis=1, keepdims=True).shape) == (2, 1, 4)
