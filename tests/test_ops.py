"""Capsule ops: finiteness at zero, for huge inputs and in half precision;
sparsemax and top-k softmax against their references."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules import ops as kc_ops
from tests.reference import attention as ref
from tests.reference import ops as ref_ops
from tests.test_case import gradients, to_numpy

OPS = ("safe_norm", "squash", "efficient_squash")
RNG = np.random.default_rng(0)
# Rows with 2, 3 and 1 elements in the support of sparsemax.
SPARSE_ROWS = np.array([[1.0, 0.5, -1.0, -2.0], [0.3, 0.2, 0.1, -3.0], [3.0, 0.0, 0.5, 1.0]])


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


# --- sparsemax ----------------------------------------------------------------


@pytest.mark.parametrize("axis", (-1, 0, 1))
def test_sparsemax_matches_reference_on_any_axis(axis):
    x = RNG.normal(size=(3, 4, 5))
    np.testing.assert_allclose(
        to_numpy(kc_ops.sparsemax(x.astype("float32"), axis=axis)),
        ref.sparsemax(x, axis=axis),
        rtol=1e-5,
        atol=1e-6,
    )


def test_sparsemax_jacobian_is_the_projection_jacobian():
    # J = diag(s) - s s^T / |S| (Martins & Astudillo, eq. 12); J is symmetric,
    # so the gradient of sum(sparsemax(x) * c) is J c.
    x = SPARSE_ROWS.astype("float32")
    c = RNG.normal(size=x.shape)
    cot = keras.ops.convert_to_tensor(c.astype("float32"))
    grads = gradients(
        lambda t: keras.ops.sum(kc_ops.sparsemax(t["x"]) * cot),
        {"x": keras.ops.convert_to_tensor(x)},
        ["x"],
    )
    s = (ref.sparsemax(SPARSE_ROWS) > 0).astype(float)
    expected = s * c - s * np.sum(s * c, axis=-1, keepdims=True) / s.sum(-1, keepdims=True)
    np.testing.assert_allclose(to_numpy(grads["x"]), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
def test_sparsemax_half_precision(dtype):
    x = keras.ops.cast(SPARSE_ROWS.astype("float32"), dtype)
    y = kc_ops.sparsemax(x)
    assert keras.backend.standardize_dtype(y.dtype) == dtype
    np.testing.assert_allclose(to_numpy(y), ref.sparsemax(SPARSE_ROWS), atol=1e-2)


def test_sparsemax_huge_and_tied_inputs():
    x = np.array([[1e4, -1e4, 1e4, 0.0], [2.0, 2.0, 2.0, 2.0]], "float32")
    y = to_numpy(kc_ops.sparsemax(x))
    np.testing.assert_allclose(y, [[0.5, 0, 0.5, 0], [0.25] * 4], atol=1e-6)


# Huge logits (issue 12): unshifted, `1 + k z_k > cumsum(z)` lost the 1 in
# float32, the support came out empty and tau divided by 0 (inf or all 0).
HUGE_ROWS = np.array(
    [
        [1e8, 0.0, -1e8, 5.0],
        [3e7, 1e7, -2e7, 0.0],
        [1e30, 0.0, -1e30, 1e29],
        [1e30, 1e30, -1e30, 0.0],  # a tie at the top
        [-1e30, -1e30, -1e30, -1e30],  # all tied
        [1e6 + 0.5, 1e6 + 0.25, 1e6 - 1.0, 1e6 - 2.0],  # support of 2, far from 0
        [2.5e8, 2.5e8, 2.5e8 - 64.0, -3e38],  # ties, and a logit near float32's min
    ],
    "float32",
)


@pytest.mark.parametrize("scale", (1.0, -1.0))
def test_sparsemax_matches_float64_reference_for_huge_logits(scale):
    x = HUGE_ROWS * np.float32(scale)
    y = to_numpy(kc_ops.sparsemax(x))
    np.testing.assert_allclose(y, ref.sparsemax(x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y.sum(-1), 1.0, rtol=1e-6)


def test_sparsemax_gradient_is_finite_for_huge_logits():
    x = keras.ops.convert_to_tensor(HUGE_ROWS)
    c = keras.ops.convert_to_tensor(RNG.normal(size=HUGE_ROWS.shape).astype("float32"))
    grads = gradients(lambda t: keras.ops.sum(kc_ops.sparsemax(t["x"]) * c), {"x": x}, ["x"])
    s = (ref.sparsemax(HUGE_ROWS.astype(np.float64)) > 0).astype(float)
    c = to_numpy(c)
    expected = s * c - s * np.sum(s * c, axis=-1, keepdims=True) / s.sum(-1, keepdims=True)
    np.testing.assert_allclose(to_numpy(grads["x"]), expected, rtol=1e-5, atol=1e-6)


def test_reference_sparsemax_catches_the_keras_bug():
    # The reference is the simplex projection: outputs sum to one, and
    # sparsemax(x) = max(x - tau, 0) with a single tau per row.
    p = ref.sparsemax(SPARSE_ROWS)
    np.testing.assert_allclose(p.sum(-1), 1.0)
    tau = SPARSE_ROWS - p
    for row, (t, q) in enumerate(zip(tau, p)):
        assert np.ptp(t[q > 0]) < 1e-12 and np.all(SPARSE_ROWS[row][q == 0] <= t[q > 0][0])
    # keras-team/keras#23425's threshold agrees when the support has one
    # element (row 2) and is far off as soon as it has more (rows 0, 1).
    buggy = ref.keras_buggy_sparsemax(SPARSE_ROWS)
    np.testing.assert_allclose(buggy[2], p[2])
    for row in (0, 1):
        assert np.max(np.abs(buggy[row] - p[row])) > 0.05


@pytest.mark.skipif(
    tuple(int(v) for v in keras.__version__.split(".")[:3]) > (3, 15, 1),
    reason="the bug is known up to Keras 3.15.1",
)
def test_keras_ops_sparsemax_is_the_documented_bug():
    # Shows that the model of the bug above is what Keras <= 3.15.1 does.
    actual = to_numpy(keras.ops.sparsemax(SPARSE_ROWS.astype("float32")))
    np.testing.assert_allclose(actual, ref.keras_buggy_sparsemax(SPARSE_ROWS), atol=1e-6)


@pytest.mark.xfail(strict=False, reason="keras-team/keras#23425 (Keras <= 3.15.1)")
def test_keras_ops_sparsemax_matches_reference():
    # The same check the library passes; it fails while the upstream bug
    # is there and passes (XPASS, not an error) once Keras fixes it.
    np.testing.assert_allclose(
        to_numpy(keras.ops.sparsemax(SPARSE_ROWS.astype("float32"))),
        ref.sparsemax(SPARSE_ROWS),
        rtol=1e-5,
        atol=1e-6,
    )


def test_top_k_softmax_keeps_ties_and_zeros_the_rest():
    x = np.array([[3.0, 1.0, 1.0, 0.0], [0.0, 2.0, 5.0, 4.0]], "float32")
    y = to_numpy(kc_ops.top_k_softmax(x, 2))
    np.testing.assert_allclose(y, ref.top_k_softmax(x.astype(float), 2), rtol=1e-6)
    assert list((y > 0).sum(-1)) == [3, 2] and np.all(y[:, 0] >= 0)


def test_householder_orthogonal_lives_in_ops_only():
    assert callable(kc.ops.householder_orthogonal)
    assert not hasattr(kc.layers, "householder_orthogonal")


def test_layer_norm_matches_numpy_and_keeps_half_inputs_half():
    x = (np.random.default_rng(0).normal(size=(3, 5, 6)) * 4 + 2).astype("float32")
    centred = x - x.mean(-1, keepdims=True)
    expected = centred / np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(to_numpy(kc_ops.layer_norm(x)), expected, rtol=1e-5, atol=1e-6)
    half = kc_ops.layer_norm(keras.ops.cast(x, "float16"))
    assert keras.backend.standardize_dtype(half.dtype) == "float16"
    np.testing.assert_allclose(to_numpy(half).astype("float64"), expected, atol=2e-2)
