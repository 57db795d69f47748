"""Primary capsules of volumes: one 3-D convolution, regrouped into capsules."""

import keras
from keras import ops

from keras_capsules.conv import conv3d, resolve_implementation_3d
from keras_capsules.initializers import primary_bias_initializer, primary_kernel_initializer
from keras_capsules.ops import squash
from keras_capsules.validation import boolean, check_kernel_fits, int_tuple, one_of, positive_int
from keras_capsules.xla_hint import XlaHinted


@keras.saving.register_keras_serializable(package="keras_capsules")
class PrimaryCapsule3D(XlaHinted, keras.layers.Layer):
    """Convolutional primary capsules of volumes `(batch, D, H, W, channels)`.

    `PrimaryCapsule` in three dimensions: one 3-D convolution with
    `num_capsules * capsule_dim` filters, its output regrouped into capsules
    (the capsule type is the fastest-varying axis after the position) and
    squashed:

    ```
    y = conv3d(x, kernel, strides, padding) + bias        (batch, D', H', W', types * dim)
    capsules = squash(reshape(y, (batch, D', H', W', types, dim)))
    ```

    `grid=True` keeps that grid, the input of `ConvCapsule3D`; `grid=False`
    (the default, as `PrimaryCapsule`) flattens it to `(batch, D' H' W'
    types, dim)`, the input of `Capsule`. The initializers are
    `PrimaryCapsule`'s: capsules start near the squash's knee (length ~0.5)
    whatever the scale of the inputs (`keras_capsules.initializers`).

    Args:
        num_capsules: int, capsule types per position.
        capsule_dim: int, dimension of each capsule.
        kernel_size: int or triple.
        strides: int or triple.
        padding: `"valid"` or `"same"`.
        grid: bool, keep the grid `(batch, D', H', W', types, dim)`.
        squash: bool, apply `keras_capsules.ops.squash` to the capsules.
        implementation: `"conv"`, `"matmul"` or `"auto"` (the same numbers;
            see `keras_capsules.conv.resolve_implementation_3d`: under XLA
            on a CPU a native 3-D convolution is up to 400x slower); a
            speed option, not saved in the config.
        kernel_initializer, bias_initializer: `None` (the default) derives
            them as in `PrimaryCapsule`; any Keras initializer otherwise.
        kernel_regularizer, bias_regularizer, kernel_constraint,
            bias_constraint: as in `keras.layers.Conv3D`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Attributes:
        xla: whether XLA compiles the layer, the hint `implementation="auto"`
            reads (`keras_capsules.xla_hint`): set it to `True` when you
            compile with `jit_compile=True` on TensorFlow
            (`keras_capsules.models.set_xla(model, True)` sets it on every
            layer of a model).

    Call arguments:
        inputs: volumes `x` of shape `(batch, D, H, W, channels)`.

    Returns:
        Capsules `(batch, D' * H' * W' * num_capsules, capsule_dim)`, or with
        `grid=True` `(batch, D', H', W', num_capsules, capsule_dim)`; `D',
        H', W'` as for `keras.layers.Conv3D`.

    Example (8 capsule types of 8-D at each of 7^3 positions):

    >>> x = keras.Input((16, 16, 16, 1))
    >>> keras_capsules.layers.PrimaryCapsule3D(8, 8, 3, strides=2)(x).shape
    (None, 2744, 8)
    >>> keras_capsules.layers.PrimaryCapsule3D(8, 8, 3, strides=2, grid=True)(x).shape
    (None, 7, 7, 7, 8, 8)

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017 (primary capsules), here on volumes as in the 3-D capsule
    networks of medical imaging (e.g. Afshar et al., "3D-MCN", 2020).
    """

    def __init__(
        self,
        num_capsules,
        capsule_dim,
        kernel_size,
        strides=1,
        padding="valid",
        grid=False,
        squash=True,
        implementation="auto",
        kernel_initializer=None,
        bias_initializer=None,
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_capsules = positive_int(num_capsules, "num_capsules")
        self.capsule_dim = positive_int(capsule_dim, "capsule_dim")
        self.kernel_size = int_tuple(kernel_size, 3, "kernel_size")
        self.strides = int_tuple(strides, 3, "strides")
        self.padding = one_of(padding, ("valid", "same"), "padding")
        self.grid = boolean(grid, "grid")
        self.squash = boolean(squash, "squash")
        self.implementation = one_of(implementation, ("auto", "conv", "matmul"), "implementation")
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self.input_spec = keras.layers.InputSpec(ndim=5)

    def _output_grid(self, input_shape):
        return check_kernel_fits(
            self.__class__.__name__,
            "input",
            input_shape[1:4],
            self.kernel_size,
            self.strides,
            self.padding,
        )

    def build(self, input_shape):
        if input_shape[-1] is None:
            raise ValueError(
                f"{self.__class__.__name__} expects volumes of shape (batch, depth, "
                "height, width, channels) with known channels. "
                f"Received: input_shape={tuple(input_shape)}"
            )
        self._output_grid(input_shape)
        filters = self.num_capsules * self.capsule_dim
        dim = self.capsule_dim
        self.kernel = self.add_weight(
            name="kernel",
            shape=(*self.kernel_size, input_shape[-1], filters),
            initializer=self.kernel_initializer or primary_kernel_initializer(dim),
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.bias = self.add_weight(
            name="bias",
            shape=(filters,),
            initializer=self.bias_initializer or primary_bias_initializer(dim),
            regularizer=self.bias_regularizer,
            constraint=self.bias_constraint,
        )

    def call(self, inputs):
        implementation = resolve_implementation_3d(self.implementation, xla=self.xla)
        y = conv3d(inputs, self.kernel, self.strides, self.padding, implementation) + self.bias
        if self.grid:
            shape = ops.shape(y)
            capsules = ops.reshape(y, (*shape[:4], self.num_capsules, self.capsule_dim))
        else:
            capsules = ops.reshape(y, (ops.shape(y)[0], -1, self.capsule_dim))
        return squash(capsules) if self.squash else capsules

    def compute_output_shape(self, input_shape):
        grid = tuple(self._output_grid(input_shape))
        if self.grid:
            return (input_shape[0], *grid, self.num_capsules, self.capsule_dim)
        n = None if None in grid else grid[0] * grid[1] * grid[2] * self.num_capsules
        return (input_shape[0], n, self.capsule_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_capsules=self.num_capsules,
            capsule_dim=self.capsule_dim,
            kernel_size=self.kernel_size,
            strides=self.strides,
            padding=self.padding,
            grid=self.grid,
            squash=self.squash,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
            kernel_regularizer=keras.regularizers.serialize(self.kernel_regularizer),
            bias_regularizer=keras.regularizers.serialize(self.bias_regularizer),
            kernel_constraint=keras.constraints.serialize(self.kernel_constraint),
            bias_constraint=keras.constraints.serialize(self.bias_constraint),
        )
        return config
