"""The inputs of the capsule layers: splitting `[poses, activations]`, and
the shape checks several layers share."""

from keras_capsules.windows import window_output_shape

POSE_SIZE = 16  # a 4x4 pose matrix, stored row-major


def split_capsule_inputs(inputs):
    """`poses` or `[poses, activations]` (tensors or shapes) -> the pair."""
    if (
        isinstance(inputs, (list, tuple))
        and len(inputs) == 2
        and not isinstance(inputs[0], (int, type(None)))
    ):
        return inputs[0], inputs[1]
    return inputs, None


def check_matrix_inputs(layer_name, input_shape):
    """`[poses (batch, H, W, types, 16), activations (batch, H, W, types)]`."""
    if not (
        isinstance(input_shape, (list, tuple))
        and len(input_shape) == 2
        and isinstance(input_shape[0], (list, tuple))
    ):
        raise ValueError(
            f"{layer_name} expects [poses, activations]. Received: input_shape={input_shape}"
        )
    poses_shape, activations_shape = (tuple(s) for s in input_shape)
    if len(poses_shape) != 5 or poses_shape[-1] != POSE_SIZE:
        raise ValueError(
            f"{layer_name} expects poses of shape (batch, H, W, types, 16) "
            f"(4x4 pose matrices). Received: poses.shape={poses_shape}"
        )
    if activations_shape[1:] != poses_shape[1:-1]:
        raise ValueError(
            f"{layer_name} expects activations of shape {(None, *poses_shape[1:-1])}. "
            f"Received: activations.shape={activations_shape}"
        )
    return poses_shape, activations_shape


def check_kernel_fits(layer_name, grid_name, spatial, kernel_size, strides, padding):
    """The output grid of a windowed layer (`None` where `spatial` is);
    raises if the kernel does not fit the known sizes."""
    out = window_output_shape(spatial, kernel_size, strides, padding)
    if any(n is not None and n < 1 for n in out):
        raise ValueError(
            f"{layer_name}: `kernel_size={tuple(kernel_size)}` is larger than the "
            f"{grid_name} grid {tuple(spatial)} with padding='valid'."
        )
    return out


def check_grid(layer_name, spatial, kernel_size, strides, padding):
    """As `check_kernel_fits` for a capsule grid, whose sizes must be known."""
    if any(n is None for n in spatial):
        raise ValueError(f"{layer_name} needs a known grid size. Received: grid={tuple(spatial)}")
    return check_kernel_fits(layer_name, "capsule", spatial, kernel_size, strides, padding)
