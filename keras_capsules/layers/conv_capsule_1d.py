"""Convolutional capsules over a capsule sequence: routing restricted to local windows."""

import keras
from keras import ops

from keras_capsules.layers.base_routed_capsule import split_capsule_inputs
from keras_capsules.layers.conv_capsule import ConvCapsule


@keras.saving.register_keras_serializable(package="keras_capsules")
class ConvCapsule1D(ConvCapsule):
    """Windowed routing over a capsule sequence (1-D convolutional capsules).

    As `ConvCapsule2D` with one grid axis. The children of each window of
    `kernel_size` positions, moved by `strides`, vote with `W: (kernel_size,
    types, num_capsules, in_dim, capsule_dim)` and route among the window's
    parents:

    ```
    votes[b, p, (o, t), j, :] = u[b, p * s + o, t, :] @ W[o, t, j]
    poses[b, p], activations[b, p] = router(votes[b, p], a[b, p * s + o, t])
    ```

    Args:
        num_capsules, capsule_dim, router, orthogonal, return_activations,
        kernel_initializer, kernel_regularizer, kernel_constraint: as for
        `ConvCapsule2D`.
        kernel_size: int, the window length (positions per window).
        strides: int, the window step `s`.
        padding: `"valid"` or `"same"`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: child poses of shape `(batch, L, types, in_dim)`, or a plain
            capsule sequence `(batch, L, in_dim)` (one type); or `[poses,
            activations]` with activations of shape `(batch, L, types)` (or
            `(batch, L)`), passed to the router.

    Returns:
        Parent poses of shape `(batch, L', num_capsules, capsule_dim)` (`L'`
        as for a convolution); with `return_activations=True`, `(poses,
        activations)` with activations of shape `(batch, L', num_capsules)`.

    Example:

    >>> u = keras.Input((10, 8))        # 10 capsules of 8D in sequence
    >>> keras_capsules.layers.ConvCapsule1D(4, 6, 3, strides=2)(u).shape
    (None, 4, 4, 6)

    Reference: LaLonde & Bagci, "Capsules for Object Segmentation", 2018
    (locally-constrained routing), here on one axis.
    """

    rank = 1

    def _grid_shapes(self, input_shape):
        poses_shape, activations_shape = split_capsule_inputs(input_shape)
        if len(poses_shape) == 3:  # (batch, N, dim): one capsule type
            poses_shape = (*poses_shape[:2], 1, poses_shape[2])
            if activations_shape is not None:
                activations_shape = (*tuple(activations_shape), 1)
            input_shape = (
                poses_shape if activations_shape is None else [poses_shape, activations_shape]
            )
        return super()._grid_shapes(input_shape)

    def _to_grid(self, poses, activations):
        if len(poses.shape) == 3:
            poses = ops.expand_dims(poses, 2)
            if activations is not None:
                activations = ops.expand_dims(activations, 2)
        return poses, activations
