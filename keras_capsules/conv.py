"""Sliding windows as strided slices, and 2-D convolution built on them.

A convolution can be computed three ways (`conv2d`): natively, as `kh * kw`
strided slices, concatenated, and one matmul (whose backward pass is a
matmul and pads), or natively with the kernel gradient as one matmul on
the patches. Which is fastest depends on the backend and device: the
`implementation=` argument of the layers, and the rule its `"auto"`
follows, are explained once, in `resolve_implementation`.

The same per-offset slices give the windows of the convolutional capsule
layers (`extract_windows`).
"""

import itertools

import keras
from keras import ops

IMPLEMENTATIONS = ("auto", "conv", "matmul", "hybrid")


def resolve_implementation(implementation, strides, inputs=None):
    """The `implementation=` rule of every layer that convolves.

    `StridedConv2D`, `PrimaryCapsule`, `PrimaryMatrixCapsule`,
    `MatrixCapsNet` (and the layers and models built on them) take
    `implementation`, one of:

    - `"conv"`: the backend's native convolution (`ops.conv`).
    - `"matmul"`: `kh * kw` strided slices, concatenated, and one matmul;
      its backward pass is a matmul and pads, never a convolution
      gradient. The same values as `"conv"` up to float rounding.
    - `"hybrid"`: the native convolution and input gradient, with the
      kernel gradient as one matmul on the patches (`conv2d_hybrid`).
    - `"auto"` (the default): the one measured fastest for this backend
      and device (`benchmarks/README.md`):

      - JAX on CPU: `"matmul"` for every stride (XLA's CPU convolutions,
        and their gradients, are slow);
      - TensorFlow on CPU: `"matmul"` for strided convolutions (XLA's
        input gradient of a strided convolution is slow), `"conv"` for
        stride 1;
      - torch on CPU: `"hybrid"` for strided convolutions (oneDNN's
        kernel gradient of a strided convolution is slow), `"conv"` for
        stride 1;
      - any GPU, and any other backend: `"conv"` (cuDNN).

    The choice changes speed only, never the model: weights and saved
    files are the same whichever runs.

    Args:
        implementation: `"auto"`, `"conv"`, `"matmul"` or `"hybrid"`.
        strides: the convolution's strides, a tuple of ints.
        inputs: the layer's input; tells torch's device (the other
            backends read `keras.distribution.list_devices()`).

    Returns:
        `"conv"`, `"matmul"` or `"hybrid"`: `implementation` itself
        unless it is `"auto"`.

    Example:

    >>> from keras_capsules.conv import resolve_implementation
    >>> resolve_implementation("matmul", (2, 2))
    'matmul'
    >>> resolve_implementation("auto", (1, 1)) in ("conv", "matmul")  # stride 1
    True
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
    `implementation`.

    Args:
        x: images `(batch, H, W, C_in)`.
        kernel: `(kh, kw, C_in, C_out)`.
        strides: a pair of ints.
        padding: `"valid"` or `"same"`.
        implementation: `"conv"`, `"matmul"` or `"hybrid"` (resolved, not
            `"auto"`: see `resolve_implementation`).

    Returns:
        `(batch, H', W', C_out)`, as `ops.conv`.

    Example:

    >>> from keras_capsules.conv import conv2d
    >>> x, k = keras.random.normal((1, 7, 7, 2)), keras.random.normal((3, 3, 2, 4))
    >>> y = conv2d(x, k, (2, 2), "valid", implementation="matmul")
    >>> tuple(y.shape)
    (1, 3, 3, 4)
    >>> expected = ops.conv(x, k, strides=(2, 2), padding="valid")
    >>> np.allclose(ops.convert_to_numpy(y), ops.convert_to_numpy(expected), atol=1e-4)
    True
    """
    if implementation == "conv":
        return ops.conv(x, kernel, strides=strides, padding=padding)
    if implementation == "hybrid":
        return conv2d_hybrid(x, kernel, strides, padding)
    kh, kw, cin, cout = kernel.shape
    patches = extract_patches(x, (kh, kw), strides, padding)
    return ops.matmul(patches, ops.reshape(kernel, (kh * kw * cin, cout)))


