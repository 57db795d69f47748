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
    """`(batch, in, out, dim)` -> contiguous `(batch, out, in, dim)`."""
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
    without materialising the products."""
    return ops.einsum("bji,bjid->bjd", coefficients, u)


def agreement(u, v):
    """`u[b, j, i, :] . v[b, j, :]`, `(batch, out, in)`."""
    return ops.einsum("bjid,bjd->bji", u, v)


def swap_caps(x):
    """`(batch, out, in)` <-> `(batch, in, out)`: parent-major coefficients
    to the layout routers return, and back."""
    return ops.transpose(x, (0, 2, 1))
