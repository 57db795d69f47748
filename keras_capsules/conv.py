"""Sliding windows as strided slices, and 2-D convolution built on them.

XLA on CPU computes the input gradient of a strided convolution at about
1.3 GFLOP/s: a CapsNet whose primary-capsule conv (9x9, stride 2) is a plain
`ops.conv` trains ~20x slower on JAX (and on TF with `jit_compile=True`)
than the same net with the conv done as `kh * kw` strided slices,
concatenated, and one matmul, whose backward pass is a matmul and pads.
Elsewhere (torch, TF without XLA, GPUs) the native convolution is fast,
except torch's CPU kernel gradient of a strided conv, which `"hybrid"`
computes as one matmul on the patches instead.

The same per-offset slices give the windows of the convolutional capsule
layers (`extract_windows`).
"""

import itertools

import keras
from keras import ops

IMPLEMENTATIONS = ("auto", "conv", "matmul", "hybrid")


def resolve_implementation(implementation, strides, inputs=None):
    """`"auto"` -> the implementation measured fastest for this backend and
    device (`python benchmarks/conv.py`, train steps in the README):

    - JAX on CPU: `"matmul"` for every stride. XLA computes even stride-1
      convolutions slowly there: Efficient-CapsNet's 3x3 convs (stride 1)
      ran forward + backward at ~8 GFLOP/s, and its train step at batch 128
      went from 55 to 175 images/s with slices + matmul.
    - TensorFlow on CPU: `"matmul"` for strided convolutions, whose input
      gradient XLA computes at ~1.3 GFLOP/s; stride 1 stays native (faster
      there: Efficient-CapsNet 252 against 198 images/s with XLA).
    - torch on CPU: `"hybrid"` for strided convolutions (oneDNN's kernel
      gradient is slow: the CapsNet primary conv forward + backward 456
      against 544 ms at batch 32, the train step 0.65 against 0.78 s);
      stride 1 stays native (the same speed either way).
    - Any GPU: `"conv"` (cuDNN).

    `inputs` (the layer's input) tells torch's device; the other backends
    read `keras.distribution.list_devices()`.
    """
    if implementation != "auto":
        return implementation
    backend = keras.backend.backend()
    strided = any(s > 1 for s in strides)
    if backend == "torch":
        # "meta": Keras traces symbolic shapes on torch's meta device.
        device = getattr(getattr(inputs, "device", None), "type", "cpu")
        return "hybrid" if strided and device in ("cpu", "meta") else "conv"
    if backend not in ("jax", "tensorflow"):
        return "conv"
    on_cpu = all(d.lower().startswith("cpu") for d in keras.distribution.list_devices())
    if not on_cpu or (backend == "tensorflow" and not strided):
        return "conv"
    return "matmul"


def conv2d(x, kernel, strides, padding, implementation="conv"):
    """`ops.conv(x, kernel, strides, padding)` (channels last), computed by
    `implementation`: `"conv"` (native), `"matmul"` (slices + matmul) or
    `"hybrid"` (native forward and input gradient, weight gradient as one
    matmul on the patches: `conv2d_hybrid`)."""
    if implementation == "conv":
        return ops.conv(x, kernel, strides=strides, padding=padding)
    if implementation == "hybrid":
        return conv2d_hybrid(x, kernel, strides, padding)
    kh, kw, cin, cout = kernel.shape
    patches = extract_patches(x, (kh, kw), strides, padding)
    return ops.matmul(patches, ops.reshape(kernel, (kh * kw * cin, cout)))


