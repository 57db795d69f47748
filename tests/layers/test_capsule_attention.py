"""CapsuleAttention: shapes, masks, attention scores, config, training, errors.

Values: the parity matrix.
"""

import keras
import numpy as np
import pytest

from keras_capsules.layers import CapsuleAttention
from tests.test_case import LayerTestCase, to_numpy

CAPSULES = np.random.default_rng(0).normal(size=(2, 6, 8)).astype("float32")


class TestCapsuleAttention(LayerTestCase):
    def test_weight_arguments(self):
        self.run_weight_arguments_test(
            CapsuleAttention, {"num_heads": 2}, CAPSULES, {"kernel": ["query_kernel", "key_kernel"]}
        )

    def test_kernels_are_read_in_float32_under_mixed_precision(self):
        """Kernels too large for float16 (read as float16 they would be
        inf): the attention, in float32, matches the float32 layer on the
        same float16-rounded inputs."""
        x16 = CAPSULES.astype("float16").astype("float32")
        layers = [CapsuleAttention(2, dtype=policy) for policy in ("mixed_float16", "float32")]
        for layer in layers:
            layer.build(CAPSULES.shape)
            layer.query_kernel.assign(1e5 * np.eye(8, dtype="float32"))
            layer.key_kernel.assign(np.eye(8, dtype="float32") / 1e5)
        (mixed, mixed_scores), (full, full_scores) = (
            layer(x16, return_attention_scores=True) for layer in layers
        )
        assert keras.backend.standardize_dtype(mixed.dtype) == "float16"
        np.testing.assert_allclose(to_numpy(mixed_scores), to_numpy(full_scores), atol=1e-3)
        np.testing.assert_allclose(to_numpy(mixed), to_numpy(full), rtol=1e-3, atol=1e-3)

    def test_layer(self):
        self.run_layer_test(
            CapsuleAttention,
            {"num_heads": 2, "top_k": 2, "window_size": 3},
            CAPSULES,
            (2, 6, 8),
            expected_num_trainable_weights=2,
            expected_num_non_trainable_weights=0,
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
            CapsuleAttention,
            {"num_heads": 4, "squash_output": True},
            CAPSULES,
            (2, 6, 8),
            run_mixed_precision_check=False,
            expected_num_trainable_weights=2,
            expected_num_non_trainable_weights=0,
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
        [
            ({"num_heads": 0}, "num_heads=0"),
            ({"top_k": 0}, "top_k=0"),
            ({"window_size": -1}, "window_size=-1"),
        ],
    )
    def test_errors(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            CapsuleAttention(**kwargs)

    def test_build_errors(self):
        with pytest.raises(ValueError, match="num_heads=3"):
            CapsuleAttention(num_heads=3)(CAPSULES)
        with pytest.raises(ValueError, match="top_k=7"):
            CapsuleAttention(num_heads=2, top_k=7)(CAPSULES)
