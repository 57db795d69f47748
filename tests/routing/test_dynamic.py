"""DynamicRouting as a layer: shapes, config, save/load, training, errors."""

import keras
import numpy as np
import pytest

from keras_capsules.routing import DynamicRouting, Router
from tests.test_case import LayerTestCase, to_numpy

VOTES = np.random.default_rng(0).normal(size=(2, 6, 3, 4)).astype("float32")


class TestDynamicRouting(LayerTestCase):
    @pytest.mark.parametrize("agreement", ("dot", "cosine", "euclidean"))
    def test_layer(self, agreement):
        self.run_layer_test(
            DynamicRouting,
            {"iterations": 2, "agreement": agreement, "temperature": 0.5},
            VOTES,
            ((2, 3, 4), (2, 3)),
            run_mixed_precision_check=agreement == "dot",
            expected_num_trainable_weights=0,
            expected_num_non_trainable_weights=0,
        )

    def test_return_coefficients(self):
        router = DynamicRouting()
        poses, activations, coefficients = router(VOTES, return_coefficients=True)
        assert tuple(coefficients.shape) == (2, 6, 3)
        np.testing.assert_allclose(to_numpy(coefficients).sum(-1), 1.0, rtol=1e-6)
        symbolic = router(keras.Input((6, 3, 4)), return_coefficients=True)
        assert [tuple(t.shape) for t in symbolic] == [(None, 3, 4), (None, 3), (None, 6, 3)]

    def test_activations_are_accepted_and_ignored(self):
        router = DynamicRouting()
        a = np.random.default_rng(1).uniform(size=(2, 6)).astype("float32")
        np.testing.assert_allclose(
            to_numpy(router(VOTES, a)[0]), to_numpy(router(VOTES)[0]), rtol=1e-6
        )

    def test_is_a_router(self):
        assert isinstance(DynamicRouting(), Router)

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            ({"iterations": 0}, "iterations=0"),
            ({"iterations": 1.5}, "iterations=1.5"),
            ({"temperature": 0.0}, "temperature=0.0"),
            ({"temperature": -1}, "temperature=-1"),
            ({"agreement": "manhattan"}, "agreement='manhattan'"),
        ],
    )
    def test_errors(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            DynamicRouting(**kwargs)

    def test_bad_votes_rank(self):
        with pytest.raises(ValueError, match="votes.shape"):
            DynamicRouting()(np.zeros((2, 6, 4), "float32"))


@pytest.mark.parametrize("policy", ("mixed_float16", "mixed_bfloat16"))
def test_routes_in_float32_under_mixed_policies(policy):
    router = DynamicRouting(dtype=policy)
    poses, activations = router(VOTES)
    assert keras.backend.standardize_dtype(poses.dtype) == policy.split("_")[1]
    expected = to_numpy(DynamicRouting()(VOTES)[0])
    # Only the final cast to the half dtype loses precision.
    tol = 1e-2 if policy == "mixed_bfloat16" else 1e-3
    np.testing.assert_allclose(to_numpy(poses), expected, rtol=tol, atol=tol)


def test_one_parent_needs_one_pass():
    """A softmax over one parent is 1: every iteration count gives the
    squashed sum of the votes (and no softmax over a size-1 axis)."""
    import warnings

    from tests.reference.ops import squash

    votes = np.random.default_rng(3).normal(size=(2, 5, 1, 4)).astype("float32")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        poses, _ = DynamicRouting(iterations=3)(votes)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(poses),
        squash(votes.sum(axis=1).astype("float64")),
        rtol=1e-5,
        atol=1e-6,
    )
