"""The matrix-capsule layers: shapes, votes, coordinate addition, config, training, errors."""

import keras
import numpy as np
import pytest

import keras_capsules
from keras_capsules.layers import ClassMatrixCapsule, ConvMatrixCapsule, PrimaryMatrixCapsule
from keras_capsules.routing import EMRouting
from tests.test_case import LayerTestCase, to_numpy

RNG = np.random.default_rng(0)
IMAGES = RNG.normal(size=(2, 5, 5, 3)).astype("float32")
POSES = RNG.normal(size=(2, 4, 4, 2, 16)).astype("float32")
GRID_ACTIVATIONS = RNG.uniform(size=(2, 4, 4, 2)).astype("float32")
# Layer tests route with 2 EM iterations (compile time under XLA); a config,
# not an instance, because each layer the test builds needs its own router.
EM2 = keras.saving.serialize_keras_object(EMRouting(iterations=2))


class TestPrimaryMatrixCapsule(LayerTestCase):
    def test_weight_arguments(self):
        self.run_weight_arguments_test(
            PrimaryMatrixCapsule,
            {"num_capsules": 2, "kernel_size": 2},
            IMAGES,
            {
                "kernel": ["pose_kernel", "activation_kernel"],
                "bias": ["pose_bias", "activation_bias"],
            },
        )

    def test_layer(self):
        self.run_layer_test(
            PrimaryMatrixCapsule,
            {"num_capsules": 3, "kernel_size": 2},
            IMAGES,
            ((2, 4, 4, 3, 16), (2, 4, 4, 3)),
            expected_num_trainable_weights=4,
            expected_num_non_trainable_weights=0,
        )

    def test_layer_strided_as_slices_and_matmul(self):
        self.run_layer_test(
            PrimaryMatrixCapsule,
            {"num_capsules": 3, "kernel_size": 2, "strides": 2, "implementation": "matmul"},
            IMAGES,
            ((2, 2, 2, 3, 16), (2, 2, 2, 3)),
            expected_num_trainable_weights=4,
            expected_num_non_trainable_weights=0,
        )

    def test_strides_padding(self):
        poses, activations = PrimaryMatrixCapsule(2, 3, strides=2, padding="same")(IMAGES)
        assert tuple(poses.shape) == (2, 3, 3, 2, 16)
        a = to_numpy(activations)
        assert a.shape == (2, 3, 3, 2) and np.all((a > 0) & (a < 1))

    def test_errors(self):
        with pytest.raises(ValueError, match="num_capsules=0"):
            PrimaryMatrixCapsule(0)
        with pytest.raises(ValueError, match="ndim=4"):
            PrimaryMatrixCapsule(2)(keras.Input((5, 5)))
        with pytest.raises(ValueError, match="kernel_size"):
            PrimaryMatrixCapsule(2, 7)(keras.Input((5, 5, 3)))
        with pytest.raises(ValueError, match="implementation='fft'"):
            PrimaryMatrixCapsule(2, implementation="fft")


