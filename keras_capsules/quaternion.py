"""Quaternion algebra for rotation capsules, written with `keras.ops` only.

Quaternions are the last axis of a tensor, `(w, x, y, z)`, `w` the real
part; a unit quaternion `q` is the rotation `R(q)` and `-q` the same
rotation. Products follow Hamilton's convention: `multiply(q, r)` rotates
by `r`, then by `q`. Work that loses accuracy in half precision (the
eigenvectors of `weighted_mean`, the arccosine of `angular_distance`) runs
in float32 when the inputs are float16 or bfloat16, and the results are
cast back.
"""

import math

from keras import ops

from keras_capsules import small_eigen
from keras_capsules.ops import _upcast

# Eigenvalue gaps below this fraction of the largest eigenvalue count as
# ties in the gradient of `weighted_mean` by `eigh`.
_TIE = 1e-6

# `angular_distance` clips |<q, r>| below 1: the arccosine's slope is
# infinite at 1 (Zhao et al. clip at the same value).
_MAX_COSINE = 0.9999
# The distance at that cosine: the least `angular_distance` returns.
_MIN_DISTANCE = 2.0 * math.acos(_MAX_COSINE) / math.pi


def multiply(q, r):
    """The Hamilton product `q r` of quaternions `(..., 4)` (broadcast).

    Args:
        q: quaternions `(..., 4)`.
        r: quaternions `(..., 4)`, broadcastable against `q`.

    Returns:
        `q r`, `(..., 4)`.

    Example:

    >>> i = ops.convert_to_tensor([0.0, 1.0, 0.0, 0.0])
    >>> j = ops.convert_to_tensor([0.0, 0.0, 1.0, 0.0])
    >>> ops.convert_to_numpy(keras_capsules.quaternion.multiply(i, j))  # i j = k
    array([0., 0., 0., 1.], dtype=float32)
    """
    q0, q1, q2, q3 = ops.unstack(ops.convert_to_tensor(q), 4, axis=-1)
    r0, r1, r2, r3 = ops.unstack(ops.convert_to_tensor(r), 4, axis=-1)
    return ops.stack(
        [
            q0 * r0 - q1 * r1 - q2 * r2 - q3 * r3,
            q0 * r1 + q1 * r0 + q2 * r3 - q3 * r2,
            q0 * r2 - q1 * r3 + q2 * r0 + q3 * r1,
            q0 * r3 + q1 * r2 - q2 * r1 + q3 * r0,
        ],
        axis=-1,
    )


def conjugate(q):
    """`(w, -x, -y, -z)`: the inverse of a unit quaternion.

    Example:

    >>> ops.convert_to_numpy(keras_capsules.quaternion.conjugate(ops.ones((4,))))
    array([ 1., -1., -1., -1.], dtype=float32)
    """
    q = ops.convert_to_tensor(q)
    return q * ops.convert_to_tensor([1.0, -1.0, -1.0, -1.0], dtype=q.dtype)


def _cross(u, v):
    u0, u1, u2 = ops.unstack(u, 3, axis=-1)
    v0, v1, v2 = ops.unstack(v, 3, axis=-1)
    return ops.stack([u1 * v2 - u2 * v1, u2 * v0 - u0 * v2, u0 * v1 - u1 * v0], axis=-1)


def rotate(q, v):
    """Vectors `v (..., 3)` rotated by unit quaternions `q (..., 4)`.

    `rotate(q, v) = v + 2 w (u x v) + 2 u x (u x v)` with `q = (w, u)`,
    which is `q (0, v) q*` for unit `q`.

    Args:
        q: unit quaternions `(..., 4)`.
        v: vectors `(..., 3)`, broadcastable against `q[..., :3]`.

    Returns:
        the rotated vectors, `(..., 3)`.

    Example (a quarter turn about z takes x to y):

    >>> q = ops.convert_to_tensor([0.5 ** 0.5, 0.0, 0.0, 0.5 ** 0.5])
    >>> v = ops.convert_to_tensor([1.0, 0.0, 0.0])
    >>> ops.convert_to_numpy(keras_capsules.quaternion.rotate(q, v)).round(6) + 0
    array([0., 1., 0.], dtype=float32)
    """
    q, v = ops.convert_to_tensor(q), ops.convert_to_tensor(v)
    w, u = q[..., :1], q[..., 1:]
    uv = _cross(u, v)
    return v + 2.0 * (w * uv + _cross(u, uv))


