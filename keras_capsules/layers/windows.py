"""Sliding windows over a capsule grid, for windowed (convolutional) routing."""

from keras import ops

from keras_capsules.conv import window_output_size, window_slices


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
    offset` (after padding), with the kernel offsets in row-major order:
    the strided slices of `keras_capsules.conv.window_slices`, stacked.
    """
    slices = window_slices(x, kernel_size, strides, padding)
    return ops.stack(slices, axis=1 + len(kernel_size))
