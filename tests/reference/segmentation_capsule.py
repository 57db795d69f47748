"""Reference locally-constrained capsules (SegCaps), float64."""

import numpy as np

from tests.reference.conv import conv2d
from tests.reference.dynamic import dynamic_routing


def conv_transpose2d(x, kernel, strides, padding):
    """Transposed convolution by its definition: every input pixel adds
    `x[p] * K[o]` at output `p * s + o - pad_before` (kernel
    `(kh, kw, C_out, C_in)`, as `keras.ops.conv_transpose`)."""
    kh, kw, cout, _ = kernel.shape
    batch, h, w, _ = x.shape
    sh, sw = strides
    full_h, full_w = (h - 1) * sh + kh, (w - 1) * sw + kw
    y = np.zeros((batch, full_h, full_w, cout))
    for r in range(h):
        for c in range(w):
            y[:, r * sh : r * sh + kh, c * sw : c * sw + kw] += np.einsum(
                "bi,hwoi->bhwo", x[:, r, c], kernel
            )
    if padding == "same":
        out_h, out_w = h * sh, w * sw
        top, left = max(kh - sh, 0) // 2, max(kw - sw, 0) // 2
    else:
        out_h, out_w = (h - 1) * sh + max(kh, sh), (w - 1) * sw + max(kw, sw)
        top = left = 0
    y = np.pad(
        y, [(0, 0), (0, max(out_h + top - full_h, 0)), (0, max(out_w + left - full_w, 0)), (0, 0)]
    )
    return y[:, top : top + out_h, left : left + out_w]


def local_votes(poses, kernel, bias, num_capsules, strides, padding, transposed=False):
    """`(batch * H' * W', types, num_capsules, dim)` votes: each child type's
    grid convolved with the one kernel, plus the bias."""
    batch, _, _, types, _ = poses.shape
    convolve = conv_transpose2d if transposed else conv2d
    grids = [convolve(poses[:, :, :, t], kernel, strides, padding) for t in range(types)]
    y = np.stack(grids, axis=3)  # (batch, H', W', types, P * E)
    out_h, out_w = y.shape[1:3]
    votes = y.reshape(batch, out_h, out_w, types, num_capsules, -1)
    if bias is not None:
        votes = votes + bias
    return votes.reshape(batch * out_h * out_w, types, num_capsules, -1), (out_h, out_w)


def local_capsule(
    poses, kernel, bias, num_capsules, strides, padding, iterations=3, transposed=False
):
    """Parent poses `(batch, H', W', num_capsules, dim)` and activations."""
    votes, grid = local_votes(poses, kernel, bias, num_capsules, strides, padding, transposed)
    v, a, _ = dynamic_routing(votes, iterations)
    batch = poses.shape[0]
    return v.reshape(batch, *grid, num_capsules, -1), a.reshape(batch, *grid, num_capsules)
