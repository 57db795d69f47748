"""Attention-family routers and layers: sparsemax, SparseAttentionRouting,
InvertedDotProductRouting, SelfRouting, CapsuleAttention, CapsulePruning and
orthogonal Capsule transforms (values are checked in the parity matrix)."""

import keras
import numpy as np
import pytest

from keras_capsules import ops as kc_ops
from keras_capsules.layers import Capsule, CapsuleAttention, CapsulePruning, householder_orthogonal
from keras_capsules.routing import InvertedDotProductRouting, SelfRouting, SparseAttentionRouting
from tests.conftest import jit_compile_for_backend
from tests.parity.backend_grad import gradients, to_numpy
from tests.reference import attention as ref
from tests.test_case import LayerTestCase

RNG = np.random.default_rng(0)
VOTES = RNG.normal(size=(2, 6, 3, 4)).astype("float32")
CAPSULES = RNG.normal(size=(2, 6, 8)).astype("float32")
# Rows with 2, 3 and 1 elements in the support of sparsemax.
SPARSE_ROWS = np.array([[1.0, 0.5, -1.0, -2.0], [0.3, 0.2, 0.1, -3.0], [3.0, 0.0, 0.5, 1.0]])


# --- sparsemax ----------------------------------------------------------------


@pytest.mark.parametrize("axis", (-1, 0, 1))
def test_sparsemax_matches_reference_on_any_axis(axis):
    x = RNG.normal(size=(3, 4, 5))
    np.testing.assert_allclose(
        to_numpy(kc_ops.sparsemax(x.astype("float32"), axis=axis)),
        ref.sparsemax(x, axis=axis), rtol=1e-5, atol=1e-6,
    )


def test_sparsemax_jacobian_is_the_projection_jacobian():
    # J = diag(s) - s s^T / |S| (Martins & Astudillo, eq. 12); J is symmetric,
    # so the gradient of sum(sparsemax(x) * c) is J c.
    x = SPARSE_ROWS.astype("float32")
    c = RNG.normal(size=x.shape)
    cot = keras.ops.convert_to_tensor(c.astype("float32"))
    grads = gradients(
        lambda t: keras.ops.sum(kc_ops.sparsemax(t["x"]) * cot),
        {"x": keras.ops.convert_to_tensor(x)}, ["x"],
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
HUGE_ROWS = np.array([
    [1e8, 0.0, -1e8, 5.0],
    [3e7, 1e7, -2e7, 0.0],
    [1e30, 0.0, -1e30, 1e29],
    [1e30, 1e30, -1e30, 0.0],             # a tie at the top
    [-1e30, -1e30, -1e30, -1e30],         # all tied
    [1e6 + 0.5, 1e6 + 0.25, 1e6 - 1.0, 1e6 - 2.0],  # support of 2, far from 0
    [2.5e8, 2.5e8, 2.5e8 - 64.0, -3e38],  # ties, and a logit near float32's min
], "float32")


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
        ref.sparsemax(SPARSE_ROWS), rtol=1e-5, atol=1e-6,
    )


def test_top_k_softmax_keeps_ties_and_zeros_the_rest():
    x = np.array([[3.0, 1.0, 1.0, 0.0], [0.0, 2.0, 5.0, 4.0]], "float32")
    y = to_numpy(kc_ops.top_k_softmax(x, 2))
    np.testing.assert_allclose(y, ref.top_k_softmax(x.astype(float), 2), rtol=1e-6)
    assert list((y > 0).sum(-1)) == [3, 2] and np.all(y[:, 0] >= 0)


# --- routers ------------------------------------------------------------------


