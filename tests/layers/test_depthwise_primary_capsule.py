"""DepthwisePrimaryCapsule (EfficientCapsNet's primary capsules): the layer
test, values, regularizers and constraints, and configs saved before them."""

import keras
import numpy as np

from keras_capsules.layers import DepthwisePrimaryCapsule
from tests.test_case import LayerTestCase, to_numpy

FEATURES = np.random.default_rng(0).normal(size=(2, 3, 3, 8)).astype("float32")


class TestDepthwisePrimaryCapsule(LayerTestCase):
    def test_layer(self):
        self.run_layer_test(
            DepthwisePrimaryCapsule,
            {"num_capsules": 4, "capsule_dim": 2},
            FEATURES,
            (2, 4, 2),
            expected_num_trainable_weights=2,
            expected_num_non_trainable_weights=0,
        )

    def test_values(self):
        layer = DepthwisePrimaryCapsule(4, 2, bias_initializer="ones")
        y = to_numpy(layer(FEATURES))
        s = (FEATURES * to_numpy(layer.kernel)).sum((1, 2)).reshape(2, 4, 2) + 1.0
        n = np.sqrt((s**2).sum(-1, keepdims=True) + 1e-7)
        np.testing.assert_allclose(y, (1 - np.exp(-n)) * s / n, rtol=1e-5, atol=1e-6)

    def test_regularizers_and_constraints(self):
        layer = DepthwisePrimaryCapsule(
            4,
            2,
            kernel_regularizer=keras.regularizers.L2(0.1),
            bias_regularizer="l1",
            kernel_constraint=keras.constraints.NonNeg(),
            bias_constraint="non_neg",
        )
        layer(FEATURES)
        assert len(layer.losses) == 2
        expected = 0.1 * (to_numpy(layer.kernel) ** 2).sum()
        np.testing.assert_allclose(to_numpy(layer.losses[0]), expected, rtol=1e-5)
        assert isinstance(layer.kernel.constraint, keras.constraints.NonNeg)
        assert isinstance(layer.bias.constraint, keras.constraints.NonNeg)
        restored = DepthwisePrimaryCapsule.from_config(layer.get_config())
        assert restored.get_config() == layer.get_config()
        assert isinstance(restored.kernel_regularizer, keras.regularizers.L2)
        # Defaults: what the layer did before these arguments existed.
        config = DepthwisePrimaryCapsule(4, 2).get_config()
        assert config["kernel_regularizer"] is None and config["bias_constraint"] is None
        old = {
            k: v
            for k, v in config.items()
            if "regularizer" not in k and "constraint" not in k and k != "bias_initializer"
        }
        assert DepthwisePrimaryCapsule.from_config(old).get_config() == config
