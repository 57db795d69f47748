"""HeinsenCapsule: the author's votes `mu @ W + B` routed, shared weights,
variances, config, save/load, mixed precision, XLA, errors."""

import numpy as np
import pytest

import keras_capsules as kc
from tests.reference.heinsen import heinsen_routing, heinsen_votes
from tests.test_case import LayerTestCase, to_numpy

RNG = np.random.default_rng(0)
POSES = RNG.normal(size=(2, 6, 3, 4)).astype("float32")  # d_cov 3, d_inp 4
SCORES = RNG.normal(size=(2, 6)).astype("float32")


def _randomised(layer, seed=1):
    rng = np.random.default_rng(seed)
    for w in layer.weights:
        w.assign(rng.normal(size=w.shape).astype("float32"))
    return [to_numpy(w) for w in (layer.kernel, layer.bias, *layer.router.weights)]


class TestHeinsenCapsule(LayerTestCase):
    def test_layer(self):
        self.run_layer_test(
            kc.HeinsenCapsule,
            {"num_capsules": 3, "capsule_dim": 2, "router": kc.HeinsenRouting(iterations=2)},
            [POSES, SCORES],
            ((2, 3, 3, 2), (2, 3)),
            expected_num_trainable_weights=4,
            expected_num_non_trainable_weights=0,
        )

    def test_layer_shared_with_variances(self):
        self.run_layer_test(
            kc.HeinsenCapsule,
            {"num_capsules": 3, "capsule_dim": 2, "share_weights": True, "return_variances": True},
            [POSES, SCORES],
            ((2, 3, 3, 2), (2, 3), (2, 3, 3, 2)),
            run_mixed_precision_check=False,
            expected_num_trainable_weights=4,
            expected_num_non_trainable_weights=0,
        )

    @pytest.mark.parametrize("share_weights", (False, True))
    def test_matches_the_reference(self, share_weights):
        layer = kc.HeinsenCapsule(3, 2, share_weights=share_weights, return_variances=True)
        layer.build([POSES.shape, SCORES.shape])
        kernel, bias, beta_use, beta_ign = _randomised(layer)
        if share_weights:  # the author's (1, n_out, ...) layout
            kernel, bias = kernel[None], bias[None]
        assert tuple(layer.router.beta_use.shape) == ((1, 3) if share_weights else (6, 3))
        poses, scores, variances = layer([POSES, SCORES])
        votes = heinsen_votes(POSES.astype("float64"), kernel, bias)
        mu, a_out, _, sig2 = heinsen_routing(votes, SCORES.astype("float64"), beta_use, beta_ign)
        np.testing.assert_allclose(to_numpy(scores), a_out, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(to_numpy(poses), mu.reshape(2, 3, 3, 2), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(
            to_numpy(variances), sig2.reshape(2, 3, 3, 2), rtol=1e-5, atol=1e-5
        )

    def test_shared_weights_take_any_number_of_children(self):
        layer = kc.HeinsenCapsule(3, 2, share_weights=True)
        layer([POSES, SCORES])
        poses, _ = layer([POSES[:, :2], SCORES[:, :2]])
        assert tuple(poses.shape) == (2, 3, 3, 2)
        assert tuple(layer.kernel.shape) == (3, 4, 2)

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            ({"num_capsules": 0, "capsule_dim": 2}, "Received: num_capsules=0"),
            ({"num_capsules": 3, "capsule_dim": 2, "share_weights": 1}, "share_weights=1"),
            ({"num_capsules": 3, "capsule_dim": 2, "router": "dynamic"}, "router=Dyn"),
            (
                {"num_capsules": 3, "capsule_dim": 2, "router": "em", "return_variances": True},
                "router=EM",
            ),
        ],
    )
    def test_argument_errors(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            kc.HeinsenCapsule(**kwargs)

    def test_router_is_the_authors_by_default_and_any_heinsen_router_serves(self):
        default = kc.HeinsenCapsule(3, 2, share_weights=True).router
        assert type(default) is kc.HeinsenRouting and default.share_weights
        assert (default.iterations, default.epsilon) == (3, 1e-5)
        router = {"class_name": "heinsen", "config": {"iterations": 1}}
        layer = kc.HeinsenCapsule(3, 2, router=router)
        assert layer.router.iterations == 1 and not layer.router.share_weights
        restored = kc.HeinsenCapsule.from_config(layer.get_config())
        assert restored.router.iterations == 1

    def test_shape_errors(self):
        with pytest.raises(ValueError, match="d_cov, d_inp"):
            kc.HeinsenCapsule(3, 2)([POSES[..., 0], SCORES])
        with pytest.raises(ValueError, match="share_weights=True"):
            kc.HeinsenCapsule(3, 2).build([(None, None, 3, 4), (None, None)])
        with pytest.raises(ValueError, match="activations"):
            kc.HeinsenCapsule(3, 2)([POSES, SCORES[:, :4]])
