"""Convolutional matrix capsules (Hinton, Sabour & Frosst, 2018): routing
inside each window."""

import math

import keras
from keras import ops

from keras_capsules.layers._matrix_pose import (
    POSE_SIZE,
    check_matrix_inputs,
    matrix_transform_initializer,
    pose_votes,
)
from keras_capsules.layers.windowed_capsule import WindowedCapsule
from keras_capsules.ops import compute_dtype_for


@keras.saving.register_keras_serializable(package="keras_capsules")
class ConvMatrixCapsule(WindowedCapsule):
    """Convolutional matrix capsules with routing inside each window.

    For output position `p`, each child of its `k x k` window (kernel
    offset `o`, child type `t`, 4x4 pose `M`) votes for each parent type `j`
    with its pose times a learned 4x4 transform:

    ```
    votes[b, p, (o, t), j] = M[b, p * s + o, t] @ W[o, t, j]     # 4x4, row-major
    poses[b, p], activations[b, p] = router(votes[b, p], a[b, p * s + o, t])
    ```

    The router (default `EMRouting()`) runs inside each window: its
    `k * k * types` children compete only among that window's parents
    (window positions are folded into the batch axis).

    Args:
        num_capsules: int, parent capsule types per position.
        kernel_size, strides: int or pair, the window and its step `s`.
        padding: `"valid"` (the paper) or `"same"`.
        router: a router, or its name or config (`keras_capsules.routing.get`);
            default `EMRouting()`.
        kernel_initializer: initializer of `W`, shape `(kh, kw, types,
            num_capsules, 4, 4)`; `None`, the default: a truncated normal
            that gives child poses with elements of standard deviation 0.2
            (what `PrimaryMatrixCapsule` and EM routing start with) votes of
            the router's `vote_stddev` (unit variance for EM), with `kh * kw
            * types` children (`keras_capsules.initializers`).
        kernel_regularizer: regularizer of `W`, or `None`.
        kernel_constraint: constraint on `W`, or `None`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: `[poses, activations]`, child poses `M` of shape `(batch, H,
            W, types, 16)` (row-major 4x4 matrices) and activations `a` of
            shape `(batch, H, W, types)`.

    Returns:
        `[poses, activations]` of shapes `(batch, H', W', num_capsules, 16)`
        and `(batch, H', W', num_capsules)`, `H', W'` as for a convolution.

    Example:

    >>> poses, activations = keras.Input((14, 14, 32, 16)), keras.Input((14, 14, 32))
    >>> layer = keras_capsules.layers.ConvMatrixCapsule(32, 3, strides=2)
    >>> [t.shape for t in layer([poses, activations])]
    [(None, 6, 6, 32, 16), (None, 6, 6, 32)]

    Reference: Hinton, Sabour & Frosst, "Matrix capsules with EM routing",
    ICLR 2018.
    """

    rank = 2
    default_router = "em"
    length_coded = False  # 4x4 pose matrices and their own activations
    pose_kind = "matrix"
    router_activations = "probabilities"

    def __init__(
        self,
        num_capsules,
        kernel_size=3,
        strides=1,
        padding="valid",
        router=None,
        kernel_initializer=None,
        kernel_regularizer=None,
        kernel_constraint=None,
        **kwargs,
    ):
        super().__init__(
            num_capsules,
            kernel_size,
            strides=strides,
            padding=padding,
            router=router,
            kernel_initializer=kernel_initializer,
            kernel_regularizer=kernel_regularizer,
            kernel_constraint=kernel_constraint,
            **kwargs,
        )

    def _grid_shapes(self, input_shape):
        return check_matrix_inputs(self.__class__.__name__, input_shape)

    def _kernel_shape(self, types, in_dim):
        return (*self.kernel_size, types, self.num_capsules, 4, 4)

    def _default_kernel_initializer(self, types, in_dim):
        children = math.prod(self.kernel_size) * types
        return matrix_transform_initializer(self.router, children, self.num_capsules)

    def _out_dim(self, in_dim):
        return POSE_SIZE

    def _votes(self, windows):
        k, types = windows.shape[1:3]
        matrices = ops.reshape(windows, (-1, k * types, 4, 4))
        kernel = ops.reshape(self.kernel, (k * types, self.num_capsules, 4, 4))
        votes = pose_votes(matrices, kernel, compute_dtype_for(self.compute_dtype))
        return ops.reshape(votes, (-1, k * types, self.num_capsules, POSE_SIZE))

    def call(self, inputs, return_coefficients=False):
        poses, activations = inputs
        outputs = self._route_windows(poses, activations, return_coefficients)
        return (list(outputs[:2]), outputs[2]) if return_coefficients else list(outputs)

    def compute_output_shape(self, input_shape):
        return list(self._output_shapes(input_shape))
