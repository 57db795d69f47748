"""SetPrimaryCapsule: values, order, any length, masks (a padded batch
routes as the unpadded sets with every router), the layer harness."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules.layers import SetPrimaryCapsule
from tests.test_case import LayerTestCase, forward, to_numpy

POINTS = np.random.default_rng(0).normal(size=(2, 7, 3)).astype("float32")


class TestSetPrimaryCapsule(LayerTestCase):
    def test_weight_arguments(self):
        self.run_weight_arguments_test(
            SetPrimaryCapsule,
            {"num_capsules": 2, "capsule_dim": 3},
            POINTS,
            {"kernel": ["kernel"], "bias": ["bias"]},
        )

    def test_layer(self):
        self.run_layer_test(
            SetPrimaryCapsule,
            {"num_capsules": 2, "capsule_dim": 4},
            POINTS,
            (2, 7 * 2, 4),
            expected_num_trainable_weights=2,
            expected_num_non_trainable_weights=0,
        )

    def test_values_match_float64(self):
        layer = SetPrimaryCapsule(2, 4)
        out = to_numpy(layer(POINTS))
        y = np.einsum("bnf,fkd->bnkd", POINTS.astype("float64"), to_numpy(layer.kernel))
        y = y + to_numpy(layer.bias)
        n2 = (y**2).sum(-1, keepdims=True)
        expected = (n2 / (1 + n2) * y / np.sqrt(n2 + 1e-7)).reshape(2, 14, 4)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)

    def test_permuting_elements_permutes_capsules(self):
        layer = SetPrimaryCapsule(2, 4)
        order = np.array([3, 0, 6, 1, 5, 2, 4])
        out = to_numpy(layer(POINTS)).reshape(2, 7, 2, 4)
        permuted = to_numpy(layer(POINTS[:, order])).reshape(2, 7, 2, 4)
        np.testing.assert_allclose(permuted, out[:, order], rtol=1e-6)

    def test_starts_near_the_knee(self):
        # 32 capsules, so that the mean over the layer's random draw is
        # steady (2 capsules gave means from 0.18 to 0.74 over draws).
        features = np.random.default_rng(1).normal(size=(4, 50, 32)).astype("float32") * 1e-3
        lengths = np.linalg.norm(to_numpy(SetPrimaryCapsule(32, 8)(features)), axis=-1)
        assert 0.3 < lengths.mean() < 0.7, lengths.mean()

    def test_any_number_of_elements(self):
        layer = SetPrimaryCapsule(3, 4)
        assert tuple(layer(keras.Input((None, 3))).shape) == (None, None, 4)
        assert tuple(layer(POINTS[:, :2]).shape) == (2, 6, 4)

    def test_mask_zeroes_dropped_elements_and_is_passed_on(self):
        layer = SetPrimaryCapsule(2, 4)
        mask = np.array([[True] * 5 + [False] * 2, [True] * 7])
        out = to_numpy(layer(POINTS, mask=mask))
        assert np.all(out[0, 10:] == 0) and np.all(out[0, :10] != 0)
        passed = to_numpy(layer.compute_mask(POINTS, mask))
        np.testing.assert_array_equal(passed, np.repeat(mask, 2, axis=1))

    @pytest.mark.parametrize("router", kc.routing.names())
    def test_masked_elements_take_no_part(self, router):
        # Sets of 5 elements of which the mask drops the last 2: whatever
        # those hold, every router gives the same parents.
        points, keep = keras.Input((5, 3)), keras.Input((5,), dtype="bool")
        capsules = SetPrimaryCapsule(2, 4)(points, mask=keep)
        model = keras.Model([points, keep], kc.Capsule(3, 4, router=router)(capsules))
        rng = np.random.default_rng(2)
        x = rng.normal(size=(2, 5, 3)).astype("float32")
        other = x.copy()
        other[:, 3:] = 10.0 * rng.normal(size=(2, 2, 3))
        mask = np.array([[True] * 3 + [False] * 2] * 2)
        np.testing.assert_allclose(
            to_numpy(model([other, mask])), to_numpy(model([x, mask])), rtol=1e-5, atol=1e-6
        )

    # The routers that route sets of any length (no weight per child); EM
    # normalises its cost by the number of children, padded ones included
    # (Capsule's docstring says so).
    @pytest.mark.parametrize(
        "router",
        [
            "cross_attention",
            "dynamic",
            "inverted_dot_product",
            "sparse_attention",
            {"class_name": "heinsen", "config": {"share_weights": True}},
            {"class_name": "self_attention", "config": {"use_priors": False}},
        ],
        ids=lambda r: r if isinstance(r, str) else r["class_name"],
    )
    def test_padded_batch_routes_as_unpadded_sets(self, router):
        # Two sets of 5 and 3 points, padded to 5 with a Keras mask (Masking
        # on zero rows): each set's class capsules are those of the set
        # routed alone.
        points = keras.Input((None, 3))
        masked = keras.layers.Masking(0.0)(points)
        capsules = SetPrimaryCapsule(2, 4)(masked)
        poses = kc.Capsule(3, 4, share_weights=True, router=router)(capsules)
        model = keras.Model(points, poses)
        rng = np.random.default_rng(2)
        a = rng.normal(size=(1, 5, 3)).astype("float32")
        b = rng.normal(size=(1, 3, 3)).astype("float32")
        padded = np.concatenate([a, np.pad(b, ((0, 0), (0, 2), (0, 0)))])
        together = to_numpy(forward(model, padded))
        np.testing.assert_allclose(
            together[0], to_numpy(forward(model, a))[0], rtol=1e-4, atol=1e-5
        )
        np.testing.assert_allclose(
            together[1], to_numpy(forward(model, b))[0], rtol=1e-4, atol=1e-5
        )

    @pytest.mark.parametrize(
        "kwargs, message",
        [({"num_capsules": 0}, "num_capsules=0"), ({"capsule_dim": 2.0}, "capsule_dim=2.0")],
    )
    def test_errors(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            SetPrimaryCapsule(**{"num_capsules": 2, "capsule_dim": 4, **kwargs})

    def test_rank_and_features(self):
        with pytest.raises(ValueError, match="ndim=3"):
            SetPrimaryCapsule(2, 4)(keras.Input((9, 9, 3)))
        with pytest.raises(ValueError, match="known features"):
            SetPrimaryCapsule(2, 4).build((None, 9, None))
