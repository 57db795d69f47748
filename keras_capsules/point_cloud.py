"""Neighbourhoods and local reference frames of point clouds, written with
`keras.ops` only. Distances, covariances and eigenvectors are computed in
float32 when the points are float16 or bfloat16."""

from keras import ops

from keras_capsules import small_eigen
from keras_capsules.ops import _upcast
from keras_capsules.quaternion import _cross

# The squared distance given to the points a mask drops: past any real one.
_DROPPED_DISTANCE = 1e30
# A neighbourhood whose offsets leave its plane by at most this share of
# its extent is flat (float32 eigenvectors: about 1e-6 off a plane).
FLAT = 1e-3


def nearest_neighbors(queries, points, k, mask=None):
    """Indices of the `k` points nearest to each query, nearest first.

    Squared distances `|q|^2 - 2 q.p + |p|^2` (one matmul), then
    `keras.ops.top_k`; a query that is one of the points finds itself
    first. They depend on distances only, so they do not change when the
    whole cloud is rotated or moved.

    Args:
        queries: `(batch, m, 3)`.
        points: `(batch, n, 3)`, `n >= k`.
        k: int, the number of neighbours.
        mask: optional booleans `(batch, n)`, `True` = keep: dropped
            points are nobody's neighbours (while a cloud keeps `>= k`).

    Returns:
        int32 indices into `points`, `(batch, m, k)`.

    Example:

    >>> points = ops.convert_to_tensor([[[0.0, 0, 0], [1, 0, 0], [3, 0, 0]]])
    >>> ops.convert_to_numpy(keras_capsules.point_cloud.nearest_neighbors(points, points, 2))
    array([[[0, 1],
            [1, 0],
            [2, 1]]], dtype=int32)
    """
    (queries, _), (points, _) = _upcast(queries), _upcast(points)
    distances = (
        ops.sum(queries * queries, axis=-1)[:, :, None]
        - 2.0 * ops.einsum("bmd,bnd->bmn", queries, points)
        + ops.sum(points * points, axis=-1)[:, None, :]
    )
    if mask is not None:
        distances = ops.where(ops.cast(mask, "bool")[:, None, :], distances, _DROPPED_DISTANCE)
    _, indices = ops.top_k(-distances, k)
    return ops.cast(indices, "int32")


def gather(values, indices):
    """`values[b, indices[b, m, j]]`: per-batch rows of `values (batch, n,
    ...)` at `indices (batch, m, k)`, shaped `(batch, m, k, ...)`.

    Example:

    >>> values = ops.convert_to_tensor([[[0.0], [10.0], [20.0]]])
    >>> indices = ops.convert_to_tensor([[[2, 0]]])
    >>> ops.convert_to_numpy(keras_capsules.point_cloud.gather(values, indices))
    array([[[[20.],
             [ 0.]]]], dtype=float32)
    """
    k = indices.shape[2]
    m = indices.shape[1] if isinstance(indices.shape[1], int) else -1
    trailing = tuple(values.shape[2:])
    # One `take` from the flattened batch: row `i` of cloud `b` is row
    # `b * n + i` (the sizes may be unknown when traced for export).
    batch, n = ops.shape(values)[0], ops.shape(values)[1]
    offsets = ops.arange(batch, dtype="int32")[:, None, None] * ops.cast(n, "int32")
    flat = ops.reshape(ops.cast(indices, "int32") + offsets, (-1,))
    rows = ops.take(ops.reshape(values, (-1,) + trailing), flat, axis=0)
    return ops.reshape(rows, (batch, m, k) + trailing)


def _majority_sign(projections):
    # +1 or -1: the side that most of the neighbours lie on (SHOT's
    # disambiguation); on a tie, the side of their mean; on a tie of both,
    # +1. Counts and sums of projections do not change under rotation.
    votes = ops.sum(ops.sign(projections), axis=-1)
    total = ops.sum(projections, axis=-1)
    side = ops.where(votes != 0, votes, total)
    return ops.cast(ops.where(side < 0, -1.0, 1.0), projections.dtype)


