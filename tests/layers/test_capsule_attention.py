"""CapsuleAttention: shapes, masks, attention scores, config, training, errors (values: parity matrix)."""

import keras
import numpy as np
import pytest

from keras_capsules.layers import CapsuleAttention
from tests.test_case import LayerTestCase, to_numpy

CAPSULES = np.random.default_rng(0).normal(size=(2, 6, 8)).astype("float32")


class TestCapsuleAttention(LayerTestCase):
    def test_layer(self):
        self.run_layer_test(
            CapsuleAttention, {"num_heads": 2, "top_k": 2, "window_size": 3}, CAPSULES,
            (2, 6, 8),
            expected_num_trainable_weights=2, expected_num_non_trainable_weights=0,
        )

    def test_return_attention_scores(self):
        layer = CapsuleAttention(2)
        outputs, scores = layer(keras.Input((6, 8)), return_attention_scores=True)
        assert tuple(outputs.shape) == (None, 6, 8) and tuple(scores.shape) == (None, 2, 6, 6)
        outputs, scores = layer(CAPSULES, return_attention_scores=True)
        assert tuple(scores.shape) == (2, 2, 6, 6)
        np.testing.assert_allclose(to_numpy(outputs), to_numpy(layer(CAPSULES)), rtol=1e-6)

    def test_layer_global_squashed(self):
        self.run_layer_test(
            CapsuleAttention, {"num_heads": 4, "squash_output": True}, CAPSULES, (2, 6, 8),
            run_mixed_precision_check=False,
            expected_num_trainable_weights=2, expected_num_non_trainable_weights=0,
        )

    @pytest.mark.parametrize("top_k, window_size", ((None, 3), (2, None), (2, 5)))
    def test_masks(self, top_k, window_size):
        layer = CapsuleAttention(2, top_k=top_k, window_size=window_size)
        _, scores = layer(CAPSULES, return_attention_scores=True)
        scores = to_numpy(scores)
        np.testing.assert_allclose(scores.sum(-1), 1.0, rtol=1e-6)
        kept = scores > 0
        if window_size is not None:
            distance = np.abs(np.arange(6)[:, None] - np.arange(6))
            assert not np.any(kept[..., distance > window_size // 2])
        if top_k is not None:
            assert np.all(kept.sum(-1) <= top_k)

    @pytest.mark.parametrize(
        "kwargs, message",
        [({"num_heads": 0}, "num_heads=0"), ({"top_k": 0}, "top_k=0"),
         ({"window_size": -1}, "window_size=-1")],
    )
    def test_errors(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            CapsuleAttention(**kwargs)

    def test_build_errors(self):
        with pytest.raises(ValueError, match="num_heads=3"):
            CapsuleAttention(num_heads=3)(CAPSULES)
        with pytest.raises(ValueError, match="top_k=7"):
            CapsuleAttention(num_heads=2, top_k=7)(CAPSULES)
