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

from keras_capsules.conv import IMPLEMENTATIONS, conv2d, conv2d_transpose, resolve_implementation
from keras_capsules.initializers import transform_initializer
from keras_capsules.layers.base_routed_capsule import RoutedCapsule
from keras_capsules.ops import compute_dtype_for
from keras_capsules.validation import check_grid, int_tuple, one_of, positive_int
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
        self.return_activations = bool(return_activations)
        self.implementation = one_of(implementation, IMPLEMENTATIONS, "implementation")
        self.use_bias = bool(use_bias)
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


@keras.saving.register_keras_serializable(package="keras_capsules")
class LocalCapsule2D(LocalCapsuleBase):
    """Convolutional capsules with locally-constrained routing (SegCaps).

    Child poses `u[b, y, x, t, :]` (child type `t` of `T`) vote for each
    parent type `j` at each output position `p` through one kernel `K`,
    shared over the grid and the child types; the router runs at every
    position over the `T` child types:

    ```
    votes[b, p, t, j, :] = conv2d(u[b, :, :, t, :], K)[p, j, :] + bias[j, :]
    poses[b, p], activations[b, p] = router(votes[b, p])     # T children
    ```

    `K: (kh, kw, in_dim, num_capsules * capsule_dim)`, `conv2d` with
    `strides` and `padding`. Unlike `ConvCapsule2D`, where every (kernel
    offset, child type) of a window is a child with its own transform, the
    kernel sums over the window: a child type gives one vote per parent at
    each position, so the layer's weights do not grow with the child types.
    That is the layer of the authors' code, and what gives SegCaps R3 its
    1.4 M parameters. The bias is added to the votes (the authors' code
    adds it to the routed sum instead), so that every router serves. The
    default router, `DynamicRouting()` (3 iterations), starts the logits
    at 0 at each position; a pose's length is its activation for every
    router but EM and self-routing (`RoutedCapsule`).

    Initialisation: the default `K` (`kernel_initializer=None`) is a
    truncated normal of standard deviation `vote_stddev / (0.5 * sqrt(kh *
    kw))`, `vote_stddev = router.vote_stddev(T, num_capsules,
    capsule_dim)`: child poses of length 0.5 give votes with the standard
    deviation the router asks for (`keras_capsules.initializers`).

    Args:
        num_capsules: int, parent capsule types per position.
        capsule_dim: int, dimension of each parent capsule.
        kernel_size: int or pair, default 5 (SegCaps).
        strides: int or pair, default 1.
        padding: `"same"` (default) or `"valid"`.
        router: a router, or its name or config (`keras_capsules.routing.get`);
            default `DynamicRouting()`.
        return_activations: bool, also return the parent activations.
        implementation: how the convolution is computed (`"auto"`, the
            default, `"conv"`, `"matmul"`, `"hybrid"`, `"space_to_depth"`:
            `keras_capsules.conv.resolve_implementation`); the same values,
            a speed option not saved in the config.
        use_bias: bool, add a bias `(num_capsules, capsule_dim)` to the votes.
        kernel_initializer: initializer of `K`; `None` derives it from the
            router (above).
        bias_initializer: initializer of the bias (default zeros).
        kernel_regularizer, kernel_constraint: of `K`, or `None`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: child poses `(batch, H, W, types, in_dim)`.

    Returns:
        parent poses `(batch, H', W', num_capsules, capsule_dim)` (`H', W'`
        as for a convolution), and with `return_activations=True` the
        activations `(batch, H', W', num_capsules)` too.

    Example:

    >>> u = keras.Input((16, 16, 2, 8))
    >>> keras_capsules.layers.LocalCapsule2D(4, 16, 5, strides=2)(u).shape
    (None, 8, 8, 4, 16)

    Reference: LaLonde & Bagci, "Capsules for Object Segmentation", 2018
    (arXiv:1804.04241), locally-constrained dynamic routing.
    """

    def __init__(
        self, num_capsules, capsule_dim, kernel_size=5, strides=1, padding="same", **kwargs
    ):
        super().__init__(
            num_capsules, capsule_dim, kernel_size, strides=strides, padding=padding, **kwargs
        )

    def _out_grid(self, grid):
        return check_grid(
            self.__class__.__name__, grid, self.kernel_size, self.strides, self.padding
        )

    def _taps(self):
        return math.prod(self.kernel_size)

    def _kernel_shape(self, in_dim, out_channels):
        return (*self.kernel_size, in_dim, out_channels)

    def _convolve(self, x, kernel):
        return conv2d(x, kernel, self.strides, self.padding, self._resolved_implementation(x))


