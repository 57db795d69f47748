"""SegCaps's capsule layers: locally-constrained routing over child types.

`LocalCapsule2D` (convolution) and `LocalDeconvCapsule2D` (transposed
convolution) share everything but how the votes are made: one kernel,
shared over the grid and the child types, turns each child type's pose
grid into votes for every parent type at every output position, and the
router runs at each position over the child types only.
"""

import math

import keras
from keras import ops

from keras_capsules.conv import IMPLEMENTATIONS, resolve_implementation
from keras_capsules.initializers import transform_initializer
from keras_capsules.layers.base_routed_capsule import RoutedCapsule
from keras_capsules.ops import compute_dtype_for
from keras_capsules.validation import boolean, built_input_spec, int_tuple, one_of, positive_int
from keras_capsules.xla_hint import XlaHinted


class LocalCapsuleBase(XlaHinted, RoutedCapsule):
    """Shared code of `LocalCapsule2D` and `LocalDeconvCapsule2D` (see them).

    Subclasses set `_kernel_layout` and implement `_out_grid(grid)`,
    `_kernel_shape(in_dim, out_channels)`, `_taps()` (how many input
    positions feed one output position) and `_convolve(x, kernel)`.
    """

    def __init__(
        self,
        num_capsules,
        capsule_dim,
        kernel_size,
        strides,
        padding="same",
        router=None,
        return_activations=False,
        implementation="auto",
        use_bias=True,
        kernel_initializer=None,
        bias_initializer="zeros",
        kernel_regularizer=None,
        kernel_constraint=None,
        **kwargs,
    ):
        super().__init__(num_capsules, router, **kwargs)
        self.capsule_dim = positive_int(capsule_dim, "capsule_dim")
        self.kernel_size = int_tuple(kernel_size, 2, "kernel_size")
        self.strides = int_tuple(strides, 2, "strides")
        self.padding = one_of(padding, ("valid", "same"), "padding")
        self.return_activations = boolean(return_activations, "return_activations")
        self.implementation = one_of(implementation, IMPLEMENTATIONS, "implementation")
        self.use_bias = boolean(use_bias, "use_bias")
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)

    def _check_poses(self, input_shape):
        shape = tuple(input_shape)
        name = self.__class__.__name__
        if len(shape) != 5:
            raise ValueError(
                f"{name} expects poses of shape (batch, H, W, types, dim). "
                f"Received: poses.shape={shape}"
            )
        if None in shape[1:]:
            raise ValueError(
                f"{name} needs known grid sizes, capsule types and dim. "
                f"Received: poses.shape={shape}"
            )
        return shape

    def build(self, input_shape):
        _, height, width, types, in_dim = self._check_poses(input_shape)
        self._out_grid((height, width))  # checks the kernel fits
        # A built layer refuses other types and dims (and ranks) when called.
        self.input_spec = built_input_spec(input_shape, (-2, -1))
        out_channels = self.num_capsules * self.capsule_dim
        initializer = self.kernel_initializer
        if initializer is None:
            # Child poses of length ~0.5 on each of the taps that feed an
            # output give votes with the router's standard deviation.
            stddev = self.router.vote_stddev(types, self.num_capsules, self.capsule_dim)
            initializer = transform_initializer(stddev / math.sqrt(self._taps()))
        self.kernel = self.add_weight(
            name="kernel",
            shape=self._kernel_shape(in_dim, out_channels),
            initializer=initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias",
                shape=(self.num_capsules, self.capsule_dim),
                initializer=self.bias_initializer,
            )
        self.build_router((None, types, self.num_capsules, self.capsule_dim), None)

    def votes(self, poses):
        """Votes `(batch * H' * W', types, num_capsules, capsule_dim)`: each
        child type's pose grid convolved with the kernel (plus the bias),
        the output positions folded into the batch axis."""
        _, height, width, types, in_dim = poses.shape
        out_h, out_w = self._out_grid((height, width))
        dtype = compute_dtype_for(self.compute_dtype)
        # (batch, H, W, T, D) -> (batch * T, H, W, D): each child type's grid
        # is one image of the convolution's batch.
        x = ops.reshape(
            ops.transpose(ops.cast(poses, dtype), (0, 3, 1, 2, 4)), (-1, height, width, in_dim)
        )
        y = self._convolve(x, ops.cast(self.kernel, dtype))
        votes = ops.reshape(y, (-1, types, out_h, out_w, self.num_capsules, self.capsule_dim))
        if self.use_bias:
            votes = votes + ops.cast(self.bias, dtype)
        votes = ops.transpose(votes, (0, 2, 3, 1, 4, 5))
        return ops.reshape(votes, (-1, types, self.num_capsules, self.capsule_dim))

    def call(self, inputs, return_coefficients=False):
        height, width, types = self._check_poses(inputs.shape)[1:4]
        parent_poses, activations, *coefficients = self.route(
            self.votes(inputs), None, return_coefficients=return_coefficients
        )
        grid = (-1, *self._out_grid((height, width)), self.num_capsules)
        poses = ops.reshape(parent_poses, (*grid, self.capsule_dim))
        outputs = (poses, ops.reshape(activations, grid)) if self.return_activations else poses
        if not return_coefficients:
            return outputs
        window = (*grid[:-1], types, self.num_capsules)
        return outputs, ops.reshape(coefficients[0], window)

    def compute_output_shape(self, input_shape):
        batch, height, width = self._check_poses(input_shape)[:3]
        grid = (batch, *self._out_grid((height, width)), self.num_capsules)
        poses = (*grid, self.capsule_dim)
        return (poses, grid) if self.return_activations else poses

    def compute_coefficients_shape(self, input_shape):
        batch, height, width, types = self._check_poses(input_shape)[:4]
        return (batch, *self._out_grid((height, width)), types, self.num_capsules)

    def get_config(self):
        config = super().get_config()
        config.update(
            capsule_dim=self.capsule_dim,
            kernel_size=self.kernel_size,
            strides=self.strides,
            padding=self.padding,
            return_activations=self.return_activations,
            use_bias=self.use_bias,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
            kernel_regularizer=keras.regularizers.serialize(self.kernel_regularizer),
            kernel_constraint=keras.constraints.serialize(self.kernel_constraint),
        )
        return config

    def _resolved_implementation(self, x):
        return resolve_implementation(self.implementation, self.strides, x, xla=self.xla)