def conv2d_hybrid(x, kernel, strides, padding):
    """The native convolution with its kernel gradient computed as a matmul.

    torch's CPU convolution (oneDNN) computes the kernel gradient of the
    CapsNet's primary-capsule conv (9x9, stride 2, 256 -> 256 channels) at
    about a third of its forward speed: 0.23 s at batch 32, against 0.14 s
    for `patches^T @ upstream` with the patches recomputed from `x`
    (`benchmarks/conv.py`). The input gradient stays native: the forward
    conv sees a constant kernel, and an identity with a custom gradient adds
    the kernel's:

    ```
    y  = identity(conv(x, stop_gradient(k)), k)   # the native conv's value
    dx = native input gradient of conv            # autodiff, as for "conv"
    dk = reshape(patches(x)^T @ dy, k.shape)      # (kh*kw*cin, cout) matmul
    ```
    """
    kh, kw, cin, cout = kernel.shape
    kernel = ops.convert_to_tensor(kernel)
    y = ops.conv(x, ops.stop_gradient(kernel), strides=strides, padding=padding)

    @ops.custom_gradient
    def with_kernel_gradient(y, kernel, x):
        def grad(*args, upstream=None):
            if upstream is None:  # TensorFlow and JAX pass it positionally
                (upstream,) = args
            patches = extract_patches(x, (kh, kw), strides, padding)
            patches = ops.reshape(patches, (-1, kh * kw * cin))
            dk = ops.matmul(ops.transpose(patches), ops.reshape(upstream, (-1, cout)))
            return upstream, ops.reshape(dk, kernel.shape), None

        return y, grad

    return with_kernel_gradient(y, kernel, ops.stop_gradient(x))


def extract_patches(x, kernel_size, strides, padding):
    """`(batch, H, W, C)` -> `(batch, H', W', kh * kw * C)`, ordered
    `(dy, dx, c)` like a flattened conv kernel."""
    return ops.concatenate(window_slices(x, kernel_size, strides, padding), axis=-1)


def window_output_size(size, kernel, stride, padding):
    """Output length of one spatial axis, as for a convolution."""
    if size is None:
        return None
    if padding == "same":
        return -(-size // stride)
    return (size - kernel) // stride + 1


def window_output_shape(spatial, kernel_size, strides, padding):
    """`window_output_size` of every spatial axis, as a tuple."""
    return tuple(window_output_size(*a, padding) for a in zip(spatial, kernel_size, strides))


def window_slices(x, kernel_size, strides, padding):
    """`(batch, *grid, *rest)` -> `prod(kernel_size)` tensors `(batch,
    *out_grid, *rest)`, one per kernel offset in row-major order.

    Slice `o` holds, at output position `p`, the input at `p * strides + o`
    (after padding): one strided slice per offset (a static loop over the
    offsets, never over positions); the backward pass is the matching
    scatter-add. `"same"` pads with zeros as a convolution would (output
    `ceil(n / s)`, `pad_before = total // 2`).
    """
    rank = len(kernel_size)
    spatial = x.shape[1 : 1 + rank]
    out = window_output_shape(spatial, kernel_size, strides, padding)
    if padding == "same":
        pads = []
        for n, k, s, o in zip(spatial, kernel_size, strides, out):
            total = max((o - 1) * s + k - n, 0)
            pads.append((total // 2, total - total // 2))
        rest = len(x.shape) - 1 - rank
        x = ops.pad(x, [(0, 0), *pads] + [(0, 0)] * rest)
    slices = []
    for offset in itertools.product(*(range(k) for k in kernel_size)):
        index = tuple(
            slice(d, d + (o - 1) * s + 1, s) for d, s, o in zip(offset, strides, out)
        )
        slices.append(x[(slice(None), *index)])
    return slices


def extract_windows(x, kernel_size, strides, padding):
    """`(batch, *grid, *rest)` -> `(batch, *out_grid, prod(kernel_size), *rest)`.

    Window `w` of output position `p` holds the inputs at `p * strides +
    offset` (after padding), with the kernel offsets in row-major order:
    the strided slices of `window_slices`, stacked.
    """
    slices = window_slices(x, kernel_size, strides, padding)
    return ops.stack(slices, axis=1 + len(kernel_size))