def local_reference_frames(points, num_neighbors, mask=None, closed_form=False):
    """A rotation for each point that turns with the cloud: its local
    reference frame.

    From the offsets `d_j = p_j - p` of the point's `num_neighbors` nearest
    points (itself included) and their covariance `C = mean_j d_j d_j^T`:

    ```
    x = sign_x e_max        e_max, e_min: eigenvectors of the largest and
    z = sign_z e_min                      smallest eigenvalues of C
    y = z cross x           sign_a: +1 if most d_j lie on the side a points
                            to (sum_j sign(d_j . e_a) > 0), -1 if fewer; on
                            a tie, the side of the mean offset
    ```

    A flat neighbourhood (every `|d_j . e_min|` at most `FLAT = 1e-3` of
    the largest `|d_j|`: a digit at `z = 0`, a planar scan) lies on no
    side of its plane, so the normal's sign is taken from the in-plane
    axes instead: `z = x cross (sign_y e_mid)`, with `e_mid = e_min cross
    e_max` and `sign_y` its majority sign.

    The eigenvectors turn with the cloud and the signs do not change, so
    rotating the cloud by `R` turns every frame `F` into `R F`: the frames
    are rotation-equivariant, flat clouds too (where the largest or
    smallest eigenvalue is repeated, as on a sphere or a straight line,
    the axis is not defined and the frame is any eigenvector of it).
    Non-finite coordinates (NaN, Inf) stay in their cloud: every frame of
    a cloud with a non-finite kept point is NaN, as is the frame of a
    point whose neighbourhood holds one, and the other clouds' frames do
    not change. No gradient flows through the frames. Computed in float32
    for half inputs.

    Args:
        points: `(batch, n, 3)`.
        num_neighbors: int, the size of the neighbourhood, `>= 3`.
        mask: optional booleans `(batch, n)`, `True` = keep: the frames are
            made from kept points only (a dropped point gets a frame too,
            from its kept neighbours, around its own coordinates: NaN if
            those are not finite; no kept point's frame uses it).
        closed_form: the eigenvectors in closed form (`keras_capsules.small_eigen`,
            which XLA fuses) instead of `keras.ops.eigh`.

    Returns:
        rotation matrices `(batch, n, 3, 3)`, the axes `x, y, z` as columns.

    Example:

    >>> points = np.random.default_rng(0).normal(size=(1, 32, 3))
    >>> frames = keras_capsules.point_cloud.local_reference_frames(points, 8)
    >>> frames = ops.convert_to_numpy(frames)
    >>> frames.shape, np.allclose(frames[0, 0].T @ frames[0, 0], np.eye(3), atol=1e-5)
    ((1, 32, 3, 3), True)

    Reference: Tombari, Salti & Di Stefano, "Unique Signatures of
    Histograms for Local Surface Description", ECCV 2010 (the
    disambiguation of SHOT); Zhao et al., "Quaternion Equivariant Capsule
    Networks for 3D Point Clouds", ECCV 2020 (local frames as input
    rotations).
    """
    points = ops.stop_gradient(_upcast(points)[0])
    neighbors = gather(points, nearest_neighbors(points, points, num_neighbors, mask))
    offsets = neighbors - points[:, :, None, :]
    if closed_form:
        finite, e_min, e_max = _axes_closed_form(offsets)
    else:
        finite, e_min, e_max = _axes_by_eigh(offsets, num_neighbors)
    kept_finite = ops.all(ops.isfinite(points), axis=-1)
    if mask is not None:
        kept_finite = ops.logical_or(kept_finite, ops.logical_not(ops.cast(mask, "bool")))
    valid = ops.logical_and(finite, ops.all(kept_finite, axis=1, keepdims=True))
    x = e_max * _majority_sign(ops.einsum("bnkd,bnd->bnk", offsets, e_max))[..., None]
    along_normal = ops.einsum("bnkd,bnd->bnk", offsets, e_min)
    z = e_min * _majority_sign(along_normal)[..., None]
    # A flat neighbourhood lies on both sides of no plane: the majority of
    # its offsets' projections on the normal is rounding. Its in-plane axes
    # have signs the points decide, and fix the normal's (right-handed).
    e_mid = _cross(e_min, e_max)
    y = e_mid * _majority_sign(ops.einsum("bnkd,bnd->bnk", offsets, e_mid))[..., None]
    extent = ops.sqrt(ops.max(ops.sum(offsets * offsets, axis=-1), axis=-1))
    flat = ops.max(ops.abs(along_normal), axis=-1) <= FLAT * extent
    z = ops.where(flat[..., None], _cross(x, y), z)
    frames = ops.stack([x, _cross(z, x), z], axis=-1)
    frames = ops.where(valid[..., None, None], frames, ops.cast(float("nan"), frames.dtype))
    return ops.stop_gradient(frames)


def _axes_by_eigh(offsets, num_neighbors):
    """`(finite, e_min, e_max)` of the offsets' covariances, by `eigh`."""
    covariance = ops.einsum("bnki,bnkj->bnij", offsets, offsets) / num_neighbors
    # A non-finite covariance would make `eigh` fail for the whole batch on
    # some backends: the identity goes in its place, and NaN frames come out
    # for its point and for every point of a cloud with a non-finite kept
    # point (its neighbourhoods are not defined).
    finite = ops.all(ops.isfinite(covariance), axis=(-2, -1))  # (b, n)
    identity = ops.eye(3, dtype=covariance.dtype)
    covariance = ops.where(finite[..., None, None], covariance, identity)
    _, vectors = ops.eigh(covariance)  # ascending eigenvalues
    return finite, vectors[..., :, 0], vectors[..., :, 2]


def _axes_closed_form(offsets):
    """`(finite, e_min, e_max)` of the offsets' covariances, by
    `small_eigen` (XLA fuses it)."""
    # The covariance's 6 distinct entries, each its own tensor (as
    # `small_eigen` takes them; the scale does not matter).
    covariance = small_eigen.scatter(ops.unstack(offsets, 3, axis=-1))
    # A non-finite covariance stands in as the identity, and NaN frames come
    # out for its point and for every point of a cloud with a non-finite
    # kept point (its neighbourhoods are not defined).
    finite = ops.isfinite(sum(x for row in covariance for x in row))  # (b, n)
    trace = covariance[0][0] + covariance[1][1] + covariance[2][2]
    # Trace 1 (a third of the identity where all neighbours coincide).
    a = small_eigen.trace_normalized(covariance, finite & (trace > 0))
    # e_min: the top eigenvector of (I - a) / 2, whose eigenvalues are
    # (1 - those of a) / 2, trace 1.
    flipped = [[(float(i == j) - x) / 2.0 for j, x in enumerate(row)] for i, row in enumerate(a)]
    e_max = ops.stack(small_eigen.top_eigenpair(a)[1], axis=-1)
    e_min = ops.stack(small_eigen.top_eigenpair(flipped)[1], axis=-1)
    # Exactly orthogonal to e_max (float32 eigenvectors are to ~1e-7).
    e_min = e_min - ops.sum(e_min * e_max, axis=-1, keepdims=True) * e_max
    e_min = e_min / ops.sqrt(ops.sum(e_min * e_min, axis=-1, keepdims=True) + 1e-30)
    return finite, e_min, e_max
