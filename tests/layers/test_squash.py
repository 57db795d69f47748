"""Squash: the squash as a layer (both variants), masks, errors, and a
model with it that loads with safe_mode=True."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules.layers import Squash
from tests.test_case import LayerTestCase, round_trip, to_numpy

POSES = np.random.default_rng(0).normal(size=(2, 6, 4)).astype("float32")


def reference(x, variant, axis=-1, epsilon=1e-7):
    """The squash in float64 NumPy."""
    x = x.astype("float64")
    n2 = (x**2).sum(axis, keepdims=True)
    n = np.sqrt(n2 + epsilon)
    scale = n2 / (1.0 + n2) if variant == "sabour" else 1.0 - np.exp(-n)
    return scale * x / n


class TestSquash(LayerTestCase):
    @pytest.mark.parametrize("variant", ["sabour", "efficient"])
    def test_layer(self, variant):
        self.run_layer_test(
            Squash,
            {"variant": variant},
            POSES,
            (2, 6, 4),
            expected_num_trainable_weights=0,
            expected_num_non_trainable_weights=0,
        )

    @pytest.mark.parametrize("variant", ["sabour", "efficient"])
    @pytest.mark.parametrize("axis", [-1, 1])
    def test_values_match_float64(self, variant, axis):
        out = to_numpy(Squash(variant, axis=axis)(POSES))
        np.testing.assert_allclose(out, reference(POSES, variant, axis), rtol=1e-5, atol=1e-7)

    def test_same_as_ops(self):
        np.testing.assert_allclose(
            to_numpy(Squash("efficient")(POSES)), to_numpy(kc.ops.efficient_squash(POSES))
        )

    def test_zero_and_huge_capsules_have_finite_gradients(self):
        x = np.stack([np.zeros((6, 4)), np.full((6, 4), 1e18)]).astype("float32")
        model = keras.Sequential([keras.Input((6, 4)), Squash()])
        out = to_numpy(model(x))
        assert np.all(np.isfinite(out))
        np.testing.assert_allclose(np.linalg.norm(out[1], axis=-1), 1.0, rtol=1e-5)

    def test_mask_reaches_the_capsule_layer(self):
        # Embedding's mask passes through Squash to Capsule, which then
        # routes only the kept tokens: padding changes nothing.
        tokens = keras.Input((None,), dtype="int32")
        x = Squash()(keras.layers.Embedding(10, 4, mask_zero=True)(tokens))
        model = keras.Model(tokens, kc.Capsule(2, 3, share_weights=True)(x))
        short = np.array([[3, 1, 4]], "int32")
        padded = np.array([[3, 1, 4, 0, 0]], "int32")
        np.testing.assert_allclose(
            to_numpy(model(padded)), to_numpy(model(short)), rtol=1e-5, atol=1e-6
        )

    def test_model_with_squash_loads_with_safe_mode(self):
        inputs = keras.Input((6, 4))
        scores = kc.Length()(Squash()(keras.layers.Dense(4)(inputs)))
        model = keras.Model(inputs, scores)
        loaded = round_trip(model)
        np.testing.assert_allclose(to_numpy(loaded(POSES)), to_numpy(model(POSES)), rtol=1e-6)

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            ({"variant": "hinton"}, "variant='hinton'"),
            ({"axis": 1.5}, "axis=1.5"),
            ({"axis": True}, "axis=True"),
            ({"epsilon": 0}, "epsilon=0"),
        ],
    )
    def test_errors(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            Squash(**kwargs)

    @pytest.mark.parametrize("axis", [0, 3, -4])
    def test_batch_or_missing_axis(self, axis):
        with pytest.raises(ValueError, match=f"axis={axis}"):
            Squash(axis=axis)(POSES)
