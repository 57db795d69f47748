"""Backend-agnostic capsule ops, written with `keras.ops` only.

Norms and squashes are computed in float32 when the input is float16 or
bfloat16 (then cast back), and every norm is `sqrt(sum(x^2) + epsilon)`, so
values and gradients stay finite at `x = 0` and for large inputs.
"""

import keras
from keras import ops

_HALF_DTYPES = ("float16", "bfloat16")


def compute_dtype_for(dtype):
    """The dtype to do numerically sensitive work in: float32 for half inputs."""
    dtype = keras.backend.standardize_dtype(dtype)
    return "float32" if dtype in _HALF_DTYPES else dtype


def _upcast(x):
    x = ops.convert_to_tensor(x)
    original = keras.backend.standardize_dtype(x.dtype)
    return ops.cast(x, compute_dtype_for(original)), original


def safe_norm(x, axis=-1, keepdims=False, epsilon=1e-7):
    """Euclidean norm that is differentiable at zero.

    `safe_norm(x) = sqrt(sum(x^2, axis) + epsilon)`.

    Args:
        x: tensor.
        axis: axis (or axes) to reduce.
        keepdims: keep the reduced axis with size 1.
        epsilon: added under the square root; keeps the gradient finite
            at `x = 0`.

    Returns:
        The norm, in the dtype of `x`.
    """
    x, original = _upcast(x)
    norm = ops.sqrt(ops.sum(ops.square(x), axis=axis, keepdims=keepdims) + epsilon)
    return ops.cast(norm, original)


def squash(x, axis=-1, epsilon=1e-7):
    """The squash non-linearity of Sabour et al. (2017), eq. 1.

    `squash(x) = n2 / (1 + n2) * x / sqrt(n2 + epsilon)` with
    `n2 = sum(x^2, axis)`: short vectors shrink towards 0, long ones
    towards unit length, the direction is kept.

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017.

    Example:

    >>> keras_capsules.ops.squash(keras.ops.ones((2, 4)))  # lengths 0.8
    """
    x, original = _upcast(x)
    n2 = ops.sum(ops.square(x), axis=axis, keepdims=True)
    scale = n2 / (1.0 + n2) / ops.sqrt(n2 + epsilon)
    return ops.cast(x * scale, original)


def efficient_squash(x, axis=-1, epsilon=1e-7):
    """The squash of Efficient-CapsNet (Mazzia et al., 2021), eq. 5.

    `efficient_squash(x) = (1 - 1 / exp(n)) * x / n` with
    `n = safe_norm(x, axis, epsilon)`.

    Reference: Mazzia, Salvetti & Chiaberge, "Efficient-CapsNet: capsule
    network with self-attention routing", Scientific Reports 2021.
    """
    x, original = _upcast(x)
    n = ops.sqrt(ops.sum(ops.square(x), axis=axis, keepdims=True) + epsilon)
    # 1 - 1/exp(n) == 1 - exp(-n); the latter cannot overflow.
    return ops.cast((1.0 - ops.exp(-n)) * x / n, original)


def sparsemax(x, axis=-1):
    """Sparsemax (Martins & Astudillo, 2016): the Euclidean projection of
    `x` onto the probability simplex along `axis`.

    ```
    z = sort(x, descending); k_z = max{k : 1 + k z_k > sum_{l<=k} z_l}
    tau = (sum_{l<=k_z} z_l - 1) / k_z
    sparsemax(x) = max(x - tau, 0)
    ```

    The outputs sum to 1 and are exactly 0 outside the support. The sort
    only selects the support; `tau` is then recomputed from `x` with that
    (constant) support, so autodiff gives the true Jacobian
    `diag(s) - s s^T / |S|` (`s` the support indicator) without
    differentiating through a sort. Computed on `x - max(x)` (the same
    projection), so the result is exact for logits of any magnitude, and
    in float32 for half inputs.

    `keras.ops.sparsemax` (Keras <= 3.15.1) is wrong whenever the support
    has more than one element: its threshold sums every cumulative sum of
    the support instead of taking the k_z-th (keras-team/keras#23425).

    Example:

    >>> keras_capsules.ops.sparsemax(keras.ops.array([1.0, 0.5, -1.0]))
    # [0.75, 0.25, 0.0]

    Reference: Martins & Astudillo, "From Softmax to Sparsemax: A Sparse
    Model of Attention and Multi-Label Classification", ICML 2016.
    """
    x, original = _upcast(x)
    x = ops.moveaxis(x, axis, -1)
    n = x.shape[-1]
    # Sparsemax is shift-invariant; shifted by the max, the largest entry is
    # 0 and the support test below holds for k = 1 exactly, whatever the
    # scale (unshifted, `1 + k z_k` loses the 1 in float32 for logits ~1e8
    # and the support came out empty). `tau` is computed on the shifted
    # values too, so `x - tau` keeps the differences between logits.
    x = x - ops.stop_gradient(ops.max(x, axis=-1, keepdims=True))
    z = ops.stop_gradient(-ops.sort(-x, axis=-1))
    ranks = ops.arange(1, n + 1, dtype=x.dtype)
    in_support = 1.0 + ranks * z > ops.cumsum(z, axis=-1)
    # >= 1 also for non-finite inputs, so the k-th largest below exists.
    k = ops.maximum(ops.sum(ops.cast(in_support, "int32"), axis=-1, keepdims=True), 1)
    # Ties at the boundary are all in or all out of the support, so the
    # support is exactly {x >= k-th largest value}. z is sorted descending,
    # so that is the min of its first k entries: a masked min instead of a
    # take_along_axis gather, which torch's ONNX and LiteRT exporters lack.
    kth_largest = ops.min(
        ops.where(ranks <= ops.cast(k, x.dtype), z, z[..., :1]), axis=-1, keepdims=True
    )
    support = ops.cast(x >= kth_largest, x.dtype)
    tau = (ops.sum(x * support, axis=-1, keepdims=True) - 1.0) / ops.cast(k, x.dtype)
    y = ops.maximum(x - tau, 0.0) * support
    return ops.cast(ops.moveaxis(y, -1, axis), original)


