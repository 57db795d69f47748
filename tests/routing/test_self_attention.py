"""SelfAttentionRouting: config, training, errors (values: parity matrix)."""

import keras
import numpy as np
import pytest

from tests.test_case import LayerTestCase

VOTES = np.random.default_rng(0).normal(size=(2, 6, 3, 4)).astype("float32")


class TestSelfAttentionRouting(LayerTestCase):
    def test_layer(self):
        from keras_capsules.routing import SelfAttentionRouting

        self.run_layer_test(
            SelfAttentionRouting,
            {"temperature": 2.0},
            VOTES,
            ((2, 3, 4), (2, 3)),
            expected_num_trainable_weights=1,
            expected_num_non_trainable_weights=0,
        )

    def test_errors(self):
        from keras_capsules.routing import SelfAttentionRouting

        with pytest.raises(ValueError, match="temperature=0"):
            SelfAttentionRouting(temperature=0)
        with pytest.raises(ValueError, match="in_caps"):
            SelfAttentionRouting()(keras.Input((None, 3, 4)))
