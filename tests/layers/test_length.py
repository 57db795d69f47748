"""Length: the safe norm of each capsule."""

import numpy as np

from keras_capsules.layers import Length
from tests.test_case import LayerTestCase, to_numpy

POSES = np.random.default_rng(0).normal(size=(2, 6, 4)).astype("float32")


class TestLength(LayerTestCase):
    def test_layer(self):
        self.run_layer_test(
            Length,
            {},
            POSES,
            (2, 6),
            expected_num_trainable_weights=0,
            expected_num_non_trainable_weights=0,
        )

    def test_values(self):
        expected = np.sqrt((POSES**2).sum(-1) + 1e-7)
        np.testing.assert_allclose(to_numpy(Length()(POSES)), expected, rtol=1e-6)
