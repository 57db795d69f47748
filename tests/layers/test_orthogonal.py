"""Orthogonal (Householder) transforms of Capsule and ConvCapsule layers."""

import keras
import numpy as np
import pytest

from keras_capsules.layers import Capsule
from keras_capsules.ops import householder_orthogonal
from keras_capsules.routing import SparseAttentionRouting
from tests.test_case import LayerTestCase, jit_compile_for_backend, to_numpy

RNG = np.random.default_rng(0)
CAPSULES = RNG.normal(size=(2, 6, 8)).astype("float32")


class TestOrthogonalCapsule(LayerTestCase):
    def test_weight_arguments_govern_the_householder_vectors(self):
        self.run_weight_arguments_test(
            Capsule,
            {"num_capsules": 3, "capsule_dim": 4, "orthogonal": True},
            CAPSULES,
            {"kernel": ["householder"]},
        )

    def test_householder_vectors_are_read_in_float32_under_mixed_precision(self):
        """Vectors too large for float16 (read as float16 they would be inf):
        the mixed layer matches the float32 layer on the same float16-rounded
        inputs, within float16 rounding of the votes."""
        x16 = CAPSULES[..., :5].astype("float16").astype("float32")
        layers = [Capsule(3, 4, orthogonal=True, dtype=p) for p in ("mixed_float16", "float32")]
        v = 1e5 * RNG.normal(size=(6, 3, 5, 5)).astype("float32")
        for layer in layers:
            layer.build(x16.shape)
            layer.householder.assign(v)
        mixed, full = (to_numpy(layer(x16)) for layer in layers)
        np.testing.assert_allclose(mixed, full, rtol=1e-2, atol=1e-2)

    def test_layer(self):
        self.run_layer_test(
            Capsule,
            {"num_capsules": 3, "capsule_dim": 4, "orthogonal": True},
            CAPSULES[..., :5],
            (2, 3, 4),
            expected_num_trainable_weights=1,
            expected_num_non_trainable_weights=0,
        )

    @pytest.mark.parametrize("in_dim, capsule_dim, share", ((5, 8, False), (8, 4, True)))
    def test_transforms_stay_orthonormal_while_training(self, in_dim, capsule_dim, share):
        layer = Capsule(
            3, capsule_dim, orthogonal=True, share_weights=share, router=SparseAttentionRouting()
        )
        inputs = keras.Input((6, in_dim))
        model = keras.Model(inputs, layer(inputs))
        # XLA is covered by test_layer; here only the weights matter.
        model.compile(
            keras.optimizers.Adam(0.1),
            "mse",
            jit_compile=jit_compile_for_backend(xla_on_tensorflow=False),
        )
        before = to_numpy(layer.transforms())
        x = RNG.normal(size=(8, 6, in_dim)).astype("float32")
        model.fit(
            x,
            RNG.normal(size=(8, 3, capsule_dim)).astype("float32"),
            batch_size=4,
            epochs=2,
            verbose=0,
        )
        w = to_numpy(layer.transforms())
        assert w.shape == ((3,) if share else (6, 3)) + (in_dim, capsule_dim)
        assert np.max(np.abs(w - before)) > 1e-3  # it did train
        gram = w @ np.swapaxes(w, -1, -2) if in_dim <= capsule_dim else np.swapaxes(w, -1, -2) @ w
        np.testing.assert_allclose(
            gram, np.broadcast_to(np.eye(min(in_dim, capsule_dim)), gram.shape), atol=1e-5
        )

    def test_householder_errors_and_dtype(self):
        with pytest.raises(ValueError, match="v.shape"):
            householder_orthogonal(keras.ops.ones((2, 4, 4)), 3, 5)
        w = householder_orthogonal(keras.ops.cast(RNG.normal(size=(4, 4)), "float16"), 2, 4)
        assert keras.backend.standardize_dtype(w.dtype) == "float16"
        np.testing.assert_allclose(to_numpy(w) @ to_numpy(w).T, np.eye(2), atol=5e-3)


class TestOrthogonalConvCapsule(LayerTestCase):
    def test_weight_arguments_govern_the_householder_vectors(self):
        from keras_capsules.layers import ConvCapsule2D

        grid = RNG.normal(size=(2, 4, 4, 2, 3)).astype("float32")
        self.run_weight_arguments_test(
            ConvCapsule2D,
            {"num_capsules": 2, "capsule_dim": 4, "kernel_size": 2, "orthogonal": True},
            grid,
            {"kernel": ["householder"]},
        )

    def test_layer(self):
        from keras_capsules.layers import ConvCapsule2D

        grid = RNG.normal(size=(2, 4, 4, 2, 3)).astype("float32")
        self.run_layer_test(
            ConvCapsule2D,
            {
                "num_capsules": 2,
                "capsule_dim": 4,
                "kernel_size": 2,
                "strides": 2,
                "orthogonal": True,
            },
            grid,
            (2, 2, 2, 2, 4),
            run_mixed_precision_check=False,
            expected_num_trainable_weights=1,
            expected_num_non_trainable_weights=0,
        )

    def test_transforms_stay_orthonormal_while_training(self):
        from keras_capsules.layers import ConvCapsule1D

        layer = ConvCapsule1D(3, 4, kernel_size=3, orthogonal=True)
        inputs = keras.Input((6, 2, 5))
        model = keras.Model(inputs, layer(inputs))
        model.compile(
            keras.optimizers.Adam(0.1),
            "mse",
            jit_compile=jit_compile_for_backend(xla_on_tensorflow=False),
        )
        before = to_numpy(layer.transforms())
        model.fit(
            RNG.normal(size=(8, 6, 2, 5)).astype("float32"),
            RNG.normal(size=(8, 4, 3, 4)).astype("float32"),
            batch_size=4,
            epochs=2,
            verbose=0,
        )
        w = to_numpy(layer.transforms())
        assert w.shape == (3, 2, 3, 5, 4)
        assert np.max(np.abs(w - before)) > 1e-3
        gram = np.swapaxes(w, -1, -2) @ w  # in_dim 5 > capsule_dim 4: orthonormal columns
        np.testing.assert_allclose(gram, np.broadcast_to(np.eye(4), gram.shape), atol=1e-5)
