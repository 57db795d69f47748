"""Backend-agnostic capsule ops, written with `keras.ops` only.

Norms and squashes are computed in float32 when the input is float16 or
bfloat16 (then cast back), and every norm is `sqrt(sum(x^2) + epsilon)`, so
values and gradients stay finite at `x = 0` and for large inputs.
"""

import keras
from keras import ops

_HALF_DTYPES = ("float16", "bfloat16")


def compute_dtype_for(dtype):
    """The dtype to do numerically sensitive work in: float32 for half inputs.

    Args:
        dtype: a dtype or its name.

    Returns:
        `"float32"` for `float16` and `bfloat16`, else the standardised
        `dtype` itself.

    Example:

    >>> keras_capsules.ops.compute_dtype_for("bfloat16")
    'float32'
    """
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
        The norm, shape of `x` without `axis` (size 1 there with
        `keepdims`), in the dtype of `x`.

    Example:

    >>> x = keras.ops.array([[3.0, 4.0], [0.0, 0.0]])
    >>> [round(float(n), 4) for n in ops.convert_to_numpy(keras_capsules.ops.safe_norm(x))]
    [5.0, 0.0003]
    """
    x, original = _upcast(x)
    norm = ops.sqrt(ops.sum(ops.square(x), axis=axis, keepdims=keepdims) + epsilon)
    return ops.cast(norm, original)


def squash(x, axis=-1, epsilon=1e-7):
    """The squash non-linearity of Sabour et al. (2017), eq. 1.

    `squash(x) = n2 / (1 + n2) * x / sqrt(n2 + epsilon)` with
    `n2 = sum(x^2, axis)`: short vectors shrink towards 0, long ones
    towards unit length, the direction is kept.

    Args:
        x: capsule poses, e.g. `(batch, capsules, dim)`.
        axis: the capsule dimension.
        epsilon: added under the square root; keeps the gradient finite
            at `x = 0`.

    Returns:
        squashed poses, the shape and dtype of `x` (computed in float32
        for half inputs).

    Example:

    >>> y = keras_capsules.ops.squash(keras.ops.ones((2, 4)))  # norm 2 -> 0.8
    >>> ops.convert_to_numpy(y).round(3)
    array([[0.4, 0.4, 0.4, 0.4],
           [0.4, 0.4, 0.4, 0.4]], dtype=float32)

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017.
    """
    x, original = _upcast(x)
    n2 = ops.sum(ops.square(x), axis=axis, keepdims=True)
    scale = n2 / (1.0 + n2) / ops.sqrt(n2 + epsilon)
    return ops.cast(x * scale, original)


def squash_length(x, axis=-1):
    """The length of `squash(x)`, without the squash: `n2 / (1 + n2)` with
    `n2 = sum(x^2, axis)`.

    In [0, 1), smooth everywhere (no square root, so its gradient is finite
    and 0 at `x = 0`); computed in float32 for half inputs.

    Args:
        x: capsule poses, e.g. `(batch, capsules, dim)`.
        axis: the capsule dimension.

    Returns:
        the lengths, the shape of `x` without `axis`, in the dtype of `x`.

    Example:

    >>> ops.convert_to_numpy(keras_capsules.ops.squash_length(keras.ops.ones((1, 4))))
    array([0.8], dtype=float32)
    """
    x, original = _upcast(x)
    n2 = ops.sum(ops.square(x), axis=axis)
    return ops.cast(n2 / (1.0 + n2), original)


def layer_norm(x, epsilon=1e-5):
    """Layer normalisation without parameters over the last axis:
    `(x - mean) / sqrt(variance + epsilon)`, the biased variance.

    The means are sums divided by the size (Keras 3.15's `ops.mean` on
    torch loses float64 precision, errors ~1e-8); computed in float32 for
    half inputs.

    Args:
        x: a tensor, normalised over its last axis (of known size).
        epsilon: added to the variance.

    Returns:
        the normalised tensor, in the dtype of `x`.

    Example:

    >>> x = keras.ops.convert_to_tensor([[1.0, 3.0]])
    >>> ops.convert_to_numpy(keras_capsules.ops.layer_norm(x)).round(4)
    array([[-1.,  1.]], dtype=float32)
    """
    x, original = _upcast(x)
    size = x.shape[-1]
    centred = x - ops.sum(x, axis=-1, keepdims=True) / size
    variance = ops.sum(ops.square(centred), axis=-1, keepdims=True) / size
    return ops.cast(centred * ops.rsqrt(variance + epsilon), original)


def efficient_squash(x, axis=-1, epsilon=1e-7):
    """The squash of Efficient-CapsNet (Mazzia et al., 2021), eq. 5.

    `efficient_squash(x) = (1 - 1 / exp(n)) * x / n` with
    `n = safe_norm(x, axis, epsilon)`.

    Args:
        x: capsule poses, e.g. `(batch, capsules, dim)`.
        axis: the capsule dimension.
        epsilon: added under the square root of the norm.

    Returns:
        squashed poses, the shape and dtype of `x`, of length
        `1 - exp(-n)` (computed in float32 for half inputs).

    Example:

    >>> y = keras_capsules.ops.efficient_squash(keras.ops.ones((1, 4)))
    >>> ops.convert_to_numpy(keras_capsules.ops.safe_norm(y)).round(3)  # 1 - exp(-2)
    array([0.865], dtype=float32)

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

    Args:
        x: logits.
        axis: the axis to project along.

    Returns:
        probabilities, the shape and dtype of `x`, summing to 1 along
        `axis`.

    Example:

    >>> y = keras_capsules.ops.sparsemax(keras.ops.array([1.0, 0.5, -1.0]))
    >>> ops.convert_to_numpy(y).round(3)
    array([0.75, 0.25, 0.  ], dtype=float32)

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
    exactly 0 (and get no gradient).

    Args:
        x: logits.
        keep: boolean, broadcastable to `x`; each slice along `axis` needs
            one true entry.
        axis: the softmax axis.

    Returns:
        probabilities, the shape and dtype of `x` (computed in float32 for
        half inputs).

    Example:

    >>> x = keras.ops.array([1.0, 2.0, 3.0])
    >>> y = keras_capsules.ops.masked_softmax(x, keras.ops.array([True, True, False]))
    >>> ops.convert_to_numpy(y).round(3)
    array([0.269, 0.731, 0.   ], dtype=float32)
    """
    x, original = _upcast(x)
    keep = ops.broadcast_to(keep, ops.shape(x))
    lowest = ops.min(ops.stop_gradient(x)) - 1.0
    peak = ops.stop_gradient(ops.max(ops.where(keep, x, lowest), axis=axis, keepdims=True))
    e = ops.exp(ops.where(keep, x - peak, 0.0)) * ops.cast(keep, x.dtype)
    return ops.cast(e / ops.sum(e, axis=axis, keepdims=True), original)


def top_k_softmax(x, k, mask=None):
    """Softmax over the `k` largest entries of the last axis; others are 0.

    Entries tied with the k-th largest value are all kept.

    Args:
        x: logits.
        k: how many entries of each slice to keep, `1 <= k <= x.shape[-1]`.
        mask: optional boolean, broadcastable to `x`: entries where it is
            false are excluded before the top-k selection (never kept).

    Returns:
        probabilities, the shape and dtype of `x` (computed in float32 for
        half inputs).

    Example:

    >>> y = keras_capsules.ops.top_k_softmax(keras.ops.array([1.0, 3.0, 2.0]), 2)
    >>> ops.convert_to_numpy(y).round(3)
    array([0.   , 0.731, 0.269], dtype=float32)
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

    Args:
        v: reflection normals `(..., n, n)`, `n = max(rows, cols)`.
        rows, cols: the shape of each matrix.

    Returns:
        matrices `(..., rows, cols)` with orthonormal rows or columns, in
        `v`'s dtype (computed in float32 for half-precision `v`).

    Example:

    >>> v = keras.random.normal((10, 16, 16))
    >>> w = keras_capsules.ops.householder_orthogonal(v, 8, 16)
    >>> tuple(w.shape)
    (10, 8, 16)
    >>> w = ops.convert_to_numpy(w)
    >>> np.allclose(w @ w.transpose(0, 2, 1), np.eye(8), atol=1e-5)  # W W^T = I
    True

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
