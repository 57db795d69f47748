"""Primary capsules of volumes: one 3-D convolution, regrouped into capsules."""

import keras
from keras import ops

from keras_capsules.layers.primary_capsule import PrimaryCapsule
from keras_capsules.ops import squash
from keras_capsules.validation import boolean


@keras.saving.register_keras_serializable(package="keras_capsules")
class PrimaryCapsule3D(PrimaryCapsule):
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

    rank = 3  # the base's convolution is `conv.conv3d`

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
        super().__init__(
            num_capsules,
            capsule_dim,
            kernel_size,
            strides=strides,
            padding=padding,
            squash=boolean(squash, "squash"),
            implementation=implementation,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
            **kwargs,
        )
        self.grid = boolean(grid, "grid")

    def call(self, inputs):
        if not self.grid:
            return super().call(inputs)
        y = self._conv(inputs, self.kernel, self.bias)
        capsules = ops.reshape(y, (*ops.shape(y)[:4], self.num_capsules, self.capsule_dim))
        return squash(capsules) if self.squash else capsules

    def compute_output_shape(self, input_shape):
        if not self.grid:
            return super().compute_output_shape(input_shape)
        grid = tuple(self._output_grid(input_shape))
        return (input_shape[0], *grid, self.num_capsules, self.capsule_dim)

    def get_config(self):
        config = super().get_config()
        config.update(grid=self.grid)
        return config
