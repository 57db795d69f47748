"""Capsule: shapes, votes, routers, config, training, errors."""

import keras
import numpy as np
import pytest

import keras_capsules
from keras_capsules.layers import Capsule
from tests.reference import attention as ref
from tests.reference.dynamic import capsule_votes
from tests.test_case import LayerTestCase, to_numpy

RNG = np.random.default_rng(0)
POSES = RNG.normal(size=(2, 6, 4)).astype("float32")
ACTIVATIONS = RNG.uniform(size=(2, 6)).astype("float32")


class TestCapsule(LayerTestCase):
    def test_weight_arguments(self):
        self.run_weight_arguments_test(
            Capsule, {"num_capsules": 3, "capsule_dim": 5}, POSES, {"kernel": ["kernel"]}
        )

    @pytest.mark.parametrize("share_weights", (False, True))
    def test_layer(self, share_weights):
        self.run_layer_test(
            Capsule,
            {"num_capsules": 3, "capsule_dim": 5, "share_weights": share_weights},
            POSES,
            (2, 3, 5),
            expected_num_trainable_weights=1,
            expected_num_non_trainable_weights=0,
        )

    def test_with_activations(self):
        self.run_layer_test(
            Capsule,
            {"num_capsules": 3, "capsule_dim": 5, "return_activations": True},
            [POSES, ACTIVATIONS],
            ((2, 3, 5), (2, 3)),
            run_mixed_precision_check=False,
            expected_num_trainable_weights=1,
            expected_num_non_trainable_weights=0,
        )

    def test_custom_router_round_trips(self):
        router = keras_capsules.routing.DynamicRouting(iterations=1, agreement="cosine")
        layer = Capsule(3, 5, router=router)
        restored = Capsule.from_config(layer.get_config())
        assert restored.router.get_config()["agreement"] == "cosine"
        assert restored.router.iterations == 1

    def test_shared_weights_accept_any_in_caps(self):
        layer = Capsule(3, 5, share_weights=True)
        out = layer(keras.Input((None, 4)))
        assert tuple(out.shape) == (None, 3, 5)
        assert tuple(layer(POSES).shape) == (2, 3, 5)

    def test_votes_are_one_transform_per_pair(self):
        layer = Capsule(3, 5, router=keras_capsules.routing.DynamicRouting(iterations=1))
        layer.build(POSES.shape)
        w = RNG.normal(size=layer.kernel.shape).astype("float32")
        layer.kernel.assign(w)
        votes = np.einsum("bid,ijde->bije", POSES, w)
        expected = votes.sum(axis=1) / 3  # uniform coefficients 1/out_caps
        n2 = (expected**2).sum(-1, keepdims=True)
        expected = n2 / (1 + n2) * expected / np.sqrt(n2 + 1e-7)
        np.testing.assert_allclose(to_numpy(layer(POSES)), expected, rtol=1e-5, atol=1e-6)

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            ({"num_capsules": 0}, "num_capsules=0"),
            ({"capsule_dim": 0}, "capsule_dim=0"),
            ({"router": "dynamo"}, "router='dynamo'"),
        ],
    )
    def test_errors(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            Capsule(**{"num_capsules": 2, "capsule_dim": 4, **kwargs})

    def test_unknown_in_caps_needs_shared_weights(self):
        with pytest.raises(ValueError, match="share_weights"):
            Capsule(3, 5)(keras.Input((None, 4)))


def test_householder_weight_has_one_name():
    dense = keras_capsules.Capsule(3, 4, orthogonal=True)
    dense.build((None, 5, 6))
    conv = keras_capsules.ConvCapsule2D(2, 4, 2, orthogonal=True)
    conv.build((None, 4, 4, 2, 6))
    for layer in (dense, conv):
        assert layer.householder.path.endswith("householder")
        assert [w.path for w in layer.weights] == [layer.householder.path]
        assert not hasattr(layer, "kernel")


@pytest.mark.parametrize("orthogonal", [False, True])
@pytest.mark.parametrize("share_weights", [False, True])
def test_capsule_votes(orthogonal, share_weights):
    layer = keras_capsules.Capsule(3, 4, orthogonal=orthogonal, share_weights=share_weights)
    poses = np.random.default_rng(0).normal(size=(2, 5, 6)).astype("float32")
    layer.build(poses.shape)
    weight = to_numpy(layer.householder if orthogonal else layer.kernel).astype("float64")
    kernel = ref.householder_orthogonal(weight, 6, 4) if orthogonal else weight
    np.testing.assert_allclose(
        to_numpy(layer.votes(poses)), capsule_votes(poses, kernel), rtol=1e-5, atol=1e-5
    )
