"""The 4x4 pose matrices of the matrix-capsule layers (`PrimaryMatrixCapsule`,
`ConvMatrixCapsule`, `ClassMatrixCapsule`): their size, the input check,
the default transform initializer and the votes."""

from keras import ops

from keras_capsules.initializers import MATRIX_ROW_LENGTH, transform_initializer

POSE_SIZE = 16  # a 4x4 pose matrix, stored row-major


def check_matrix_inputs(layer_name, input_shape):
    """`[poses (batch, H, W, types, 16), activations (batch, H, W, types)]`
    -> the two shapes, as tuples; raises a `ValueError` naming the layer
    for any other inputs."""
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


def matrix_transform_initializer(router, children, parents):
    """A function making the default initializer of 4x4 transforms `W`: votes
    of child poses with elements of standard deviation `MATRIX_POSE_STDDEV`
    get the router's `vote_stddev`."""
    vote_stddev = router.vote_stddev(children, parents, POSE_SIZE)
    return lambda: transform_initializer(vote_stddev, MATRIX_ROW_LENGTH)


def pose_votes(matrices, kernel, dtype=None):
    """`votes[n, t, j] = matrices[n, t] @ kernel[t, j]` for `(n, t, 4, 4)`
    matrices and a `(t, j, 4, 4)` kernel: `(n, t, j, 16)`, row-major, in
    `dtype` (the layers pass the routing dtype: float32 under half
    policies, where half-precision votes of large poses overflow).

    One matmul batched over `t`, `(t, n*4, 4) @ (t, 4, j*4)`, with
    transposes of at most 5 dimensions, not an einsum: tf2onnx's einsum
    optimizer searches the orderings of 7-8 letters for minutes, and on
    TensorFlow the einsum needs a 7-D transpose that TFLite runs only with
    Select TF ops. A broadcasting `(n, t, 1, 4, 4) @ (t, j, 4, 4)` matmul
    exports too but is slower than the einsum on torch (it expands both
    operands).
    """
    if dtype is not None:
        matrices, kernel = ops.cast(matrices, dtype), ops.cast(kernel, dtype)
    types, out = kernel.shape[:2]
    a = ops.reshape(ops.transpose(matrices, (1, 0, 2, 3)), (types, -1, 4))
    b = ops.reshape(ops.transpose(kernel, (0, 2, 1, 3)), (types, 4, out * 4))
    votes = ops.reshape(ops.matmul(a, b), (types, -1, 4, out, 4))
    # Copied once into parent-major memory, (n, j, t, 16), and returned as
    # its (n, t, j, 16) transpose: the router's parent-major copy
    # (routing/parent_major.py) is then a view on torch, not a second pass
    # over the votes (forward and backward). For XLA, transposes only.
    votes = ops.reshape(ops.transpose(votes, (1, 3, 0, 2, 4)), (-1, out, types, POSE_SIZE))
    return ops.transpose(votes, (0, 2, 1, 3))