def masked_softmax(x, keep, axis=-1):
    """Softmax over the entries where `keep` is true; the others are
    exactly 0 (and get no gradient). Each slice needs one kept entry.
    Computed in float32 for half inputs."""
    x, original = _upcast(x)
    keep = ops.broadcast_to(keep, ops.shape(x))
    lowest = ops.min(ops.stop_gradient(x)) - 1.0
    peak = ops.stop_gradient(ops.max(ops.where(keep, x, lowest), axis=axis, keepdims=True))
    e = ops.exp(ops.where(keep, x - peak, 0.0)) * ops.cast(keep, x.dtype)
    return ops.cast(e / ops.sum(e, axis=axis, keepdims=True), original)


def top_k_softmax(x, k, mask=None):
    """Softmax over the `k` largest entries of the last axis; others are 0.

    `mask` (boolean, broadcastable to `x`), when given, excludes entries
    before the top-k selection (they are never kept). Entries tied with
    the k-th largest value are all kept. Computed in float32 for half
    inputs.
    """
    x, original = _upcast(x)
    if mask is None:
        x_masked = x
    else:
        mask = ops.broadcast_to(mask, ops.shape(x))
        x_masked = ops.where(mask, x, ops.min(ops.stop_gradient(x)) - 1.0)
    kth_largest = ops.stop_gradient(ops.top_k(x_masked, k, sorted=True)[0][..., -1:])
    keep = x_masked >= kth_largest
    if mask is not None:
        keep = ops.logical_and(keep, mask)
    return ops.cast(masked_softmax(x, keep), original)


def householder_orthogonal(v, rows, cols):
    """Maps vectors to (semi-)orthogonal matrices, batched over leading axes.

    With `v: (..., n, n)`, `n = max(rows, cols)`, each `v[..., k, :]` is the
    normal of a reflection `H_k = I - 2 v_k v_k^T / (v_k^T v_k)`; returns the
    top-left `rows x cols` block of `H_1 H_2 ... H_n`, shape `(..., rows,
    cols)`. The product is orthogonal, so the block has orthonormal rows
    (`W W^T = I` when `rows <= cols`) or columns (`W^T W = I` otherwise)
    for any `v`, at every training step, without projection or penalty.

    Vectorised over the leading axes; only the `n` reflections are a loop.
    Computed in float32 for half-precision `v`, returned in `v`'s dtype.

    Example:

    >>> v = keras.random.normal((10, 16, 16))
    >>> keras_capsules.ops.householder_orthogonal(v, 8, 16).shape   # W W^T = I
    (10, 8, 16)

    Reference: Geng et al., "OrthCaps: An Orthogonal CapsNet with Sparse
    Attention Routing and Pruning", CVPR 2024; Mhammedi et al., "Efficient
    Orthogonal Parametrisation of Recurrent Neural Networks Using
    Householder Reflections", ICML 2017.
    """
    n = max(rows, cols)
    if tuple(v.shape[-2:]) != (n, n):
        raise ValueError(
            f"householder_orthogonal(rows={rows}, cols={cols}) needs vectors of "
            f"shape (..., {n}, {n}). Received: v.shape={tuple(v.shape)}"
        )
    original = v.dtype
    v = ops.cast(v, compute_dtype_for(original))
    # tiny: keeps a zero vector finite (then H = I) and changes nothing else.
    scale = 2.0 / (ops.sum(ops.square(v), axis=-1) + 1e-30)
    q = ops.broadcast_to(ops.eye(n, dtype=v.dtype), v.shape)
    for k in range(n):
        u = v[..., k, :]
        # Q H_k = Q - (2 / u^T u) (Q u) u^T
        qu = ops.einsum("...ij,...j->...i", q, u)
        q = q - scale[..., k, None, None] * qu[..., :, None] * u[..., None, :]
    return ops.cast(q[..., :rows, :cols], original)
