"""Sliding windows over a capsule grid, for windowed (convolutional) routing."""

import itertools

from keras import ops


def window_output_size(size, kernel, stride, padding):
    """Output length of one spatial axis, as for a convolution."""
    if size is None:
        return None
    if padding == "same":
        return -(-size // stride)
    return (size - kernel) // stride + 1


def check_grid(layer_name, spatial, kernel_size, strides, padding):
    """Raises unless every spatial size is known and fits the kernel."""
    if any(n is None for n in spatial):
        raise ValueError(
            f"{layer_name} needs a known grid size. Received: grid={tuple(spatial)}"
        )
    out = [window_output_size(*args, padding) for args in zip(spatial, kernel_size, strides)]
    if any(n < 1 for n in out):
        raise ValueError(
            f"{layer_name}: `kernel_size={tuple(kernel_size)}` is larger than the "
            f"capsule grid {tuple(spatial)} with padding='valid'."
        )
    return tuple(out)


def extract_windows(x, kernel_size, strides, padding):
    """`(batch, *grid, *rest)` -> `(batch, *out_grid, prod(kernel_size), *rest)`.

    Window `w` of output position `p` holds the inputs at `p * strides +
    offset` (after padding), with the kernel offsets in row-major order. It
    is one strided slice per kernel offset (a static loop over the
    `prod(kernel_size)` offsets, never over positions), stacked; the
    backward pass is the matching scatter-add. `"same"` pads with zeros as
    a convolution would (`pad_before = total // 2`).
    """
    rank = len(kernel_size)
    spatial = x.shape[1 : 1 + rank]
    out = [window_output_size(*a, padding) for a in zip(spatial, kernel_size, strides)]
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
    return ops.stack(slices, axis=1 + rank)