@keras.saving.register_keras_serializable(package="keras_capsules")
class LocalDeconvCapsule2D(LocalCapsuleBase):
    """Deconvolutional capsules with locally-constrained routing (SegCaps).

    As `LocalCapsule2D`, with a transposed convolution for the votes: the
    grid grows by `strides` (`"same"`: `H' = H * s`; `"valid"`: `H' = (H -
    1) * s + max(k, s)`), as in SegCaps's decoder path:

    ```
    votes[b, p, t, j, :] = conv_transpose(u[b, :, :, t, :], K)[p, j, :] + bias[j, :]
    poses[b, p], activations[b, p] = router(votes[b, p])     # T children
    ```

    `K: (kh, kw, num_capsules * capsule_dim, in_dim)`, the layout of
    `keras.ops.conv_transpose`. The default `K` is drawn as for
    `LocalCapsule2D`, with the `ceil(kh / s) * ceil(kw / s)` input
    positions that feed one output position.

    Args:
        num_capsules, capsule_dim, router, return_activations, use_bias,
        kernel_initializer, bias_initializer, kernel_regularizer,
        kernel_constraint: as for `LocalCapsule2D`.
        implementation: `"conv"`, the native transposed convolution, or
            its sub-pixel form (`keras_capsules.conv.conv2d_transpose`)
            computed by `"matmul"`, `"hybrid"` or `"space_to_depth"`;
            `"auto"` (the default) picks as for a strided convolution
            (`keras_capsules.conv.resolve_implementation`). The same values.
        kernel_size: int or pair, default 4 (SegCaps).
        strides: int or pair, the upsampling factor, default 2.
        padding: `"same"` (default) or `"valid"`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: child poses `(batch, H, W, types, in_dim)`.

    Returns:
        parent poses `(batch, H', W', num_capsules, capsule_dim)`, and
        with `return_activations=True` the activations too.

    Example:

    >>> u = keras.Input((8, 8, 4, 16))
    >>> keras_capsules.layers.LocalDeconvCapsule2D(2, 16, 4, strides=2)(u).shape
    (None, 16, 16, 2, 16)

    Reference: LaLonde & Bagci, "Capsules for Object Segmentation", 2018
    (arXiv:1804.04241), deconvolutional capsules.
    """

    def __init__(
        self, num_capsules, capsule_dim, kernel_size=4, strides=2, padding="same", **kwargs
    ):
        super().__init__(
            num_capsules, capsule_dim, kernel_size, strides=strides, padding=padding, **kwargs
        )

    def _out_grid(self, grid):
        if self.padding == "same":
            return tuple(n * s for n, s in zip(grid, self.strides))
        return tuple(
            (n - 1) * s + max(k, s) for n, k, s in zip(grid, self.kernel_size, self.strides)
        )

    def _taps(self):
        return math.prod(-(-k // s) for k, s in zip(self.kernel_size, self.strides))

    def _kernel_shape(self, in_dim, out_channels):
        return (*self.kernel_size, out_channels, in_dim)

    def _convolve(self, x, kernel):
        implementation = self._resolved_implementation(x)
        return conv2d_transpose(x, kernel, self.strides, self.padding, implementation)