class TestSparseAttentionRouting(LayerTestCase):
    @pytest.mark.parametrize("top_k", (None, 2))
    def test_layer(self, top_k):
        self.run_layer_test(
            SparseAttentionRouting, {"top_k": top_k, "temperature": 4.0}, VOTES,
            ((2, 3, 4), (2, 3)), run_mixed_precision_check=top_k is None,
        )

    @pytest.mark.parametrize("top_k", (None, 1, 2))
    def test_coefficients_are_sparse_distributions(self, top_k):
        _, _, c = SparseAttentionRouting(top_k=top_k)(VOTES, return_coefficients=True)
        c = to_numpy(c)
        np.testing.assert_allclose(c.sum(-1), 1.0, rtol=1e-6)
        if top_k is not None:
            assert np.all((c > 0).sum(-1) == top_k)

    @pytest.mark.parametrize(
        "kwargs, message",
        [({"top_k": 0}, "top_k=0"), ({"top_k": 1.5}, "top_k=1.5"),
         ({"temperature": 0}, "temperature=0")],
    )
    def test_errors(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            SparseAttentionRouting(**kwargs)

    def test_top_k_larger_than_out_caps(self):
        with pytest.raises(ValueError, match="top_k=4"):
            SparseAttentionRouting(top_k=4)(VOTES)


class TestInvertedDotProductRouting(LayerTestCase):
    def test_layer(self):
        self.run_layer_test(
            InvertedDotProductRouting, {"iterations": 2, "temperature": 0.5}, VOTES,
            ((2, 3, 4), (2, 3)),
        )

    def test_poses_are_layer_normalised_at_init(self):
        poses, _ = InvertedDotProductRouting()(VOTES)
        poses = to_numpy(poses)
        np.testing.assert_allclose(poses.mean(-1), 0.0, atol=1e-5)
        np.testing.assert_allclose(poses.var(-1), 1.0, rtol=1e-3)

    def test_errors(self):
        with pytest.raises(ValueError, match="iterations=0"):
            InvertedDotProductRouting(iterations=0)
        with pytest.raises(ValueError, match="temperature=-1"):
            InvertedDotProductRouting(temperature=-1)
        with pytest.raises(ValueError, match="dim"):
            InvertedDotProductRouting().build((None, 6, 3, None))


class TestSelfRouting(LayerTestCase):
    def test_layer(self):
        self.run_layer_test(
            SelfRouting, {}, VOTES, ((2, 3, 4), (2, 3)), run_mixed_precision_check=False
        )

    def test_with_activations_in_a_capsule_layer(self):
        poses = RNG.normal(size=(2, 6, 5)).astype("float32")
        activations = RNG.uniform(size=(2, 6)).astype("float32")
        self.run_layer_test(
            Capsule, {"num_capsules": 3, "capsule_dim": 4,
             "router": keras.saving.serialize_keras_object(SelfRouting()),
                      "return_activations": True},
            [poses, activations], ((2, 3, 4), (2, 3)), run_mixed_precision_check=False,
        )

    def test_uniform_at_init_and_finite_for_zero_activations(self):
        router = SelfRouting()
        poses, activations, c = router(VOTES, np.zeros((2, 6), "float32"),
                                       return_coefficients=True)
        np.testing.assert_allclose(to_numpy(c), 1.0 / 3, rtol=1e-6)
        assert np.all(np.isfinite(to_numpy(poses))) and np.all(to_numpy(activations) == 0)
        poses, activations = router(VOTES)
        np.testing.assert_allclose(to_numpy(poses), VOTES.mean(1), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(to_numpy(activations), 1.0 / 3, rtol=1e-5)

    def test_errors(self):
        with pytest.raises(ValueError, match="in_caps"):
            SelfRouting()(keras.Input((None, 3, 4)))


# --- layers -------------------------------------------------------------------


class TestCapsuleAttention(LayerTestCase):
    def test_layer(self):
        self.run_layer_test(
            CapsuleAttention, {"num_heads": 2, "top_k": 2, "window_size": 3}, CAPSULES,
            (2, 6, 8),
        )

    def test_return_attention_scores(self):
        layer = CapsuleAttention(2)
        outputs, scores = layer(keras.Input((6, 8)), return_attention_scores=True)
        assert tuple(outputs.shape) == (None, 6, 8) and tuple(scores.shape) == (None, 2, 6, 6)
        outputs, scores = layer(CAPSULES, return_attention_scores=True)
        assert tuple(scores.shape) == (2, 2, 6, 6)
        np.testing.assert_allclose(to_numpy(outputs), to_numpy(layer(CAPSULES)), rtol=1e-6)

    def test_layer_global_squashed(self):
        self.run_layer_test(
            CapsuleAttention, {"num_heads": 4, "squash_output": True}, CAPSULES, (2, 6, 8),
            run_mixed_precision_check=False,
        )

    @pytest.mark.parametrize("top_k, window_size", ((None, 3), (2, None), (2, 5)))
    def test_masks(self, top_k, window_size):
        layer = CapsuleAttention(2, top_k=top_k, window_size=window_size)
        _, scores = layer(CAPSULES, return_attention_scores=True)
        scores = to_numpy(scores)
        np.testing.assert_allclose(scores.sum(-1), 1.0, rtol=1e-6)
        kept = scores > 0
        if window_size is not None:
            distance = np.abs(np.arange(6)[:, None] - np.arange(6))
            assert not np.any(kept[..., distance > window_size // 2])
        if top_k is not None:
            assert np.all(kept.sum(-1) <= top_k)

    @pytest.mark.parametrize(
        "kwargs, message",
        [({"num_heads": 0}, "num_heads=0"), ({"top_k": 0}, "top_k=0"),
         ({"window_size": -1}, "window_size=-1")],
    )
    def test_errors(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            CapsuleAttention(**kwargs)

    def test_build_errors(self):
        with pytest.raises(ValueError, match="num_heads=3"):
            CapsuleAttention(num_heads=3)(CAPSULES)
        with pytest.raises(ValueError, match="top_k=7"):
            CapsuleAttention(num_heads=2, top_k=7)(CAPSULES)


class TestCapsulePruning(LayerTestCase):
    def test_layer(self):
        self.run_layer_test(CapsulePruning, {"threshold": 0.9}, CAPSULES, (2, 6, 8),
                            run_training_check=False)

    def test_prunes_near_duplicates_and_passes_the_rest(self):
        x = CAPSULES.copy()
        x[:, 4] = 3.0 * x[:, 1] + 1e-3
        x[0, 2] = 0.0
        y = to_numpy(CapsulePruning(0.95)(x))
        assert np.all(y[:, 4] == 0)
        keep = np.ones(6, bool)
        keep[4] = False
        np.testing.assert_array_equal(y[:, keep], x[:, keep])

    def test_in_a_trained_model(self):
        inputs = keras.Input((6, 8))
        model = keras.Model(inputs, keras.layers.Dense(2)(CapsulePruning()(inputs)))
        model.compile("sgd", "mse", jit_compile=jit_compile_for_backend())
        assert np.isfinite(model.train_on_batch(CAPSULES, np.zeros((2, 6, 2), "float32")))

    @pytest.mark.parametrize("threshold", (1.5, -2, "high", True))
    def test_errors(self, threshold):
        with pytest.raises(ValueError, match="threshold="):
            CapsulePruning(threshold)


class TestOrthogonalCapsule(LayerTestCase):
    def test_layer(self):
        self.run_layer_test(
            Capsule, {"num_capsules": 3, "capsule_dim": 4, "orthogonal": True},
            CAPSULES[..., :5], (2, 3, 4),
        )

    @pytest.mark.parametrize("in_dim, capsule_dim, share", ((5, 8, False), (8, 4, True)))
    def test_transforms_stay_orthonormal_while_training(self, in_dim, capsule_dim, share):
        layer = Capsule(3, capsule_dim, orthogonal=True, share_weights=share,
                        router=SparseAttentionRouting())
        inputs = keras.Input((6, in_dim))
        model = keras.Model(inputs, layer(inputs))
        # XLA is covered by test_layer; here only the weights matter.
        model.compile(keras.optimizers.Adam(0.1), "mse", jit_compile=keras.backend.backend() == "jax")
        before = to_numpy(layer.transforms())
        x = RNG.normal(size=(8, 6, in_dim)).astype("float32")
        model.fit(x, RNG.normal(size=(8, 3, capsule_dim)).astype("float32"),
                  batch_size=4, epochs=2, verbose=0)
        w = to_numpy(layer.transforms())
        assert w.shape == ((3,) if share else (6, 3)) + (in_dim, capsule_dim)
        assert np.max(np.abs(w - before)) > 1e-3  # it did train
        gram = w @ np.swapaxes(w, -1, -2) if in_dim <= capsule_dim else np.swapaxes(w, -1, -2) @ w
        np.testing.assert_allclose(gram, np.broadcast_to(np.eye(min(in_dim, capsule_dim)), gram.shape), atol=1e-5)

    def test_householder_errors_and_dtype(self):
        with pytest.raises(ValueError, match="v.shape"):
            householder_orthogonal(keras.ops.ones((2, 4, 4)), 3, 5)
        w = householder_orthogonal(keras.ops.cast(RNG.normal(size=(4, 4)), "float16"), 2, 4)
        assert keras.backend.standardize_dtype(w.dtype) == "float16"
        np.testing.assert_allclose(to_numpy(w) @ to_numpy(w).T, np.eye(2), atol=5e-3)


class TestOrthogonalConvCapsule(LayerTestCase):
    def test_layer(self):
        from keras_capsules.layers import ConvCapsule2D

        grid = RNG.normal(size=(2, 4, 4, 2, 3)).astype("float32")
        self.run_layer_test(
            ConvCapsule2D, {"num_capsules": 2, "capsule_dim": 4, "kernel_size": 2,
                            "strides": 2, "orthogonal": True},
            grid, (2, 2, 2, 2, 4), run_mixed_precision_check=False,
        )

    def test_transforms_stay_orthonormal_while_training(self):
        from keras_capsules.layers import ConvCapsule1D

        layer = ConvCapsule1D(3, 4, kernel_size=3, orthogonal=True)
        inputs = keras.Input((6, 2, 5))
        model = keras.Model(inputs, layer(inputs))
        model.compile(keras.optimizers.Adam(0.1), "mse", jit_compile=keras.backend.backend() == "jax")
        before = to_numpy(layer.transforms())
        model.fit(RNG.normal(size=(8, 6, 2, 5)).astype("float32"),
                  RNG.normal(size=(8, 4, 3, 4)).astype("float32"), batch_size=4, epochs=2, verbose=0)
        w = to_numpy(layer.transforms())
        assert w.shape == (3, 2, 3, 5, 4)
        assert np.max(np.abs(w - before)) > 1e-3
        gram = np.swapaxes(w, -1, -2) @ w  # in_dim 5 > capsule_dim 4: orthonormal columns
        np.testing.assert_allclose(gram, np.broadcast_to(np.eye(4), gram.shape), atol=1e-5)
