"""PrimaryCapsule1D: a convolution over time against a NumPy reference,
the layer harness, its config's 1-D sizes, errors."""

import keras
import numpy as np
import pytest

from keras_capsules.layers import PrimaryCapsule1D
from tests.test_case import LayerTestCase, to_numpy

SEQUENCES = np.random.default_rng(0).normal(size=(2, 11, 3)).astype("float32")


def reference(x, kernel, bias, stride):
    """A valid 1-D convolution in float64, `(batch, steps', filters)`."""
    width = kernel.shape[0]
    steps = (x.shape[1] - width) // stride + 1
    windows = np.stack([x[:, s * stride : s * stride + width] for s in range(steps)], 1)
    return np.einsum("bskc,kcf->bsf", windows.astype("float64"), kernel) + bias


class TestPrimaryCapsule1D(LayerTestCase):
    def test_weight_arguments(self):
        self.run_weight_arguments_test(
            PrimaryCapsule1D,
            {"num_capsules": 2, "capsule_dim": 3, "kernel_size": 3},
            SEQUENCES,
            {"kernel": ["kernel"], "bias": ["bias"]},
        )

    def test_layer(self):
        self.run_layer_test(
            PrimaryCapsule1D,
            {"num_capsules": 4, "capsule_dim": 5, "kernel_size": 3, "strides": 2},
            SEQUENCES,
            (2, 5 * 4, 5),
            expected_num_trainable_weights=2,
            expected_num_non_trainable_weights=0,
        )

    @pytest.mark.parametrize("implementation", ["conv", "matmul", "auto"])
    def test_matches_float64_convolution(self, implementation):
        layer = PrimaryCapsule1D(2, 3, 4, strides=2, squash=False, implementation=implementation)
        out = to_numpy(layer(SEQUENCES))
        kernel = to_numpy(layer.kernel)[0].astype("float64")  # (width, channels, filters)
        expected = reference(SEQUENCES, kernel, to_numpy(layer.bias), 2).reshape(2, -1, 3)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)

    def test_config_keeps_1d_sizes(self):
        config = PrimaryCapsule1D(2, 3, 5, strides=2, padding="same").get_config()
        assert (config["kernel_size"], config["strides"]) == (5, 2)

    def test_same_padding_and_any_length(self):
        layer = PrimaryCapsule1D(2, 3, 3, padding="same")
        out = layer(keras.Input((None, 3)))
        assert tuple(out.shape) == (None, None, 3)
        assert tuple(layer(SEQUENCES).shape) == (2, 11 * 2, 3)

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            ({"num_capsules": 0}, "num_capsules=0"),
            ({"capsule_dim": -2}, "capsule_dim=-2"),
            ({"kernel_size": (3, 3)}, "kernel_size=\\(3, 3\\)"),
            ({"kernel_size": 0}, "kernel_size=0"),
            ({"strides": 1.5}, "strides=1.5"),
            ({"padding": "causal"}, "padding='causal'"),
        ],
    )
    def test_errors(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            PrimaryCapsule1D(**{"num_capsules": 2, "capsule_dim": 4, "kernel_size": 3, **kwargs})

    def test_kernel_longer_than_sequence(self):
        with pytest.raises(ValueError, match="kernel_size"):
            PrimaryCapsule1D(2, 4, 12)(keras.Input((11, 3)))

    def test_rank_and_channels(self):
        with pytest.raises(ValueError, match="ndim=3"):
            PrimaryCapsule1D(2, 4, 3)(keras.Input((9, 9, 3)))
        with pytest.raises(ValueError, match="known channels"):
            PrimaryCapsule1D(2, 4, 3).build((None, 9, None))
