"""`WindowedCapsule`: the base of the capsule layers that route inside
the sliding windows of a capsule grid (`ConvCapsule1D`, `ConvCapsule2D`,
`ConvMatrixCapsule`)."""

import math

import keras
from keras import ops

from keras_capsules.layers.base_routed_capsule import RoutedCapsule, split_capsule_inputs
from keras_capsules.validation import (
    built_input_spec,
    check_grid,
    int_tuple,
    non_empty,
    one_of,
)
from keras_capsules.windows import extract_windows


class WindowedCapsule(RoutedCapsule):
    """Base of capsule layers that route inside sliding windows of a grid.

    Subclasses set `rank` (number of grid axes) and implement
    `_kernel_shape(types, in_dim)` and `_votes(windows)`, which maps
    `(n, K, types, in_dim)` window poses (`n = batch * windows`, `K` kernel
    offsets) to votes `(n, K * types, num_capsules, out_dim)`. This class
    extracts the windows, folds their positions into the batch axis, runs
    the router once on all of them and unfolds the result.

    The weight, made from the `kernel_*` arguments, is the attribute (and
    weight) named `_kernel_name`: `kernel`, or `householder` when it holds
    Householder vectors (`ConvCapsule` with `orthogonal=True`), which stay
    float32 under mixed precision (`_kernel_autocast = False`). The router
    is `RoutedCapsule`'s (`router=`, `default_router`).
    """

    rank = 2
    _kernel_name = "kernel"
    _kernel_autocast = True

    def __init__(
        self,
        num_capsules,
        kernel_size,
        strides=1,
        padding="valid",
        router=None,
        kernel_initializer=None,
        kernel_regularizer=None,
        kernel_constraint=None,
        **kwargs,
    ):
        super().__init__(num_capsules, router, **kwargs)
        self.kernel_size = int_tuple(kernel_size, self.rank, "kernel_size")
        self.strides = int_tuple(strides, self.rank, "strides")
        self.padding = one_of(padding, ("valid", "same"), "padding")
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)

    # Grid helpers -------------------------------------------------------

    def _grid_shapes(self, input_shape):
        """-> (poses_shape, activations_shape or None), shapes as tuples."""
        poses_shape, activations_shape = split_capsule_inputs(input_shape)
        poses_shape = tuple(poses_shape)
        if len(poses_shape) != self.rank + 3:
            raise ValueError(
                f"{self.__class__.__name__} expects poses of shape (batch, "
                f"{'grid axes, ' * self.rank}types, dim). "
                f"Received: poses.shape={poses_shape}"
            )
        if poses_shape[-1] is None or poses_shape[-2] is None:
            raise ValueError(
                f"{self.__class__.__name__} needs known capsule types and dim. "
                f"Received: poses.shape={poses_shape}"
            )
        # No type or pose dimension: no votes, which the backends refuse (a
        # division by zero in the transforms' scale) or route to zeros.
        non_empty(
            self.__class__.__name__,
            "poses",
            poses_shape,
            (-2, -1),
            ("capsule type", "pose dimension"),
        )
        if activations_shape is not None:
            activations_shape = tuple(activations_shape)
            if activations_shape[1:] != poses_shape[1:-1]:
                raise ValueError(
                    f"{self.__class__.__name__} expects activations of shape "
                    f"{(None, *poses_shape[1:-1])}. "
                    f"Received: activations.shape={activations_shape}"
                )
        return poses_shape, activations_shape

    def _default_kernel_initializer(self, types, in_dim):
        """A function that makes the initializer of the kernel when
        `kernel_initializer` is `None`, or `None` (no derived default)."""
        return None

    def _kernel_initializer_for(self, types, in_dim):
        """`kernel_initializer`, or the derived default where it is `None`."""
        if self.kernel_initializer is not None:
            return self.kernel_initializer
        default = self._default_kernel_initializer(types, in_dim)
        return None if default is None else default()

    def _votes_shape(self, types, out_dim):
        k = math.prod(self.kernel_size)
        return (None, k * types, self.num_capsules, out_dim)

    def build(self, input_shape):
        poses_shape, activations_shape = self._grid_shapes(input_shape)
        self._out_grid = check_grid(
            self.__class__.__name__,
            poses_shape[1:-2],
            self.kernel_size,
            self.strides,
            self.padding,
        )
        types, in_dim = poses_shape[-2:]
        self.in_dim = in_dim
        # A built layer refuses other types and dims when called, on the
        # shapes as given (ConvCapsule1D also takes (batch, L, dim) poses
        # and (batch, L) activations: one type, no types axis).
        given_poses, given_activations = split_capsule_inputs(input_shape)
        typed = len(given_poses) == self.rank + 3
        spec = built_input_spec(given_poses, (-2, -1) if typed else (-1,))
        if given_activations is not None:
            given_activations = tuple(given_activations)
            if typed:
                activations_spec = built_input_spec((*given_activations[:-1], types), (-1,))
            else:
                activations_spec = built_input_spec(given_activations, ())
            spec = [spec, activations_spec]
        self.input_spec = spec
        setattr(
            self,
            self._kernel_name,
            self.add_weight(
                name=self._kernel_name,
                shape=self._kernel_shape(types, in_dim),
                autocast=self._kernel_autocast,
                initializer=self._kernel_initializer_for(types, in_dim),
                regularizer=self.kernel_regularizer,
                constraint=self.kernel_constraint,
            ),
        )
        votes_shape = self._votes_shape(types, self._out_dim(in_dim))
        self.build_router(votes_shape, None if activations_shape is None else votes_shape[:2])

    def _route_windows(self, poses, activations, return_coefficients=False):
        """Windowed routing: `(poses, activations)` of the parent grid, and
        with `return_coefficients` the coefficients `(batch, *grid, K *
        types, num_capsules)` of each output position's window."""
        types, in_dim = poses.shape[-2:]
        k = math.prod(self.kernel_size)
        windows = extract_windows(poses, self.kernel_size, self.strides, self.padding)
        windows = ops.reshape(windows, (-1, k, types, in_dim))
        votes = self._votes(windows)
        if activations is not None:
            activations = extract_windows(activations, self.kernel_size, self.strides, self.padding)
            activations = ops.reshape(activations, (-1, k * types))
        parent_poses, parent_activations, *coefficients = self.route(
            votes, activations, return_coefficients=return_coefficients
        )
        grid = (-1, *self._out_grid, self.num_capsules)
        outputs = (
            ops.reshape(parent_poses, (*grid, parent_poses.shape[-1])),
            ops.reshape(parent_activations, grid),
        )
        if return_coefficients:
            window = (-1, *self._out_grid, k * types, self.num_capsules)
            outputs += (ops.reshape(coefficients[0], window),)
        return outputs

    def _output_shapes(self, input_shape):
        poses_shape, _ = self._grid_shapes(input_shape)
        out_grid = check_grid(
            self.__class__.__name__,
            poses_shape[1:-2],
            self.kernel_size,
            self.strides,
            self.padding,
        )
        grid = (poses_shape[0], *out_grid, self.num_capsules)
        return (*grid, self._out_dim(poses_shape[-1])), grid

    def compute_coefficients_shape(self, input_shape):
        poses_shape, _ = self._grid_shapes(input_shape)
        grid = self._output_shapes(input_shape)[1]
        children = math.prod(self.kernel_size) * poses_shape[-2]
        return (*grid[:-1], children, self.num_capsules)

    def get_config(self):
        config = super().get_config()
        config.update(
            kernel_size=self.kernel_size,
            strides=self.strides,
            padding=self.padding,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            kernel_regularizer=keras.regularizers.serialize(self.kernel_regularizer),
            kernel_constraint=keras.constraints.serialize(self.kernel_constraint),
        )
        return config
