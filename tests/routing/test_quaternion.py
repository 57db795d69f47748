"""QuaternionRouting: the layer harness, the float64 reference, rotation
equivariance, children of activation 0, errors. Values and gradients: also
the parity matrix (tests/parity/cases_quaternion.py)."""

import numpy as np
import pytest

from keras_capsules.routing import QuaternionRouting
from tests.parity.cases_quaternion import unit_clusters
from tests.reference import quaternion as ref
from tests.test_case import LayerTestCase, to_numpy

RNG = np.random.default_rng(0)
VOTES = unit_clusters(RNG, (2, 6), 3).astype("float32")
ACTIVATIONS = RNG.uniform(0.2, 1.0, size=(2, 6)).astype("float32")


class TestQuaternionRouting(LayerTestCase):
    def test_layer(self):
        self.run_layer_test(
            QuaternionRouting,
            {"iterations": 2},
            VOTES,
            ((2, 3, 4), (2, 3)),
            expected_num_trainable_weights=2,
            expected_num_non_trainable_weights=0,
        )


@pytest.mark.parametrize("iterations", (1, 3))
def test_matches_float64_reference(iterations):
    router = QuaternionRouting(iterations)
    outputs = router(VOTES, ACTIVATIONS, return_coefficients=True)
    expected = ref.quaternion_routing(VOTES.astype("float64"), ACTIVATIONS, 1.0, 1.0, iterations)
    for actual, wanted in zip(outputs, expected):
        np.testing.assert_allclose(to_numpy(actual), wanted, rtol=1e-5, atol=1e-6)


def test_rotating_every_vote_rotates_the_poses_and_keeps_the_activations():
    router = QuaternionRouting()
    poses, activations = (to_numpy(t) for t in router(VOTES, ACTIVATIONS))
    for seed in range(3):
        r = unit_clusters(np.random.default_rng(seed), (), 1)[0]
        turned, turned_activations = router(ref.multiply(r, VOTES).astype("float32"), ACTIVATIONS)
        assert ref.error_up_to_sign(to_numpy(turned), ref.multiply(r, poses)) < 1e-5
        np.testing.assert_allclose(to_numpy(turned_activations), activations, atol=1e-6)


def test_agreeing_children_activate_their_parent_more():
    votes = VOTES.copy()
    votes[:, :, 1] = votes[:, :1, 1]  # every child votes one rotation for parent 1
    _, activations = QuaternionRouting()(votes)
    activations = to_numpy(activations)
    assert np.all(activations[:, 1] > activations[:, 0]), activations
    assert np.all(activations[:, 1] > activations[:, 2]), activations


def test_children_of_activation_zero_take_no_part():
    router = QuaternionRouting()
    activations = ACTIVATIONS.copy()
    activations[0, 4:] = 0
    other = VOTES.copy()
    other[0, 4:] = unit_clusters(RNG, (2,), 3)
    poses, out = router(other, activations)
    alone_poses, alone = router(VOTES[:1, :4], activations[:1, :4])
    np.testing.assert_allclose(to_numpy(poses)[0], to_numpy(alone_poses)[0], atol=1e-5)
    np.testing.assert_allclose(to_numpy(out)[0], to_numpy(alone)[0], atol=1e-6)
    _, none = router(VOTES, np.zeros_like(ACTIVATIONS))
    np.testing.assert_array_equal(to_numpy(none), 0.0)


def test_errors_are_named():
    with pytest.raises(ValueError, match="iterations=0"):
        QuaternionRouting(0)
    with pytest.raises(ValueError, match=r"votes.shape=\(2, 6, 3, 8\)"):
        QuaternionRouting()(np.ones((2, 6, 3, 8), "float32"))
    with pytest.raises(ValueError, match="activations.shape"):
        QuaternionRouting()(VOTES, ACTIVATIONS[:, :4])
