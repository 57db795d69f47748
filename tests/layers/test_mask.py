"""Mask: by labels (ids, id columns or one-hot) or by the longest capsule."""

import keras
import numpy as np
import pytest

from keras_capsules.layers import Mask
from tests.test_case import LayerTestCase, to_numpy

POSES = np.random.default_rng(0).normal(size=(2, 6, 4)).astype("float32")


class TestMask(LayerTestCase):
    def test_layer_with_labels(self):
        labels = np.eye(6, dtype="float32")[[1, 4]]
        self.run_layer_test(
            Mask,
            {},
            [POSES, labels],
            (2, 24),
            expected_num_trainable_weights=0,
            expected_num_non_trainable_weights=0,
        )

    def test_layer_by_longest(self):
        self.run_layer_test(
            Mask,
            {},
            POSES,
            (2, 24),
            expected_num_trainable_weights=0,
            expected_num_non_trainable_weights=0,
        )

    def test_values(self):
        out = to_numpy(Mask()([POSES, np.array([1, 4])])).reshape(2, 6, 4)
        expected = np.zeros_like(POSES)
        expected[0, 1], expected[1, 4] = POSES[0, 1], POSES[1, 4]
        np.testing.assert_array_equal(out, expected)
        longest = np.linalg.norm(POSES, axis=-1).argmax(-1)
        out = to_numpy(Mask()(POSES)).reshape(2, 6, 4)
        for b in range(2):
            np.testing.assert_array_equal(out[b, longest[b]], POSES[b, longest[b]])
            assert np.count_nonzero(out[b]) == 4

    @pytest.mark.parametrize("form", ("ids", "ids_column", "one_hot"))
    def test_label_forms_keep_the_same_capsule(self, form):
        # Keras's sparse labels come as (batch, 1): read as ids, not as a
        # one-hot of width 1 (which kept every capsule, times the id).
        ids = np.array([1, 4])
        labels = {
            "ids": ids,
            "ids_column": ids[:, None],
            "one_hot": np.eye(6, dtype="float32")[ids],
        }[form]
        out = to_numpy(Mask()([POSES, labels])).reshape(2, 6, 4)
        expected = np.zeros_like(POSES)
        expected[0, 1], expected[1, 4] = POSES[0, 1], POSES[1, 4]
        np.testing.assert_array_equal(out, expected)

    def test_symbolic_sparse_labels(self):
        poses, labels = keras.Input((6, 4)), keras.Input((1,), dtype="int32")
        model = keras.Model([poses, labels], Mask()([poses, labels]))
        out = to_numpy(model([POSES, np.array([[1], [4]], "int32")])).reshape(2, 6, 4)
        assert np.count_nonzero(out[0, 1]) == 4 and np.count_nonzero(out) == 8
