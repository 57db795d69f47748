"""Sliding windows of a grid as strided slices.

The windows of the convolutional capsule layers (`extract_windows`), the
patches of the matmul forms of a convolution (`extract_patches`,
`keras_capsules.conv`), and the output sizes and padding they share, as a
convolution computes them.
"""

import itertools

from keras import ops


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

    >>> from keras_capsules.windows import extract_patches
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

    >>> from keras_capsules.windows import window_output_size
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

    >>> from keras_capsules.windows import window_output_shape
    >>> window_output_shape((28, None), (9, 9), (2, 2), "valid")
    (10, None)
    """
    return tuple(window_output_size(*a, padding) for a in zip(spatial, kernel_size, strides))


def same_padding(spatial, kernel_size, strides):
    """The `(before, after)` zero padding of each spatial axis that
    `padding="same"` adds, as a convolution would: output `ceil(n / s)`,
    `total = max((output - 1) * s + k - n, 0)`, `before = total // 2`.

    Example:

    >>> from keras_capsules.windows import same_padding
    >>> same_padding((9, 8), (3, 3), (2, 2))
    [(1, 1), (0, 1)]
    """
    pads = []
    for n, k, s in zip(spatial, kernel_size, strides):
        total = max((window_output_size(n, k, s, "same") - 1) * s + k - n, 0)
        pads.append((total // 2, total - total // 2))
    return pads


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

    >>> from keras_capsules.windows import window_slices
    >>> slices = window_slices(ops.zeros((2, 5, 5, 3)), (3, 3), (2, 2), "valid")
    >>> len(slices), tuple(slices[0].shape)
    (9, (2, 2, 2, 3))
    """
    rank = len(kernel_size)
    spatial = x.shape[1 : 1 + rank]
    out = window_output_shape(spatial, kernel_size, strides, padding)
    if padding == "same":
        rest = len(x.shape) - 1 - rank
        x = ops.pad(x, [(0, 0), *same_padding(spatial, kernel_size, strides)] + [(0, 0)] * rest)
    slices = []
    for offset in itertools.product(*(range(k) for k in kernel_size)):
        index = tuple(slice(d, d + (o - 1) * s + 1, s) for d, s, o in zip(offset, strides, out))
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

    >>> from keras_capsules.windows import extract_windows
    >>> windows = extract_windows(ops.zeros((2, 6, 6, 8, 16)), (3, 3), (1, 1), "valid")
    >>> tuple(windows.shape)
    (2, 4, 4, 9, 8, 16)
    """
    slices = window_slices(x, kernel_size, strides, padding)
    return ops.stack(slices, axis=1 + len(kernel_size))