def conv2d_hybrid(x, kernel, strides, padding):
    """The native convolution with its kernel gradient computed as a matmul.

    For backends whose native kernel gradient is slow (torch on CPU: see
    `resolve_implementation`), `patches^T @ upstream`, with the patches
    recomputed from `x`, is faster. The input gradient stays native: the
    forward conv sees a constant kernel, and an identity with a custom
    gradient adds the kernel's:

    ```
    y  = identity(conv(x, stop_gradient(k)), k)   # the native conv's value
    dx = native input gradient of conv            # autodiff, as for "conv"
    dk = reshape(patches(x)^T @ dy, k.shape)      # (kh*kw*cin, cout) matmul
    ```

    Args and Returns: as for `conv2d`.

    Example:

    >>> from keras_capsules.conv import conv2d_hybrid
    >>> x, k = keras.random.normal((1, 7, 7, 2)), keras.random.normal((3, 3, 2, 4))
    >>> tuple(conv2d_hybrid(x, k, (2, 2), "same").shape)
    (1, 4, 4, 4)
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
    `(dy, dx, c)` like a flattened conv kernel.

    Args:
        x: images `(batch, H, W, C)`.
        kernel_size, strides: pairs of ints.
        padding: `"valid"` or `"same"`.

    Returns:
        the patches `(batch, H', W', kh * kw * C)`.

    Example:

    >>> from keras_capsules.conv import extract_patches
    >>> x = ops.reshape(ops.arange(16, dtype="float32"), (1, 4, 4, 1))
    >>> ops.convert_to_numpy(extract_patches(x, (2, 2), (2, 2), "valid"))[0, 0, 0]
    array([0., 1., 4., 5.], dtype=float32)
    """
    return ops.concatenate(window_slices(x, kernel_size, strides, padding), axis=-1)


def window_output_size(size, kernel, stride, padding):
    """Output length of one spatial axis, as for a convolution.

    Args:
        size: the input length, or `None` (unknown).
        kernel, stride: ints.
        padding: `"valid"` or `"same"`.

    Returns:
        `ceil(size / stride)` for `"same"`, `(size - kernel) // stride + 1`
        for `"valid"`; `None` for an unknown `size`.

    Example:

    >>> from keras_capsules.conv import window_output_size
    >>> window_output_size(28, 9, 2, "valid"), window_output_size(28, 9, 2, "same")
    (10, 14)
    """
    if size is None:
        return None
    if padding == "same":
        return -(-size // stride)
    return (size - kernel) // stride + 1


def window_output_shape(spatial, kernel_size, strides, padding):
    """`window_output_size` of every spatial axis, as a tuple.

    Example:

    >>> from keras_capsules.conv import window_output_shape
    >>> window_output_shape((28, None), (9, 9), (2, 2), "valid")
    (10, None)
    """
    return tuple(window_output_size(*a, padding) for a in zip(spatial, kernel_size, strides))


def window_slices(x, kernel_size, strides, padding):
    """`(batch, *grid, *rest)` -> `prod(kernel_size)` tensors `(batch,
    *out_grid, *rest)`, one per kernel offset in row-major order.

    Slice `o` holds, at output position `p`, the input at `p * strides + o`
    (after padding): one strided slice per offset (a static loop over the
    offsets, never over positions); the backward pass is the matching
    scatter-add. `"same"` pads with zeros as a convolution would (output
    `ceil(n / s)`, `pad_before = total // 2`).

    Args:
        x: `(batch, *grid, *rest)`, `len(kernel_size)` grid axes.
        kernel_size, strides: tuples, one int per grid axis.
        padding: `"valid"` or `"same"`.

    Returns:
        a list of `prod(kernel_size)` tensors `(batch, *out_grid, *rest)`.

    Example:

    >>> from keras_capsules.conv import window_slices
    >>> slices = window_slices(ops.zeros((2, 5, 5, 3)), (3, 3), (2, 2), "valid")
    >>> len(slices), tuple(slices[0].shape)
    (9, (2, 2, 2, 3))
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

    Args and Returns: as for `window_slices`, the windows stacked on a new
    axis after the output grid.

    Example (the 3x3 windows of a grid of 4x4 capsule poses):

    >>> from keras_capsules.conv import extract_windows
    >>> windows = extract_windows(ops.zeros((2, 6, 6, 8, 16)), (3, 3), (1, 1), "valid")
    >>> tuple(windows.shape)
    (2, 4, 4, 9, 8, 16)
    """
    slices = window_slices(x, kernel_size, strides, padding)
    return ops.stack(slices, axis=1 + len(kernel_size))
