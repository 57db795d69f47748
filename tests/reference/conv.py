"""Reference 2-D and 3-D convolutions (channels last) and primary capsules, float64."""

import numpy as np

from tests.reference.ops import squash


def conv2d(x, kernel, strides, padding):
    kh, kw, _, cout = kernel.shape
    sh, sw = strides
    if padding == "same":
        pads = []
        for n, k, s in ((x.shape[1], kh, sh), (x.shape[2], kw, sw)):
            total = max((-(-n // s) - 1) * s + k - n, 0)
            pads.append((total // 2, total - total // 2))
        x = np.pad(x, [(0, 0), pads[0], pads[1], (0, 0)])
    out_h, out_w = (x.shape[1] - kh) // sh + 1, (x.shape[2] - kw) // sw + 1
    y = np.zeros((x.shape[0], out_h, out_w, cout))
    for r in range(out_h):
        for c in range(out_w):
            window = x[:, r * sh : r * sh + kh, c * sw : c * sw + kw, :]
            y[:, r, c] = np.einsum("bhwc,hwco->bo", window, kernel)
    return y


def conv3d(x, kernel, strides, padding):
    """A 3-D convolution of volumes `(batch, D, H, W, C)`, loops over the
    output positions."""
    k, s = kernel.shape[:3], strides
    if padding == "same":
        pads = []
        for n, kn, sn in zip(x.shape[1:4], k, s):
            total = max((-(-n // sn) - 1) * sn + kn - n, 0)
            pads.append((total // 2, total - total // 2))
        x = np.pad(x, [(0, 0), *pads, (0, 0)])
    out = [(n - kn) // sn + 1 for n, kn, sn in zip(x.shape[1:4], k, s)]
    y = np.zeros((x.shape[0], *out, kernel.shape[-1]))
    for p in np.ndindex(*out):
        window = x[:, p[0] * s[0] : p[0] * s[0] + k[0], p[1] * s[1] : p[1] * s[1] + k[1],
                   p[2] * s[2] : p[2] * s[2] + k[2]]  # fmt: skip
        y[(slice(None), *p)] = np.einsum("bdhwc,dhwco->bo", window, kernel)
    return y


def primary_capsule(x, kernel, bias, capsule_dim, strides, padding):
    y = conv2d(x, kernel, strides, padding) + bias
    return squash(y.reshape(y.shape[0], -1, capsule_dim))
