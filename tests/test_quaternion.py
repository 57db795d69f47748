"""keras_capsules.quaternion and keras_capsules.point_cloud against their
float64 references; the rotation properties the quaternion capsules rest
on; finite gradients where the eigenvectors are degenerate."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_capsules import point_cloud, quaternion
from tests.reference import quaternion as ref
from tests.test_case import gradients, to_numpy

RNG = np.random.default_rng(0)


def unit(shape, rng=RNG):
    q = rng.normal(size=shape + (4,))
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def test_products_rotations_and_matrices_match_the_reference():
    q, r, v = unit((5, 3)), unit((5, 3)), RNG.normal(size=(5, 3, 3))
    f, r32, v32 = q.astype("float32"), r.astype("float32"), v.astype("float32")
    np.testing.assert_allclose(to_numpy(quaternion.multiply(f, r32)), ref.multiply(q, r), atol=1e-6)
    np.testing.assert_allclose(to_numpy(quaternion.rotate(f, v32)), ref.rotate(q, v), atol=1e-5)
    matrices = ref.to_rotation_matrix(q)
    np.testing.assert_allclose(to_numpy(quaternion.to_rotation_matrix(f)), matrices, atol=1e-6)
    # From matrices: one rotation per quaternion, w >= 0, every branch of
    # Shepperd's method (half turns about x, y, z included).
    half_turns = np.eye(4)[1:]
    q = np.concatenate([ref.positive_real(q.reshape(-1, 4)), half_turns])
    back = to_numpy(quaternion.from_rotation_matrix(ref.to_rotation_matrix(q).astype("float32")))
    np.testing.assert_allclose(back, q, atol=1e-6)


def test_angular_distance():
    q = unit((6,))
    turn = np.array([np.cos(0.3), np.sin(0.3), 0, 0])  # 0.6 rad about x
    d = to_numpy(
        quaternion.angular_distance(q.astype("float32"), ref.multiply(q, turn).astype("float32"))
    )
    np.testing.assert_allclose(d, 0.6 / np.pi, rtol=1e-5)
    same = to_numpy(quaternion.angular_distance(q.astype("float32"), -q.astype("float32")))
    np.testing.assert_allclose(same, 2 * np.arccos(0.9999) / np.pi, rtol=1e-5)
    # Small angles, just above the clip, where a float32 arccosine of the
    # cosine is off by about 1e-4 of the value.
    for angle in (0.03, 0.05, 0.1):  # the clip: 0.0283 rad
        turn = np.array([np.cos(angle / 2), 0, np.sin(angle / 2), 0])
        d = quaternion.angular_distance(
            q.astype("float32"), ref.multiply(q, turn).astype("float32")
        )
        np.testing.assert_allclose(to_numpy(d), angle / np.pi, rtol=1e-5)


def test_weighted_mean_matches_the_reference_and_rotates_with_its_inputs():
    centre = unit(())
    q = centre + 0.4 * RNG.normal(size=(3, 7, 4))
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    q[:, ::2] *= -1  # signs do not matter
    w = RNG.uniform(0, 1, size=(3, 7))
    mean = to_numpy(quaternion.weighted_mean(q.astype("float32"), w.astype("float32")))
    np.testing.assert_allclose(mean, ref.weighted_mean(q, w), atol=1e-5)
    assert np.all(mean[:, 0] >= 0)
    r = unit(())
    turned = to_numpy(
        quaternion.weighted_mean(ref.multiply(r, q).astype("float32"), w.astype("float32"))
    )
    assert ref.error_up_to_sign(turned, ref.multiply(r, mean)) < 1e-5


@pytest.mark.parametrize("weights", ([[1.0]], [[0.0, 0.0, 0.0]], [[1.0, 1.0, 0.0]]))
def test_weighted_mean_gradients_are_finite_where_eigenvalues_repeat(weights):
    # One quaternion, zero weights, two equal ones: eigenvalues repeat,
    # where each backend's own `eigh` gradient is NaN.
    weights = np.array(weights, "float32")
    q = np.tile(unit((1, 1)), (1, weights.shape[1], 1)).astype("float32")
    tensors = {"q": ops.convert_to_tensor(q), "w": ops.convert_to_tensor(weights)}
    projection = ops.convert_to_tensor(np.arange(1.0, 5.0, dtype="float32"))

    def loss(t):
        return ops.sum(quaternion.weighted_mean(t["q"], t["w"]) * projection)

    for g in gradients(loss, tensors, ("q", "w")).values():
        assert np.all(np.isfinite(to_numpy(g))), g
    expected = [1.0, 0, 0, 0] if weights.sum() == 0 else ref.positive_real(q[0, 0])
    np.testing.assert_allclose(
        to_numpy(quaternion.weighted_mean(q, weights))[0], expected, atol=1e-6
    )


def test_mixed_precision_inputs_are_averaged_in_float32():
    q = unit((2, 5)).astype("float16")
    mean = quaternion.weighted_mean(q, np.ones((2, 5), "float16"))
    assert keras.backend.standardize_dtype(mean.dtype) == "float16"
    assert np.all(np.isfinite(to_numpy(mean)))
    d = quaternion.angular_distance(q, q)
    assert keras.backend.standardize_dtype(d.dtype) == "float16"


def test_neighbours_and_gather():
    points = RNG.normal(size=(2, 20, 3)).astype("float32")
    idx = ops.convert_to_numpy(point_cloud.nearest_neighbors(points[:, :4], points, 5))
    distances = np.sum((points[:, :4, None] - points[:, None]) ** 2, -1)
    np.testing.assert_array_equal(idx, np.argsort(distances, -1)[..., :5])
    gathered = to_numpy(point_cloud.gather(points, idx))
    np.testing.assert_array_equal(gathered, np.take_along_axis(points[:, None], idx[..., None], 2))


def flat_clouds(count, points, rng):
    """Clouds at z = 0 (as digits drawn as point sets), in a random
    plane through the origin."""
    p = np.zeros((count, points, 3))
    p[..., :2] = rng.uniform(-1, 1, (count, points, 2))
    tilt = ref.to_rotation_matrix(unit((), rng))
    return (p @ tilt.T).astype("float32")


@pytest.mark.parametrize("closed_form", [False, True])
def test_local_reference_frames_of_flat_clouds_turn_with_the_cloud(closed_form):
    # Every neighbourhood is flat: the normal's majority sign is rounding,
    # so the frames take it from the in-plane axes.
    p = flat_clouds(2, 48, np.random.default_rng(1))
    frames = to_numpy(point_cloud.local_reference_frames(p, 10, closed_form=closed_form))
    np.testing.assert_allclose(
        frames, ref.local_reference_frames(p.astype("float64"), 10), atol=1e-4
    )
    np.testing.assert_allclose(np.linalg.det(frames), 1.0, atol=1e-5)
    for seed in range(3):
        rotation = ref.to_rotation_matrix(unit((), np.random.default_rng(seed)))
        turned = point_cloud.local_reference_frames(
            p @ rotation.T.astype("float32"), 10, closed_form=closed_form
        )
        np.testing.assert_allclose(to_numpy(turned), rotation @ frames, atol=1e-4)


def test_local_reference_frames_are_rotations_that_turn_with_the_cloud():
    p = RNG.normal(size=(2, 48, 3))
    p /= np.linalg.norm(p, axis=-1, keepdims=True)
    p = (p * [1.5, 1.0, 0.6]).astype("float32")
    frames = to_numpy(point_cloud.local_reference_frames(p, 10))
    np.testing.assert_allclose(
        frames, ref.local_reference_frames(p.astype("float64"), 10), atol=1e-4
    )
    np.testing.assert_allclose(np.linalg.det(frames), 1.0, atol=1e-5)
    for seed in range(3):
        rotation = ref.to_rotation_matrix(unit((), np.random.default_rng(seed)))
        turned = to_numpy(point_cloud.local_reference_frames(p @ rotation.T.astype("float32"), 10))
        np.testing.assert_allclose(turned, rotation @ frames, atol=1e-4)
