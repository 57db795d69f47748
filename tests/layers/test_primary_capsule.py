"""PrimaryCapsule: shapes, capsule layout, config, training, errors."""

import keras
import numpy as np
import pytest

from keras_capsules.layers import PrimaryCapsule
from tests.test_case import LayerTestCase, to_numpy

IMAGES = np.random.default_rng(0).normal(size=(2, 9, 9, 3)).astype("float32")


class TestPrimaryCapsule(LayerTestCase):
    def test_weight_arguments(self):
        self.run_weight_arguments_test(
            PrimaryCapsule,
            {"num_capsules": 2, "capsule_dim": 3, "kernel_size": 3},
            IMAGES,
            {"kernel": ["kernel"], "bias": ["bias"]},
        )

    def test_layer(self):
        self.run_layer_test(
            PrimaryCapsule,
            {"num_capsules": 4, "capsule_dim": 5, "kernel_size": 3, "strides": 2},
            IMAGES,
            (2, 4 * 4 * 4, 5),
            expected_num_trainable_weights=2,
            expected_num_non_trainable_weights=0,
        )

    def test_same_padding_no_squash(self):
        layer = PrimaryCapsule(2, 3, 3, padding="same", squash=False)
        assert tuple(layer(IMAGES).shape) == (2, 9 * 9 * 2, 3)

    def test_capsule_type_is_fastest_axis_after_position(self):
        layer = PrimaryCapsule(2, 3, 1, squash=False, bias_initializer="ones")
        layer.build(IMAGES.shape)
        layer.kernel.assign(np.zeros(layer.kernel.shape, "float32"))
        layer.bias.assign(np.arange(6, dtype="float32"))
        out = to_numpy(layer(IMAGES))
        np.testing.assert_array_equal(out[0, :2], [[0, 1, 2], [3, 4, 5]])

    def test_paper_shape(self):
        out = PrimaryCapsule(32, 8, 9, strides=2)(keras.Input((20, 20, 256)))
        assert tuple(out.shape) == (None, 1152, 8)

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            ({"num_capsules": 0}, "num_capsules=0"),
            ({"capsule_dim": -2}, "capsule_dim=-2"),
            ({"kernel_size": (3, 0)}, "kernel_size"),
            ({"padding": "full"}, "padding='full'"),
            ({"strides": 0}, "strides=0"),
        ],
    )
    def test_errors(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            PrimaryCapsule(**{"num_capsules": 2, "capsule_dim": 4, "kernel_size": 3, **kwargs})

    def test_kernel_larger_than_grid(self):
        with pytest.raises(ValueError, match="kernel_size"):
            PrimaryCapsule(2, 4, 11)(keras.Input((9, 9, 3)))


@pytest.mark.parametrize("implementation", ["auto", "matmul", "space_to_depth"])
def test_predicts_images_of_any_size(implementation):
    # TensorFlow traces `predict` on images of a second size with `None`
    # sizes, which only the native convolution takes: every form falls back
    # to it there, with the same numbers.
    images = keras.Input((None, None, 3))
    x = keras.layers.Conv2D(4, 3, strides=2)(images)  # unknown sizes downstream too
    capsules = PrimaryCapsule(2, 4, 3, strides=2, implementation=implementation)(x)
    model = keras.Model(images, capsules)
    rng = np.random.default_rng(0)
    for size, caps in ((11, 2 * 2 * 2), (15, 3 * 3 * 2)):
        x = rng.normal(size=(2, size, size, 3)).astype("float32")
        predicted = model.predict(x, verbose=0)
        assert predicted.shape == (2, caps, 4)
        np.testing.assert_allclose(predicted, to_numpy(model(x)), rtol=1e-5, atol=1e-6)
