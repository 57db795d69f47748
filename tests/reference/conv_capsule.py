"""Reference windowed (convolutional) capsule routing in float64, with loops."""

import numpy as np


def output_size(n, k, s, padding):
    return -(-n // s) if padding == "same" else (n - k) // s + 1


def windows(x, kernel_size, strides, padding):
    """`(batch, *grid, *rest)` -> `(batch, *out_grid, prod(kernel), *rest)`.

    Window `w` of output position `p` holds `x[p * strides + offset_w]`,
    offsets in row-major order; "same" zero-pads `total // 2` before.
    """
    rank = len(kernel_size)
    grid = x.shape[1 : 1 + rank]
    out = [output_size(n, k, s, padding) for n, k, s in zip(grid, kernel_size, strides)]
    pads = [(0, 0)] * x.ndim
    if padding == "same":
        for axis, (n, k, s, o) in enumerate(zip(grid, kernel_size, strides, out)):
            total = max((o - 1) * s + k - n, 0)
            pads[1 + axis] = (total // 2, total - total // 2)
    x = np.pad(x, pads)
    offsets = list(np.ndindex(*kernel_size))
    result = np.zeros((x.shape[0], *out, len(offsets), *x.shape[1 + rank :]))
    for p in np.ndindex(*out):
        for w, o in enumerate(offsets):
            source = tuple(pi * s + oi for pi, s, oi in zip(p, strides, o))
            result[(slice(None), *p, w)] = x[(slice(None), *source)]
    return result


def conv_capsule(poses, kernel, kernel_size, strides, padding, route, activations=None):
    """Votes `u[p*s+o, t] @ W[o, t, j]` per window, routed by `route`.

    `kernel: (*kernel_size, types, J, in_dim, out_dim)`; `route(votes
    (n, I, J, dim), activations (n, I) or None) -> (poses, activations)`.
    Returns parent poses `(batch, *out_grid, J, out_dim)` and activations.
    """
    rank = len(kernel_size)
    w = windows(poses, kernel_size, strides, padding)
    batch, out = w.shape[0], w.shape[1 : 1 + rank]
    k, types, in_dim = w.shape[1 + rank :]
    kernel = kernel.reshape(k, *kernel.shape[rank:])
    n_out, out_dim = kernel.shape[2], kernel.shape[4]
    votes = np.einsum("nktd,ktjde->nktje", w.reshape(-1, k, types, in_dim), kernel)
    votes = votes.reshape(-1, k * types, n_out, out_dim)
    a = None
    if activations is not None:
        a = windows(activations, kernel_size, strides, padding).reshape(-1, k * types)
    parent_poses, parent_activations = route(votes, a)[:2]
    return (
        parent_poses.reshape(batch, *out, n_out, out_dim),
        parent_activations.reshape(batch, *out, n_out),
    )