def to_rotation_matrix(q):
    """The rotation matrices `(..., 3, 3)` of unit quaternions `(..., 4)`:
    `to_rotation_matrix(q) @ v == rotate(q, v)`.

    Example:

    >>> m = keras_capsules.quaternion.to_rotation_matrix(ops.convert_to_tensor([1.0, 0, 0, 0]))
    >>> ops.convert_to_numpy(m)
    array([[1., 0., 0.],
           [0., 1., 0.],
           [0., 0., 1.]], dtype=float32)
    """
    w, x, y, z = ops.unstack(ops.convert_to_tensor(q), 4, axis=-1)
    rows = [
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ]
    return ops.stack([ops.stack(row, axis=-1) for row in rows], axis=-2)


def from_rotation_matrix(m):
    """Unit quaternions `(..., 4)` of rotation matrices `(..., 3, 3)`, with
    `w >= 0`.

    Shepperd's method: the four candidate quaternions, each exact where its
    own component is the largest; the candidate of the largest one is kept
    (selected with a one-hot sum, no branches).

    Args:
        m: rotation matrices `(..., 3, 3)`.

    Returns:
        unit quaternions `(..., 4)`.

    Example (a half turn about x):

    >>> m = ops.convert_to_tensor([[1.0, 0, 0], [0, -1, 0], [0, 0, -1]])
    >>> ops.convert_to_numpy(keras_capsules.quaternion.from_rotation_matrix(m))
    array([0., 1., 0., 0.], dtype=float32)
    """
    m = ops.convert_to_tensor(m)
    (m00, m01, m02), (m10, m11, m12), (m20, m21, m22) = (
        ops.unstack(row, 3, axis=-1) for row in ops.unstack(m, 3, axis=-2)
    )
    candidates = ops.stack(
        [
            ops.stack([1 + m00 + m11 + m22, m21 - m12, m02 - m20, m10 - m01], axis=-1),
            ops.stack([m21 - m12, 1 + m00 - m11 - m22, m01 + m10, m02 + m20], axis=-1),
            ops.stack([m02 - m20, m01 + m10, 1 - m00 + m11 - m22, m12 + m21], axis=-1),
            ops.stack([m10 - m01, m02 + m20, m12 + m21, 1 - m00 - m11 + m22], axis=-1),
        ],
        axis=-2,
    )
    # Candidate k is 4 q_k q: its own component, 4 q_k^2, is on the diagonal.
    diagonal = ops.diagonal(candidates, axis1=-2, axis2=-1)
    pick = ops.one_hot(ops.argmax(diagonal, axis=-1), 4, dtype=m.dtype)
    q = ops.sum(pick[..., None] * candidates, axis=-2)
    q = q / ops.sqrt(ops.sum(q * q, axis=-1, keepdims=True))
    return _positive_real(q)


def _positive_real(q):
    # q and -q are one rotation: the one with w > 0 represents it, and for
    # a half turn (w = 0) the one whose first nonzero of x, y, z is > 0.
    w, x, y, z = ops.unstack(q, 4, axis=-1)
    lead = ops.where(w != 0, w, ops.where(x != 0, x, ops.where(y != 0, y, z)))
    return ops.where(lead[..., None] < 0, -q, q)


