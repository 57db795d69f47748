"""SelfRouting: uniform at init, with activations, config, training, errors.

Values: the parity matrix.
"""

import keras
import numpy as np
import pytest

from keras_capsules.layers import Capsule
from keras_capsules.routing import SelfRouting
from tests.test_case import LayerTestCase, to_numpy

RNG = np.random.default_rng(0)
VOTES = RNG.normal(size=(2, 6, 3, 4)).astype("float32")


class TestSelfRouting(LayerTestCase):
    def test_layer(self):
        self.run_layer_test(
            SelfRouting,
            {},
            VOTES,
            ((2, 3, 4), (2, 3)),
            run_mixed_precision_check=False,
            expected_num_trainable_weights=2,
            expected_num_non_trainable_weights=0,
        )

    def test_with_activations_in_a_capsule_layer(self):
        poses = RNG.normal(size=(2, 6, 5)).astype("float32")
        activations = RNG.uniform(size=(2, 6)).astype("float32")
        self.run_layer_test(
            Capsule,
            {
                "num_capsules": 3,
                "capsule_dim": 4,
                "router": keras.saving.serialize_keras_object(SelfRouting()),
                "return_activations": True,
            },
            [poses, activations],
            ((2, 3, 4), (2, 3)),
            run_mixed_precision_check=False,
            expected_num_trainable_weights=3,
            expected_num_non_trainable_weights=0,
        )

    def test_uniform_at_init_and_finite_for_zero_activations(self):
        router = SelfRouting()
        poses, activations, c = router(VOTES, np.zeros((2, 6), "float32"), return_coefficients=True)
        np.testing.assert_allclose(to_numpy(c), 1.0 / 3, rtol=1e-6)
        assert np.all(np.isfinite(to_numpy(poses))) and np.all(to_numpy(activations) == 0)
        poses, activations = router(VOTES)
        np.testing.assert_allclose(to_numpy(poses), VOTES.mean(1), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(to_numpy(activations), 1.0 / 3, rtol=1e-5)

    def test_errors(self):
        with pytest.raises(ValueError, match="in_caps"):
            SelfRouting()(keras.Input((None, 3, 4)))