class TestConvMatrixCapsule(LayerTestCase):
    def test_weight_arguments(self):
        self.run_weight_arguments_test(
            ConvMatrixCapsule,
            {"num_capsules": 2, "kernel_size": 3, "router": EM2},
            [POSES, GRID_ACTIVATIONS],
            {"kernel": ["kernel"]},
        )

    def test_layer(self):
        self.run_layer_test(
            ConvMatrixCapsule,
            {"num_capsules": 3, "kernel_size": 3, "strides": 2, "router": EM2},
            [POSES, GRID_ACTIVATIONS],
            ((2, 1, 1, 3, 16), (2, 1, 1, 3)),
            expected_num_trainable_weights=3,
            expected_num_non_trainable_weights=0,
        )

    def test_votes_are_pose_times_transform(self):
        """A 1x1 kernel and one EM iteration: parent pose = activation-weighted
        mean of M @ W over the child types."""
        layer = ConvMatrixCapsule(2, 1, router=EMRouting(iterations=1))
        layer.build([POSES.shape, GRID_ACTIVATIONS.shape])
        w = RNG.normal(size=layer.kernel.shape).astype("float32")
        layer.kernel.assign(w)
        poses, _ = layer([POSES, GRID_ACTIVATIONS])
        votes = np.matmul(POSES.reshape(2, 4, 4, 2, 1, 4, 4), w[0, 0][None, None, None])
        a = GRID_ACTIVATIONS[..., None, None, None]
        expected = (votes * a).sum(3) / (a.sum(3) + 1e-7)
        np.testing.assert_allclose(
            to_numpy(poses), expected.reshape(2, 4, 4, 2, 16), rtol=1e-5, atol=1e-5
        )

    def test_default_router_is_em(self):
        assert isinstance(ConvMatrixCapsule(2).router, EMRouting)
        assert isinstance(ClassMatrixCapsule(2).router, EMRouting)

    def test_errors(self):
        with pytest.raises(ValueError, match="num_capsules=0"):
            ConvMatrixCapsule(0)
        with pytest.raises(ValueError, match="poses.shape"):
            ConvMatrixCapsule(2)([keras.Input((4, 4, 2, 9)), keras.Input((4, 4, 2))])
        with pytest.raises(ValueError, match="kernel_size=\\(5, 5\\)"):
            ConvMatrixCapsule(2, 5)([keras.Input((4, 4, 2, 16)), keras.Input((4, 4, 2))])
        with pytest.raises(ValueError, match="\\[poses, activations\\]"):
            ConvMatrixCapsule(2)(keras.Input((4, 4, 2, 16)))
        with pytest.raises(ValueError, match="activations.shape"):
            ConvMatrixCapsule(2)([keras.Input((4, 4, 2, 16)), keras.Input((4, 4, 3))])


class TestClassMatrixCapsule(LayerTestCase):
    def test_weight_arguments(self):
        self.run_weight_arguments_test(
            ClassMatrixCapsule,
            {"num_capsules": 2, "router": EM2},
            [POSES, GRID_ACTIVATIONS],
            {"kernel": ["kernel"]},
        )

    def test_layer(self):
        self.run_layer_test(
            ClassMatrixCapsule,
            {"num_capsules": 3, "router": EM2},
            [POSES, GRID_ACTIVATIONS],
            ((2, 3, 16), (2, 3)),
            expected_num_trainable_weights=3,
            expected_num_non_trainable_weights=0,
        )

    @pytest.mark.parametrize("coordinate_addition", (True, False))
    def test_coordinate_addition(self, coordinate_addition):
        """Zero transforms: the votes are the scaled centres (or zero)."""
        layer = ClassMatrixCapsule(
            2,
            router=EMRouting(iterations=1),
            coordinate_addition=coordinate_addition,
            kernel_initializer="zeros",
        )
        poses = to_numpy(layer([POSES, GRID_ACTIVATIONS])[0])
        rows = (np.arange(4) + 0.5) / 4
        a = GRID_ACTIVATIONS
        expected = np.zeros((2, 2, 16))
        if coordinate_addition:
            total = a.sum((1, 2, 3)) + 1e-7
            expected[:, :, 3] = (np.einsum("bhwt,h->b", a, rows) / total)[:, None]
            expected[:, :, 7] = (np.einsum("bhwt,w->b", a, rows) / total)[:, None]
        np.testing.assert_allclose(poses, expected, rtol=1e-5, atol=1e-6)

    def test_errors(self):
        with pytest.raises(ValueError, match="num_capsules=0"):
            ClassMatrixCapsule(0)
        with pytest.raises(ValueError, match="poses.shape"):
            ClassMatrixCapsule(2)([keras.Input((4, 4, 2, 8)), keras.Input((4, 4, 2))])
        with pytest.raises(ValueError, match="grid"):
            ClassMatrixCapsule(2)([keras.Input((None, 4, 2, 16)), keras.Input((None, 4, 2))])


def test_exported():
    assert keras_capsules.EMRouting is EMRouting
    for layer in (PrimaryMatrixCapsule, ConvMatrixCapsule, ClassMatrixCapsule):
        assert getattr(keras_capsules, layer.__name__) is layer


def test_class_matrix_capsule_takes_num_capsules_only():
    """`num_classes` was removed from the constructor (CHANGELOG.md)."""
    with pytest.raises(TypeError):
        keras_capsules.ClassMatrixCapsule(num_classes=3)
    with pytest.raises(ValueError, match="num_classes"):
        keras_capsules.ClassMatrixCapsule(3, num_classes=3)
    config = keras_capsules.ClassMatrixCapsule(3).get_config()
    assert config["num_capsules"] == 3 and "num_classes" not in config
