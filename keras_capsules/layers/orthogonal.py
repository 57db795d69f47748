"""Orthogonal transforms as products of Householder reflections (OrthCaps)."""

from keras import ops

from keras_capsules.ops import compute_dtype_for


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
    >>> householder_orthogonal(v, 8, 16).shape   # 10 transforms, W W^T = I
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
