"""EMRouting: activations, coefficients, schedule, finiteness, config, training, errors."""

import keras
import numpy as np
import pytest

from keras_capsules.routing import EMRouting, Router
from tests.test_case import LayerTestCase, gradients, to_numpy

RNG = np.random.default_rng(0)
VOTES = RNG.normal(size=(2, 6, 3, 16)).astype("float32")
ACTIVATIONS = RNG.uniform(0.1, 0.9, size=(2, 6)).astype("float32")


class TestEMRouting(LayerTestCase):
    def test_layer(self):
        self.run_layer_test(
            EMRouting,
            {"iterations": 2},
            VOTES,
            ((2, 3, 16), (2, 3)),
            expected_num_trainable_weights=2,
            expected_num_non_trainable_weights=0,
        )

    def test_activations_and_coefficients(self):
        router = EMRouting()
        poses, activations, coefficients = router(VOTES, ACTIVATIONS, return_coefficients=True)
        assert tuple(coefficients.shape) == (2, 6, 3)
        np.testing.assert_allclose(to_numpy(coefficients).sum(-1), 1.0, rtol=1e-6)
        a = to_numpy(activations)
        assert np.all((a > 0) & (a < 1))
        ones = to_numpy(router(VOTES, np.ones_like(ACTIVATIONS))[0])
        np.testing.assert_allclose(to_numpy(router(VOTES)[0]), ones, rtol=1e-6)
        assert [w.name for w in router.trainable_weights] == ["beta_u", "beta_a"]
        assert isinstance(router, Router)

    def test_one_iteration_is_the_weighted_mean(self):
        poses = to_numpy(EMRouting(iterations=1)(VOTES, ACTIVATIONS)[0])
        weights = ACTIVATIONS / (ACTIVATIONS.sum(1, keepdims=True) + 3e-7)
        np.testing.assert_allclose(
            poses, np.einsum("bi,bijp->bjp", weights, VOTES), rtol=1e-5, atol=1e-6
        )

    def test_schedule(self):
        assert EMRouting(iterations=3, final_lambda=0.01).inverse_temperatures() == (
            pytest.approx([0.01 * 0.05, 0.01 * 0.0975, 0.01 * (1 - 0.95**3)])
        )
        assert EMRouting(iterations=2, inverse_temperature=3).inverse_temperatures() == [3.0, 3.0]
        router = EMRouting(iterations=2, inverse_temperature=[1, 2])
        assert router.inverse_temperatures() == [1.0, 2.0]
        assert EMRouting.from_config(router.get_config()).inverse_temperatures() == [1.0, 2.0]

    @pytest.mark.parametrize("case", ("identical", "single-child", "inactive", "huge"))
    def test_finite_values_and_gradients(self, case):
        votes = VOTES.copy()
        activations = ACTIVATIONS.copy()
        if case == "identical":
            votes[:] = votes[:, :1]
        elif case == "single-child":
            votes = votes[:, :1]
            activations = activations[:, :1]
        elif case == "inactive":
            activations[0] = 0.0
        else:
            votes = votes * 1e4
        router = EMRouting()
        router.build(votes.shape)
        tensors = {
            "votes": keras.ops.convert_to_tensor(votes),
            "activations": keras.ops.convert_to_tensor(activations),
        }

        def loss(t):
            poses, a = router(t["votes"], t["activations"])
            return keras.ops.sum(poses) + keras.ops.sum(a)

        for out in router(votes, activations):
            assert np.all(np.isfinite(to_numpy(out))), case
        for g in gradients(loss, tensors, ("votes", "activations")).values():
            assert np.all(np.isfinite(to_numpy(g))), case

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            ({"iterations": 0}, "iterations=0"),
            ({"final_lambda": 0}, "final_lambda=0"),
            ({"epsilon": -1.0}, "epsilon=-1.0"),
            ({"inverse_temperature": 0}, "inverse_temperature"),
            ({"inverse_temperature": [1.0]}, "inverse_temperature=\\[1.0\\]"),
            ({"inverse_temperature": "high"}, "inverse_temperature='high'"),
        ],
    )
    def test_errors(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            EMRouting(**kwargs)

    def test_unknown_out_caps(self):
        with pytest.raises(ValueError, match="out_caps"):
            EMRouting().build((None, 6, None, 16))
