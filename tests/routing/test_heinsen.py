"""HeinsenRouting: the reference, variances, shared weights, finiteness,
config, save/load, mixed precision, XLA, errors; `router="heinsen"` in
`Capsule`."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules.routing import HeinsenRouting, Router
from tests.reference.heinsen import heinsen_routing
from tests.test_case import LayerTestCase, gradients, to_numpy

RNG = np.random.default_rng(0)
VOTES = RNG.normal(size=(2, 6, 3, 8)).astype("float32")
SCORES = RNG.normal(size=(2, 6)).astype("float32")


def _with_random_betas(router, votes_shape, seed=1):
    router.build(votes_shape)
    rng = np.random.default_rng(seed)
    betas = [rng.normal(size=w.shape) for w in (router.beta_use, router.beta_ign)]
    router.beta_use.assign(betas[0].astype("float32"))
    router.beta_ign.assign(betas[1].astype("float32"))
    return betas


class TestHeinsenRouting(LayerTestCase):
    # Save/load (safe_mode), config round trip, a jit-compiled train step
    # on TF and JAX, mixed_float16 / mixed_bfloat16.
    def test_layer(self):
        self.run_layer_test(
            HeinsenRouting,
            {"iterations": 2},
            VOTES,
            ((2, 3, 8), (2, 3)),
            expected_num_trainable_weights=2,
            expected_num_non_trainable_weights=0,
        )

    def test_layer_with_shared_weights(self):
        self.run_layer_test(
            HeinsenRouting,
            {"share_weights": True},
            VOTES,
            ((2, 3, 8), (2, 3)),
            run_mixed_precision_check=False,
            expected_num_trainable_weights=2,
            expected_num_non_trainable_weights=0,
        )

    @pytest.mark.parametrize("share_weights", (False, True))
    @pytest.mark.parametrize("with_scores", (False, True))
    def test_matches_the_reference(self, share_weights, with_scores):
        router = HeinsenRouting(iterations=3, share_weights=share_weights)
        betas = _with_random_betas(router, VOTES.shape)
        scores = SCORES if with_scores else None
        outputs = router(VOTES, scores, return_coefficients=True, return_variances=True)
        expected = heinsen_routing(VOTES.astype("float64"), scores, *betas)
        assert [tuple(o.shape) for o in outputs] == [(2, 3, 8), (2, 3), (2, 6, 3), (2, 3, 8)]
        for out, want in zip(outputs, expected):
            np.testing.assert_allclose(to_numpy(out), want, rtol=1e-5, atol=1e-5)
        assert router.compute_output_shape(
            VOTES.shape, SCORES.shape, return_coefficients=True, return_variances=True
        ) == ((2, 3, 8), (2, 3), (2, 6, 3), (2, 3, 8))
        symbolic = router(keras.Input((6, 3, 8)), keras.Input((6,)), return_variances=True)
        assert [tuple(o.shape) for o in symbolic] == [(None, 3, 8), (None, 3), (None, 3, 8)]

    def test_coefficients_and_weights(self):
        router = HeinsenRouting()
        poses, scores, coefficients = router(VOTES, SCORES, return_coefficients=True)
        np.testing.assert_allclose(to_numpy(coefficients).sum(-1), 1.0, rtol=1e-6)
        assert [w.name for w in router.trainable_weights] == ["beta_use", "beta_ign"]
        assert [tuple(w.shape) for w in router.weights] == [(6, 3), (6, 3)]
        np.testing.assert_array_equal(to_numpy(scores), 0.0)  # zero betas
        assert isinstance(router, Router) and router.logit_activations

    def test_one_iteration_is_the_present_weighted_mean(self):
        poses = to_numpy(HeinsenRouting(iterations=1)(VOTES, SCORES)[0])
        present = 1 / (1 + np.exp(-SCORES.astype("float64"))) / 3
        weights = present / (present.sum(1, keepdims=True) + 1e-5)
        np.testing.assert_allclose(
            poses, np.einsum("bi,bijp->bjp", weights, VOTES), rtol=1e-5, atol=1e-6
        )

    def test_shared_weights_route_any_number_of_children(self):
        router = HeinsenRouting(share_weights=True)
        router(VOTES, SCORES)
        poses, _ = router(VOTES[:, :4], SCORES[:, :4])
        assert tuple(poses.shape) == (2, 3, 8)
        assert router.beta_use.shape == (1, 3)
        unshared = HeinsenRouting()
        unshared(VOTES, SCORES)
        with pytest.raises(ValueError, match="in_caps=6"):
            unshared(VOTES[:, :4], SCORES[:, :4])

    @pytest.mark.parametrize("case", ("zeros", "identical", "single-child", "huge"))
    def test_finite_values_and_gradients(self, case):
        votes, scores = VOTES.copy(), SCORES.copy()
        if case == "zeros":
            votes[:] = 0.0
        elif case == "identical":
            votes[:] = votes[:, :1]
        elif case == "single-child":
            votes, scores = votes[:, :1], scores[:, :1]
        else:
            votes, scores = votes * 1e4, scores * 30
        router = HeinsenRouting()
        _with_random_betas(router, votes.shape)
        tensors = {
            k: keras.ops.convert_to_tensor(v) for k, v in (("votes", votes), ("scores", scores))
        }

        def loss(t):
            outputs = router(t["votes"], t["scores"], return_variances=True)
            return sum(keras.ops.sum(o) for o in outputs)

        for out in router(votes, scores, return_variances=True):
            assert np.all(np.isfinite(to_numpy(out))), case
        for g in gradients(loss, tensors, ("votes", "scores")).values():
            assert np.all(np.isfinite(to_numpy(g))), case

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            ({"iterations": 0}, "Received: iterations=0"),
            ({"iterations": 1.5}, "Received: iterations=1.5"),
            ({"epsilon": 0}, "Received: epsilon=0"),
            ({"share_weights": "yes"}, "Received: share_weights='yes'"),
        ],
    )
    def test_errors(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            HeinsenRouting(**kwargs)

    def test_unknown_in_caps_needs_shared_weights(self):
        with pytest.raises(ValueError, match="share_weights=True"):
            HeinsenRouting().build((None, None, 3, 8))
        HeinsenRouting(share_weights=True).build((None, None, 3, 8))

    def test_by_name_in_capsule_layers(self):
        keras.utils.set_random_seed(0)
        layer = kc.Capsule(3, 8, router="heinsen", return_activations=True)
        poses, activations = layer(RNG.normal(size=(2, 6, 4)).astype("float32"))
        assert type(layer.router) is HeinsenRouting
        # Vector capsules: the pose's length is sigmoid(a_out), the activation.
        a = to_numpy(activations)
        assert np.all((a > 0) & (a < 1))
        np.testing.assert_allclose(np.linalg.norm(to_numpy(poses), axis=-1), a, rtol=1e-4)
        restored = kc.Capsule.from_config(layer.get_config())
        assert type(restored.router) is HeinsenRouting