def weighted_mean(q, weights, closed_form=False):
    """The weighted mean rotation of quaternions `q (..., n, 4)`.

    The quaternion of largest `sum_i weights_i (q_i . m)^2` over unit `m`:
    the eigenvector of the largest eigenvalue of the scatter matrix
    `M = sum_i weights_i q_i q_i^T` (Markley et al., 2007), by
    `keras.ops.eigh`, or with `closed_form=True` by the closed form of
    `keras_capsules.small_eigen`, which XLA fuses (6x faster than `eigh` on
    CPU, but slower to compile; without XLA no faster). The two agree to
    float32 accuracy. It does not depend on the
    signs of the `q_i`, and it rotates with them: `weighted_mean(r q, w) =
    r weighted_mean(q, w)` (up to sign) for any unit `r`. Returned with
    `w >= 0`; zero weights give the identity; NaN or Inf quaternions or
    weights give NaN (for their mean only).

    The gradient is the eigenvector's first-order perturbation, `dm =
    (lambda I - M)^+ dM m` (the backends' own `eigh` gradients divide by
    the gaps between *all* eigenvalues, which are 0, a NaN gradient,
    whenever fewer than four distinct quaternions are averaged). Where the
    top eigenvalue is not unique (no defined mean) the gradient does not
    grow without bound: with `eigh`, directions whose gap is below `1e-6
    lambda` contribute nothing; in closed form, where the pseudo-inverse
    is the adjugate of `lambda I - M + lambda m m^T` over its determinant,
    it is scaled by `det^2 / (det^2 + (1e-6 lambda^4)^2)`. Computed in
    float32 for half inputs.

    Args:
        q: quaternions `(..., n, 4)`.
        weights: non-negative weights `(..., n)`.
        closed_form: the closed form instead of `eigh`.

    Returns:
        unit quaternions `(..., 4)`, in the dtype of `q`.

    Example:

    >>> q = ops.convert_to_tensor([[0.0, 1.0, 0.0, 0.0], [0.0, -1.0, 0.0, 0.0]])
    >>> mean = keras_capsules.quaternion.weighted_mean(q, ops.ones((2,)))
    >>> ops.convert_to_numpy(mean).round(4) + 0  # q and -q: one rotation
    array([0., 1., 0., 0.], dtype=float32)

    Reference: Markley, Cheng, Crassidis & Oshman, "Averaging Quaternions",
    Journal of Guidance, Control, and Dynamics 30(4), 2007.
    """
    q, original = _upcast(q)
    weights = ops.cast(weights, q.dtype)
    mean = _mean_closed_form(q, weights) if closed_form else _mean_by_eigh(q, weights)
    return ops.cast(mean, original)


def _mean_by_eigh(q, weights):
    # Matmuls, not einsums: TensorFlow's einsum of this layout is 8x slower.
    scatter = ops.matmul(ops.swapaxes(q * weights[..., None], -1, -2), q)
    # A non-finite scatter (NaN or Inf quaternions or weights) would make
    # `eigh` fail for the whole batch on some backends: the identity goes
    # in its place, and its mean comes out NaN.
    finite = ops.all(ops.isfinite(scatter), axis=(-2, -1))[..., None]
    fixed = ops.where(finite[..., None], ops.stop_gradient(scatter), ops.eye(4, dtype=q.dtype))
    values, vectors = ops.eigh(fixed)  # ascending eigenvalues: the last column
    top = vectors[..., :, -1]
    gaps = values[..., -1:] - values
    tie = _TIE * ops.maximum(values[..., -1:], 1e-30)
    inverse_gaps = ops.where(gaps > tie, 1.0 / ops.where(gaps > tie, gaps, 1.0), 0.0)
    # Zero in value, the first-order change of `top` in gradient.
    change = ops.matmul(scatter - fixed, top[..., None])
    along = inverse_gaps[..., None] * ops.matmul(ops.swapaxes(vectors, -1, -2), change)
    top = top + ops.matmul(vectors, along)[..., 0]
    identity = ops.convert_to_tensor([1.0, 0.0, 0.0, 0.0], dtype=q.dtype)
    empty = values[..., -1:] <= 0
    mean = _positive_real(ops.where(empty, identity, top))
    return ops.where(finite, mean, ops.cast(float("nan"), q.dtype))


