"""QuaternionCapsuleClassifier: rotation-invariant scores and equivariant
poses for the model as a whole, learning generated shapes with the
defaults, saving, mixed precision, bad arguments."""

import keras
import numpy as np
import pytest

from keras_capsules.models import QuaternionCapsuleClassifier
from keras_capsules.routing import QuaternionRouting
from tests.models.test_point_capsnet import shapes
from tests.parity.cases_quaternion import unit_clusters
from tests.reference import quaternion as ref
from tests.test_case import forward, to_numpy

SMALL = dict(primary_capsules=4, num_patches=16, patch_size=8, frame_neighbors=8)


def model(num_classes=3, **kwargs):
    keras.utils.set_random_seed(0)
    return QuaternionCapsuleClassifier(num_classes, **{**SMALL, **kwargs})


def ellipsoids(count, points, rng):
    p = rng.normal(size=(count, points, 3))
    p /= np.linalg.norm(p, axis=-1, keepdims=True)
    return (p * [1.5, 1.0, 0.6]).astype("float32")


def test_rotating_the_cloud_rotates_the_poses_and_keeps_the_scores():
    classifier = model()
    clouds = ellipsoids(2, 64, np.random.default_rng(0))
    scores, poses = (to_numpy(t) for t in forward(classifier, clouds, return_poses=True))
    assert poses.shape == (2, 3, 4)
    for seed in range(3):
        r = unit_clusters(np.random.default_rng(seed), (), 1)[0]
        turned = ref.rotate(r, clouds).astype("float32") + 0.5  # moved too
        turned_scores, turned_poses = forward(classifier, turned, return_poses=True)
        np.testing.assert_allclose(to_numpy(turned_scores), scores, atol=1e-5)
        assert ref.error_up_to_sign(to_numpy(turned_poses), ref.multiply(r, poses)) < 1e-4


def test_scores_of_flat_clouds_do_not_change_under_rotation():
    # Digits as point sets lie at z = 0: the local frames' normals must
    # still turn with the cloud (their sign is no majority there).
    classifier = model()
    rng = np.random.default_rng(0)
    clouds = np.zeros((2, 64, 3), "float32")
    clouds[..., :2] = rng.uniform(-1, 1, (2, 64, 2))
    scores = to_numpy(forward(classifier, clouds))
    for seed in range(3):
        r = unit_clusters(np.random.default_rng(seed), (), 1)[0]
        turned = to_numpy(forward(classifier, ref.rotate(r, clouds).astype("float32")))
        np.testing.assert_allclose(turned, scores, atol=1e-5)


@pytest.mark.one_backend("jax")  # what it learns: tests/test_learning.py
def test_learns_generated_shapes_with_the_defaults():
    # Slow for the first few epochs (the agreements start alike for every
    # class), then steady: measured 0.51 of the first loss, 0.72 accuracy.
    classifier = model(primary_capsules=8)
    clouds, labels = shapes(192, points=48)  # randomly rotated
    classifier.compile()
    history = classifier.fit(clouds, labels, batch_size=8, epochs=16, verbose=0).history
    assert history["loss"][-1] < 0.75 * history["loss"][0], history["loss"]
    assert history["accuracy"][-1] > 0.55, history["accuracy"]  # of 3 classes


def test_mixed_precision_gives_finite_scores_and_gradients():
    classifier = model(dtype="mixed_bfloat16")
    classifier.compile()
    clouds, labels = shapes(8, points=32)
    history = classifier.fit(clouds, labels, batch_size=8, epochs=1, verbose=0).history
    assert np.isfinite(history["loss"]).all()
    assert np.isfinite(to_numpy(forward(classifier, clouds)).astype("float32")).all()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_classes=1), "num_classes=1"),
        (dict(primary_capsules=0), "primary_capsules=0"),
        (dict(num_patches=0), "num_patches=0"),
        (dict(frame_neighbors=2), "num_neighbors=2"),
    ],
)
def test_bad_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        QuaternionCapsuleClassifier(**{"num_classes": 3, **kwargs})


def test_too_few_points_are_refused_before_any_computation():
    with pytest.raises(ValueError, match=r"points.shape=\(2, 10, 3\)"):
        model()(np.zeros((2, 10, 3), "float32"))


def test_padded_clouds_with_their_mask_give_the_unpadded_scores():
    classifier = model()
    rng = np.random.default_rng(1)
    clouds = ellipsoids(2, 32, rng)
    # Padding (far away, junk) put among the points, not only at the end.
    padded = np.concatenate([clouds, np.full((2, 8, 3), 7.0, "float32")], axis=1)
    keep = np.concatenate([np.ones((2, 32), bool), np.zeros((2, 8), bool)], axis=1)
    # The kept points keep their order, so the same ones centre the patches.
    positions = np.stack([np.sort(rng.choice(40, 32, replace=False)) for _ in range(2)])
    scattered, mask = np.full((2, 40, 3), 7.0, "float32"), np.zeros((2, 40), bool)
    for b in range(2):
        scattered[b, positions[b]] = clouds[b]
        mask[b, positions[b]] = True
    expected = to_numpy(forward(classifier, clouds))
    for points, m in ((padded, keep), (scattered, mask)):
        scores, poses = forward(classifier, points, mask=m, return_poses=True)
        np.testing.assert_allclose(to_numpy(scores), expected, atol=1e-5)
        assert np.all(np.isfinite(to_numpy(poses)))


# Every backend's closed form meets the float64 references in the parity
# cases; the whole model on one backend per suite run.
@pytest.mark.one_backend
def test_closed_form_eigenvectors_give_the_eigh_scores():
    # QuaternionRouting(closed_form=True): the means and the local frames
    # in closed form; the same scores and poses, and it is saved.
    points = ellipsoids(2, 64, np.random.default_rng(3))
    by_eigh = model()
    closed = model(router=QuaternionRouting(3, closed_form=True))
    closed.set_weights(by_eigh.get_weights())
    expected = [to_numpy(t) for t in forward(by_eigh, points, return_poses=True)]
    got = [to_numpy(t) for t in forward(closed, points, return_poses=True)]
    np.testing.assert_allclose(got[0], expected[0], atol=1e-5)
    assert ref.error_up_to_sign(got[1], expected[1]) < 1e-4
    assert closed.frames.closed_form and closed.get_config()["router"]["config"]["closed_form"]
