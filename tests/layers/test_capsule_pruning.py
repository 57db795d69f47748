"""CapsulePruning: prunes near-duplicate capsules, trains, errors."""

import keras
import numpy as np
import pytest

from keras_capsules.layers import CapsulePruning
from tests.test_case import LayerTestCase, jit_compile_for_backend, to_numpy

CAPSULES = np.random.default_rng(0).normal(size=(2, 6, 8)).astype("float32")


class TestCapsulePruning(LayerTestCase):
    def test_layer(self):
        self.run_layer_test(
            CapsulePruning,
            {"threshold": 0.9},
            CAPSULES,
            (2, 6, 8),
            run_training_check=False,
            expected_num_trainable_weights=0,
            expected_num_non_trainable_weights=0,
        )

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
