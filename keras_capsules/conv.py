"""2-D convolution as strided slices + one matmul.

XLA on CPU computes the input gradient of a strided convolution at about
1.3 GFLOP/s: a CapsNet whose primary-capsule conv (9x9, stride 2) is a plain
`ops.conv` trains ~20x slower on JAX (and on TF with `jit_compile=True`)
than the same net with the conv done as `kh * kw` strided slices,
concatenated, and one matmul, whose backward pass is a matmul and pads.
Elsewhere (torch, TF without XLA, GPUs) the native convolution is fast.
"""

import keras
from keras import ops

IMPLEMENTATIONS = ("auto", "conv", "matmul")


def resolve_implementation(implementation, strides):
    """`"auto"` -> `"matmul"` for strided convs on XLA backends on CPU, else
    `"conv"` (measured: see benchmarks/conv.py)."""
    if implementation != "auto":
        return implementation
    if all(s == 1 for s in strides):
        return "conv"
    if keras.backend.backend() not in ("jax", "tensorflow"):
        return "conv"
    on_cpu = all(d.lower().startswith("cpu") for d in keras.distribution.list_devices())
    return "matmul" if on_cpu else "conv"


def conv2d(x, kernel, strides, padding, implementation="conv"):
    """`ops.conv(x, kernel, strides, padding)` (channels last), computed by
    `implementation`: `"conv"` (native) or `"matmul"` (slices + matmul)."""
    if implementation == "conv":
        return ops.conv(x, kernel, strides=strides, padding=padding)
    kh, kw, cin, cout = kernel.shape
    patches = extract_patches(x, (kh, kw), strides, padding)
    return ops.matmul(patches, ops.reshape(kernel, (kh * kw * cin, cout)))


def extract_patches(x, kernel_size, strides, padding):
    """`(batch, H, W, C)` -> `(batch, H', W', kh * kw * C)`, ordered
    `(dy, dx, c)` like a flattened conv kernel; one strided slice per kernel
    offset (a static loop over `kh * kw`, none over positions)."""
    (kh, kw), (sh, sw) = kernel_size, strides
    height, width = x.shape[1], x.shape[2]
    if padding == "same":
        pads = [_same_padding(n, k, s) for n, k, s in ((height, kh, sh), (width, kw, sw))]
        x = ops.pad(x, [(0, 0), pads[0], pads[1], (0, 0)])
        height, width = x.shape[1], x.shape[2]
    out_h, out_w = (height - kh) // sh + 1, (width - kw) // sw + 1
    slices = [
        x[:, dy : dy + (out_h - 1) * sh + 1 : sh, dx : dx + (out_w - 1) * sw + 1 : sw, :]
        for dy in range(kh)
        for dx in range(kw)
    ]
    return ops.concatenate(slices, axis=-1)


def _same_padding(n, k, s):
    """TF/Keras "same": output ceil(n / s), extra padding at the end."""
    total = max((-(-n // s) - 1) * s + k - n, 0)
    return total // 2, total - total // 2
