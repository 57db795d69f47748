"""The parent-major vote layout routers compute in.

Routers receive votes as `(batch, in_caps, out_caps, dim)` (the Router
contract) but nearly every routing step is a sum over children for each
parent. Copied once to `(batch, out_caps, in_caps, dim)`, those sums are
batched matrix-vector products over contiguous memory: XLA emits them
without per-einsum transposes, and torch runs one `bmm` instead of copying
the votes into that layout inside every einsum (forward and backward).
Routing on votes (128, 1152, 10, 16) is memory-bound, so each avoided pass
over the votes counts.
"""

from keras import ops


def parent_major(votes):
    """`(batch, in, out, dim)` -> contiguous `(batch, out, in, dim)`.

    Args:
        votes: `(batch, in_caps, out_caps, dim)`.

    Returns:
        the votes, parent-major: `(batch, out_caps, in_caps, dim)`.

    Example:

    >>> from keras_capsules.routing.parent_major import parent_major
    >>> tuple(parent_major(ops.zeros((2, 6, 3, 4))).shape)
    (2, 3, 6, 4)
    """
    batch, in_caps, out_caps, dim = ops.shape(votes)
    u = ops.transpose(votes, (0, 2, 1, 3))
    # Merging in_caps and dim is never a view of the transposed strides
    # (unless out_caps == 1, when the transpose is already parent-major), so
    # torch copies the votes into parent-major memory here: a strided view
    # makes each later bmm take MKL's slow path (6-9x slower, measured on the
    # CapsNet's votes). Merging batch and out_caps instead is a view when the
    # votes come from torch.einsum's (in, batch, out * dim) bmm output. For
    # XLA these are plain reshapes.
    u = ops.reshape(u, (batch, out_caps, in_caps * dim))
    return ops.reshape(u, (batch, out_caps, in_caps, dim))


def weighted_sum(coefficients, u):
    """`sum_i coefficients[b, j, i] * u[b, j, i, :]`, `(batch, out, dim)`,
    without materialising the products.

    Args:
        coefficients: `(batch, out_caps, in_caps)`.
        u: parent-major votes `(batch, out_caps, in_caps, dim)`.

    Returns:
        `(batch, out_caps, dim)`.

    Example:

    >>> from keras_capsules.routing.parent_major import weighted_sum
    >>> s = weighted_sum(ops.full((1, 3, 6), 0.5), ops.ones((1, 3, 6, 4)))
    >>> ops.convert_to_numpy(s)[0, 0].tolist()
    [3.0, 3.0, 3.0, 3.0]
    """
    return ops.einsum("bji,bjid->bjd", coefficients, u)


def agreement(u, v):
    """`u[b, j, i, :] . v[b, j, :]`, `(batch, out, in)`.

    Args:
        u: parent-major votes `(batch, out_caps, in_caps, dim)`.
        v: parent poses `(batch, out_caps, dim)`.

    Returns:
        the dot products `(batch, out_caps, in_caps)`.

    Example:

    >>> from keras_capsules.routing.parent_major import agreement
    >>> a = agreement(ops.ones((1, 3, 6, 4)), ops.full((1, 3, 4), 2.0))
    >>> tuple(a.shape), float(ops.convert_to_numpy(a)[0, 0, 0])
    ((1, 3, 6), 8.0)
    """
    return ops.einsum("bjid,bjd->bji", u, v)


def swap_caps(x):
    """`(batch, out, in)` <-> `(batch, in, out)`: parent-major coefficients
    to the layout routers return, and back.

    Example:

    >>> from keras_capsules.routing.parent_major import swap_caps
    >>> tuple(swap_caps(ops.zeros((2, 3, 6))).shape)
    (2, 6, 3)
    """
    return ops.transpose(x, (0, 2, 1))
