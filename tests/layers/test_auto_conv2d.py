"""AutoConv2D: its implementations against keras.layers.Conv2D, and
implementation as a speed option that configs do not keep."""

import keras
import numpy as np
import pytest

from keras_capsules.layers import AutoConv2D
from tests.test_case import LayerTestCase, to_numpy

IMAGES = np.random.default_rng(0).normal(size=(2, 9, 9, 3)).astype("float32")


class TestAutoConv2D(LayerTestCase):
    def test_weight_arguments(self):
        """Keras's own Conv2D arguments, passed through."""
        self.run_weight_arguments_test(
            AutoConv2D,
            {"filters": 2, "kernel_size": 3, "implementation": "matmul"},
            IMAGES,
            {"kernel": ["kernel"], "bias": ["bias"]},
        )

    def test_layer(self):
        self.run_layer_test(
            AutoConv2D,
            {
                "filters": 4,
                "kernel_size": 3,
                "strides": 2,
                "activation": "relu",
                "implementation": "matmul",
            },
            IMAGES,
            (2, 4, 4, 4),
            expected_num_trainable_weights=2,
            expected_num_non_trainable_weights=0,
        )

    def test_implementations_agree_with_keras_conv2d(self):
        reference = keras.layers.Conv2D(4, 3, strides=2, padding="same")
        expected = to_numpy(reference(IMAGES))
        for implementation in ("auto", "conv", "matmul", "hybrid", "space_to_depth"):
            layer = AutoConv2D(4, 3, strides=2, padding="same", implementation=implementation)
            layer.build(IMAGES.shape)
            layer.set_weights(reference.get_weights())
            np.testing.assert_allclose(to_numpy(layer(IMAGES)), expected, rtol=1e-5, atol=1e-5)

    def test_auto_falls_back_to_the_native_conv_where_matmul_does_not_apply(self):
        layer = AutoConv2D(6, 3, strides=2, groups=3)
        assert tuple(layer(IMAGES).shape) == (2, 4, 4, 6)
        for implementation in ("matmul", "hybrid", "space_to_depth"):
            with pytest.raises(ValueError, match="groups=3"):
                AutoConv2D(6, 3, strides=2, groups=3, implementation=implementation)
        with pytest.raises(ValueError, match="implementation='fft'"):
            AutoConv2D(4, 3, implementation="fft")

    def test_xla_hint_is_a_public_runtime_attribute(self):
        layer = AutoConv2D(4, 3, strides=2)
        assert layer.xla is None
        layer.xla = True
        assert "xla" not in layer.get_config()
        assert AutoConv2D.from_config(layer.get_config()).xla is None


def test_implementation_is_a_speed_option_not_saved(tmp_path):
    """A layer saved with `implementation="matmul"` loads with `"auto"`, the
    fastest form where it is loaded, and computes the same outputs."""
    layer = AutoConv2D(4, 3, strides=2, implementation="matmul")
    assert "implementation" not in layer.get_config()
    images = keras.Input(IMAGES.shape[1:])
    model = keras.Model(images, layer(images))
    path = str(tmp_path / "auto_conv2d.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert loaded.layers[1].implementation == "auto"
    np.testing.assert_allclose(to_numpy(loaded(IMAGES)), to_numpy(model(IMAGES)), atol=1e-5)


@pytest.mark.parametrize("implementation", ["auto", "matmul", "space_to_depth"])
def test_predicts_images_of_any_size(implementation):
    # As PrimaryCapsule: `None` sizes when traced take the native convolution.
    images = keras.Input((None, None, 2))
    model = keras.Model(images, AutoConv2D(3, 3, strides=2, implementation=implementation)(images))
    rng = np.random.default_rng(0)
    for size in (7, 10):
        x = rng.normal(size=(2, size, size, 2)).astype("float32")
        out = (size - 3) // 2 + 1
        predicted = model.predict(x, verbose=0)
        assert predicted.shape == (2, out, out, 3)
        np.testing.assert_allclose(predicted, to_numpy(model(x)), rtol=1e-5, atol=1e-6)