def _mean_closed_form(q, weights):
    # The scatter's 10 distinct entries, each its own tensor (as
    # `small_eigen` takes them): sums over n, which every backend fuses or
    # vectorises, where a batch of 4x4 matmuls runs one small product at a
    # time (XLA on CPU: 4x slower).
    scatter = small_eigen.scatter(
        ops.unstack(ops.stop_gradient(q), 4, axis=-1), ops.stop_gradient(weights)
    )
    # A non-finite scatter (NaN or Inf quaternions or weights) stands in
    # as the identity, and its mean comes out NaN.
    finite = ops.isfinite(sum(x for row in scatter for x in row))
    trace = ops.where(finite, scatter[0][0] + scatter[1][1] + scatter[2][2] + scatter[3][3], 4.0)
    empty = trace <= 0
    scale = ops.where(empty, 1.0, trace)
    # Trace 1; a quarter of the identity where there is nothing to average.
    normalized = small_eigen.trace_normalized(scatter, finite & ~empty)
    value, top = small_eigen.top_eigenpair(normalized)
    # (lambda I - A)^+ on the complement of `top`: the inverse of
    # B = lambda (I + top top^T) - A, from its adjugate.
    b = [
        [value * (float(i == j) + top[i] * top[j]) - x for j, x in enumerate(row)]
        for i, row in enumerate(normalized)
    ]
    adjugate, det = small_eigen.adjugate(b)
    floor = 1e-6 * value**4
    gain = ops.where(empty, 0.0, det / (det * det + floor * floor) / scale)
    top = ops.stack(top, axis=-1)
    # Zero in value, `dM top` in gradient: `dM top = sum_i d(w_i q_i (q_i . top))`.
    moved = ops.sum((weights * ops.sum(q * top[..., None, :], axis=-1))[..., None] * q, axis=-2)
    change = moved - ops.stop_gradient(moved)
    change = change - ops.sum(change * top, axis=-1, keepdims=True) * top
    along = small_eigen.matvec(adjugate, ops.unstack(change, 4, axis=-1))
    top = top + gain[..., None] * ops.stack(along, axis=-1)
    identity = ops.convert_to_tensor([1.0, 0.0, 0.0, 0.0], dtype=q.dtype)
    mean = _positive_real(ops.where(empty[..., None], identity, top))
    return ops.where(finite[..., None], mean, ops.cast(float("nan"), q.dtype))


def angular_distance(q, r):
    """The angle between the rotations of unit quaternions, over pi.

    `angular_distance(q, r) = 2 arccos(min(|q . r|, 0.9999)) / pi`, in
    `[0.009, 1]`: 0 for one rotation (up to the clip), 1 for rotations a
    half turn apart. The clip keeps the gradient finite (the arccosine's
    slope is infinite at 1). Computed as `4 atan2(|q - s r|, |q + s r|) /
    pi` with `s = sign(q . r)`, the same angle for unit quaternions: the
    arccosine of a float32 cosine near 1 loses digits (8e-5 of the value
    at 0.03 rad, just above the clip, and results that depend on how a
    compiler fuses the dot product). Computed in float32 for half inputs.

    Args:
        q: unit quaternions `(..., 4)`.
        r: unit quaternions `(..., 4)`, broadcastable against `q`.

    Returns:
        distances `(...)`, in the dtype of `q`.

    Example (a quarter turn apart):

    >>> q = ops.convert_to_tensor([1.0, 0.0, 0.0, 0.0])
    >>> r = ops.convert_to_tensor([0.5 ** 0.5, 0.5 ** 0.5, 0.0, 0.0])
    >>> round(float(keras_capsules.quaternion.angular_distance(q, r)), 4)
    0.5

    Reference: Zhao, Birdal, Lenssen, Menegatti, Guibas & Tombari,
    "Quaternion Equivariant Capsule Networks for 3D Point Clouds", ECCV
    2020 (the distance of their routing).
    """
    q, original = _upcast(q)
    r = ops.cast(r, q.dtype)
    r = ops.where(ops.sum(q * r, axis=-1, keepdims=True) < 0, -r, r)
    # Half the angle between q and r: tan = |q - r| / |q + r|. The norms'
    # epsilon keeps the gradient finite where q = r (below the clip, so
    # the value does not see it).
    apart = ops.sqrt(ops.sum(ops.square(q - r), axis=-1) + 1e-12)
    along = ops.sqrt(ops.sum(ops.square(q + r), axis=-1) + 1e-12)
    distance = 4.0 * ops.arctan2(apart, along) / math.pi
    return ops.cast(ops.maximum(distance, _MIN_DISTANCE), original)
