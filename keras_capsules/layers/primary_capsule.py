"""Primary capsules: one convolution, regrouped into capsules."""

import math

import keras
from keras import ops

from keras_capsules.initializers import primary_bias_initializer, primary_kernel_initializer
from keras_capsules.layers.primary_convolution import PrimaryConvolution
from keras_capsules.ops import squash
from keras_capsules.validation import boolean, positive_int


@keras.saving.register_keras_serializable(package="keras_capsules")
class PrimaryCapsule(PrimaryConvolution):
    """Convolutional primary capsules (Sabour et al., 2017).

    One 2-D convolution with `num_capsules * capsule_dim` filters; its
    output `(batch, H', W', num_capsules * capsule_dim)` is regrouped into
    `(batch, H' * W' * num_capsules, capsule_dim)` capsules (the capsule
    type is the fastest-varying axis after the position) and squashed:

    ```
    y = conv2d(x, kernel, strides, padding) + bias
    capsules = squash(reshape(y, (batch, H' * W' * num_capsules, capsule_dim)))
    ```

    Initialisation: the squash is flat at 0 (`squash(s) ~ |s| s`), so
    capsules that start near length 0 pass back almost no gradient. With
    Keras's `glorot_uniform` kernel and zero bias, the capsules of a
    `Conv2D(256, 9, activation="relu")` on MNIST start at length ~0.008 and
    the model stays at chance. The default kernel, of variance `1 /
    (capsule_dim * fan_in)`, gives inputs of unit second moment capsules of
    length ~1 before the squash; the default bias adds to each capsule type
    a random offset of length ~1 (standard deviation `1 /
    sqrt(capsule_dim)`), so capsules start near length 0.5 even when the
    inputs are small (that convolution's features have a second moment of
    ~4e-4). The paper's own initialisation (truncated normal kernel of
    standard deviation 0.01, bias 0.1) is what `models.CapsNet` uses.

    Args:
        num_capsules: int, capsule types per position (32 in the paper).
        capsule_dim: int, dimension of each capsule (8 in the paper).
        kernel_size: int or pair.
        strides: int or pair.
        padding: `"valid"` or `"same"`.
        squash: bool, apply `keras_capsules.ops.squash` to the capsules.
        implementation: how the convolution is computed: `"conv"`,
            `"matmul"`, `"hybrid"`, `"space_to_depth"` or `"auto"` (the
            same numbers; see `keras_capsules.conv.resolve_implementation`); a speed option, not
            saved in the config.
        kernel_initializer, bias_initializer: initializers of the
            convolution's kernel and bias; `None` (the default): variance
            `1 / (capsule_dim * fan_in)` for the kernel and a normal bias of
            standard deviation `1 / sqrt(capsule_dim)`, so that capsules
            start at length ~0.5 after the squash whatever the scale of the
            inputs (see "Initialisation" below and
            `keras_capsules.initializers`).
        kernel_regularizer, bias_regularizer: regularizers of the kernel
            and bias, or `None`.
        kernel_constraint, bias_constraint: constraints on the kernel and
            bias, or `None`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Attributes:
        xla: the hint `implementation="auto"` reads (`keras_capsules.xla_hint`).

    Call arguments:
        inputs: images `x` of shape `(batch, height, width, channels)`.

    Returns:
        Capsules of shape `(batch, H' * W' * num_capsules, capsule_dim)`,
        `H', W'` as for a convolution.

    Example (the paper's 1152 primary capsules):

    >>> x = keras.Input((20, 20, 256))
    >>> keras_capsules.layers.PrimaryCapsule(32, 8, 9, strides=2)(x).shape
    (None, 1152, 8)

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017.
    """

    def __init__(
        self,
        num_capsules,
        capsule_dim,
        kernel_size,
        strides=1,
        padding="valid",
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
            kernel_size,
            strides=strides,
            padding=padding,
            implementation=implementation,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
            **kwargs,
        )
        self.capsule_dim = positive_int(capsule_dim, "capsule_dim")
        self.squash = boolean(squash, "squash")

    def build(self, input_shape):
        self._check_inputs(input_shape)
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
        y = self._conv(inputs, self.kernel, self.bias)
        batch = ops.shape(y)[0]
        capsules = ops.reshape(y, (batch, -1, self.capsule_dim))
        return squash(capsules) if self.squash else capsules

    def compute_output_shape(self, input_shape):
        grid = tuple(self._output_grid(input_shape))
        n = None if None in grid else math.prod(grid) * self.num_capsules
        return (input_shape[0], n, self.capsule_dim)

    def get_config(self):
        config = super().get_config()
        config.update(capsule_dim=self.capsule_dim, squash=self.squash)
        return config
