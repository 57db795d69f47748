"""Float64 NumPy references of the quaternion algebra, QuaternionRouting
and QuaternionCapsule (Zhao et al., ECCV 2020), written from the formulas
of their docstrings, with NumPy's own eigen-solver."""

import numpy as np


def multiply(q, r):
    q0, q1, q2, q3 = np.moveaxis(q, -1, 0)
    r0, r1, r2, r3 = np.moveaxis(r, -1, 0)
    return np.stack(
        [
            q0 * r0 - q1 * r1 - q2 * r2 - q3 * r3,
            q0 * r1 + q1 * r0 + q2 * r3 - q3 * r2,
            q0 * r2 - q1 * r3 + q2 * r0 + q3 * r1,
            q0 * r3 + q1 * r2 - q2 * r1 + q3 * r0,
        ],
        axis=-1,
    )


def conjugate(q):
    return q * np.array([1.0, -1.0, -1.0, -1.0])


def rotate(q, v):
    """q (0, v) q*, by two Hamilton products."""
    pure = np.concatenate([np.zeros(v.shape[:-1] + (1,)), v], axis=-1)
    q = np.broadcast_to(q, np.broadcast_shapes(q.shape, pure.shape))
    return multiply(multiply(q, pure), conjugate(q))[..., 1:]


def to_rotation_matrix(q):
    """Columns: the images of x, y, z."""
    eye = np.eye(3)
    return np.stack([rotate(q, np.broadcast_to(e, q.shape[:-1] + (3,))) for e in eye], axis=-1)


def positive_real(q):
    return np.where(q[..., :1] < 0, -q, q)


def weighted_mean(q, weights):
    scatter = np.einsum("...n,...ni,...nj->...ij", weights, q, q)
    values, vectors = np.linalg.eigh(scatter)
    top = vectors[..., :, -1]
    top = np.where(values[..., -1:] <= 0, np.array([1.0, 0, 0, 0]), top)
    return positive_real(top)


def angular_distance(q, r):
    """2 arccos(min(|q . r|, 0.9999)) / pi for unit quaternions, as the
    library computes it (4 atan2(|q - s r|, |q + s r|) / pi, s = sign(q . r);
    off the unit sphere, and so in gradients, the two differ)."""
    r = np.where(np.sum(q * r, axis=-1, keepdims=True) < 0, -r, r)
    apart = np.sqrt(np.sum((q - r) ** 2, axis=-1))
    along = np.sqrt(np.sum((q + r) ** 2, axis=-1))
    return np.maximum(4 * np.arctan2(apart, along) / np.pi, 2 * np.arccos(0.9999) / np.pi)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def quaternion_routing(votes, activations, alpha, beta, iterations, stopped=None):
    """votes (batch, in, out, 4); `stopped`: the votes the iterations before
    the last see (their gradient is stopped in the library; default: the
    votes)."""
    stopped = votes if stopped is None else stopped
    if activations is None:
        activations = np.ones(votes.shape[:2])
    a = activations[:, :, None]
    c = np.broadcast_to(a, votes.shape[:3])
    for iteration in range(iterations):
        last = iteration == iterations - 1
        v = votes if last else stopped
        weights = c / (c.sum(axis=1, keepdims=True) + 1e-7)
        poses = weighted_mean(np.swapaxes(v, 1, 2), np.swapaxes(weights, 1, 2))
        if not last:
            c = c * a * (1 - angular_distance(poses[:, None], stopped))
    agreement = 1 - angular_distance(poses[:, None], votes)
    count = (c > 0).sum(axis=1)
    mean = (c * agreement).sum(axis=1) / np.maximum(count, 1)
    out = sigmoid(alpha * mean + beta - 1) * (count > 0)
    return poses, out, weights


def quaternion_capsule_votes(offsets, poses, activations, k1, b1, k2, b2, num_capsules):
    """The layer's votes (batch * patches, neighbors * in_caps, out, 4)."""
    batch, patches, neighbors, in_caps, _ = poses.shape
    means = weighted_mean(np.swapaxes(poses, 2, 3), np.swapaxes(activations, 2, 3))
    local = rotate(conjugate(means)[:, :, None], offsets[:, :, :, None])
    features = local.reshape(batch, patches, neighbors, 3 * in_caps)
    transforms = (features @ k1 + b1) @ k2 + b2
    transforms = transforms.reshape(batch, patches, neighbors, in_caps, num_capsules, 4)
    transforms = transforms / np.sqrt(np.sum(transforms**2, axis=-1, keepdims=True) + 1e-12)
    votes = multiply(poses[:, :, :, :, None], transforms)
    return votes.reshape(batch * patches, neighbors * in_caps, num_capsules, 4)


