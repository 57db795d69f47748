"""InvertedDotProductRouting: layer-normalised poses, config, training, errors.

Values: the parity matrix.
"""

import numpy as np
import pytest

from keras_capsules.routing import InvertedDotProductRouting
from tests.test_case import LayerTestCase, to_numpy

VOTES = np.random.default_rng(0).normal(size=(2, 6, 3, 4)).astype("float32")


class TestInvertedDotProductRouting(LayerTestCase):
    def test_layer(self):
        self.run_layer_test(
            InvertedDotProductRouting,
            {"iterations": 2, "temperature": 0.5},
            VOTES,
            ((2, 3, 4), (2, 3)),
            expected_num_trainable_weights=2,
            expected_num_non_trainable_weights=0,
        )

    def test_poses_are_layer_normalised_at_init(self):
        poses, _ = InvertedDotProductRouting()(VOTES)
        poses = to_numpy(poses)
        np.testing.assert_allclose(poses.mean(-1), 0.0, atol=1e-5)
        np.testing.assert_allclose(poses.var(-1), 1.0, rtol=1e-3)

    def test_errors(self):
        with pytest.raises(ValueError, match="iterations=0"):
            InvertedDotProductRouting(iterations=0)
        with pytest.raises(ValueError, match="temperature=-1"):
            InvertedDotProductRouting(temperature=-1)
        with pytest.raises(ValueError, match="dim"):
            InvertedDotProductRouting().build((None, 6, 3, None))
