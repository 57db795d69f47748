"""SparseAttentionRouting: sparse coefficients, top-k, config, training, errors.

Values: the parity matrix.
"""

import numpy as np
import pytest

from keras_capsules.routing import SparseAttentionRouting
from tests.test_case import LayerTestCase, to_numpy

VOTES = np.random.default_rng(0).normal(size=(2, 6, 3, 4)).astype("float32")


class TestSparseAttentionRouting(LayerTestCase):
    @pytest.mark.parametrize("top_k", (None, 2))
    def test_layer(self, top_k):
        self.run_layer_test(
            SparseAttentionRouting,
            {"top_k": top_k, "temperature": 4.0},
            VOTES,
            ((2, 3, 4), (2, 3)),
            run_mixed_precision_check=top_k is None,
            expected_num_trainable_weights=0,
            expected_num_non_trainable_weights=0,
        )

    @pytest.mark.parametrize("top_k", (None, 1, 2))
    def test_coefficients_are_sparse_distributions(self, top_k):
        _, _, c = SparseAttentionRouting(top_k=top_k)(VOTES, return_coefficients=True)
        c = to_numpy(c)
        np.testing.assert_allclose(c.sum(-1), 1.0, rtol=1e-6)
        if top_k is not None:
            assert np.all((c > 0).sum(-1) == top_k)

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            ({"top_k": 0}, "top_k=0"),
            ({"top_k": 1.5}, "top_k=1.5"),
            ({"temperature": 0}, "temperature=0"),
        ],
    )
    def test_errors(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            SparseAttentionRouting(**kwargs)

    def test_top_k_larger_than_out_caps(self):
        with pytest.raises(ValueError, match="top_k=4"):
            SparseAttentionRouting(top_k=4)(VOTES)