def quaternion_capsule(a, num_capsules, iterations, stopped_inputs=None):
    """QuaternionCapsule's [poses, activations] for the arrays `a` (offsets,
    poses, activations, kernel_1, bias_1, kernel_2, bias_2, alpha, beta);
    `stopped_inputs`: the arrays of the votes whose gradient is stopped."""

    def votes_of(arrays):
        return quaternion_capsule_votes(
            arrays["offsets"], arrays["poses"], arrays["activations"], arrays["kernel_1"],
            arrays["bias_1"], arrays["kernel_2"], arrays["bias_2"], num_capsules,
        )  # fmt: skip

    batch, patches, neighbors, in_caps, _ = a["poses"].shape
    votes = votes_of(a)
    stopped = None if stopped_inputs is None else votes_of(stopped_inputs)
    poses, activations, _ = quaternion_routing(
        votes,
        a["activations"].reshape(batch * patches, neighbors * in_caps),
        a["alpha"],
        a["beta"],
        iterations,
        stopped,
    )
    return [
        poses.reshape(batch, patches, num_capsules, 4),
        activations.reshape(batch, patches, num_capsules),
    ]


def _majority_sign(projections):
    votes = np.sign(projections).sum(axis=-1)
    side = np.where(votes != 0, votes, projections.sum(axis=-1))
    return np.where(side < 0, -1.0, 1.0)


def local_reference_frames(points, k):
    """Rotation matrices (batch, n, 3, 3): the principal axes of each
    point's k nearest offsets, signs by majority, y = z x x; on flat
    neighbourhoods z = x x (signed e_mid)."""
    distances = np.sum((points[:, :, None] - points[:, None]) ** 2, axis=-1)
    nearest = np.argsort(distances, axis=-1, kind="stable")[..., :k]
    offsets = np.take_along_axis(points[:, None], nearest[..., None], axis=2) - points[:, :, None]
    _, vectors = np.linalg.eigh(np.einsum("bnki,bnkj->bnij", offsets, offsets) / k)
    e_min, e_max = vectors[..., 0], vectors[..., 2]
    x = e_max * _majority_sign(np.einsum("bnkd,bnd->bnk", offsets, e_max))[..., None]
    along_normal = np.einsum("bnkd,bnd->bnk", offsets, e_min)
    z = e_min * _majority_sign(along_normal)[..., None]
    # Flat neighbourhoods: the normal's sign from the signed in-plane axes.
    e_mid = np.cross(e_min, e_max)
    y = e_mid * _majority_sign(np.einsum("bnkd,bnd->bnk", offsets, e_mid))[..., None]
    extent = np.sqrt(np.max(np.sum(offsets**2, axis=-1), axis=-1))
    flat = np.max(np.abs(along_normal), axis=-1) <= 1e-3 * extent
    z = np.where(flat[..., None], np.cross(x, y), z)
    return np.stack([x, np.cross(z, x), z], axis=-1)


def from_rotation_matrix(m):
    """The unit quaternion of each rotation matrix: the top eigenvector of
    Bar-Itzhack's symmetric 4x4 matrix (an independent method)."""
    k = np.zeros(m.shape[:-2] + (4, 4))
    m00, m01, m02 = m[..., 0, 0], m[..., 0, 1], m[..., 0, 2]
    m10, m11, m12 = m[..., 1, 0], m[..., 1, 1], m[..., 1, 2]
    m20, m21, m22 = m[..., 2, 0], m[..., 2, 1], m[..., 2, 2]
    rows = [
        [m00 + m11 + m22, m21 - m12, m02 - m20, m10 - m01],
        [m21 - m12, m00 - m11 - m22, m01 + m10, m02 + m20],
        [m02 - m20, m01 + m10, m11 - m00 - m22, m12 + m21],
        [m10 - m01, m02 + m20, m12 + m21, m22 - m00 - m11],
    ]
    for i in range(4):
        for j in range(4):
            k[..., i, j] = rows[i][j] / 3
    return positive_real(np.linalg.eigh(k)[1][..., :, -1])


def error_up_to_sign(actual, expected):
    """The largest difference between quaternions, each compared with the
    expected one or its negative (one rotation), whichever is nearer."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    return float(
        np.minimum(np.abs(actual - expected).max(-1), np.abs(actual + expected).max(-1)).max()
    )
