"""Primary matrix capsules (Hinton, Sabour & Frosst, 2018): 4x4 poses and
activations from feature maps."""

import keras
from keras import ops

from keras_capsules.initializers import MATRIX_POSE_STDDEV
from keras_capsules.layers._matrix_pose import POSE_SIZE
from keras_capsules.layers.primary_convolution import PrimaryConvolution


def _primary_matrix_initializers():
    """`PrimaryMatrixCapsule`'s default (kernel, bias) initializers per
    convolution: poses with elements of standard deviation
    `MATRIX_POSE_STDDEV`, also where the inputs are small (the bias), and
    Keras's `glorot_uniform` activation kernel (activations near 0.5)."""
    pose_variance = MATRIX_POSE_STDDEV**2
    return {
        "pose": (
            lambda: keras.initializers.VarianceScaling(pose_variance, "fan_in", "truncated_normal"),
            lambda: keras.initializers.RandomNormal(stddev=MATRIX_POSE_STDDEV),
        ),
        "activation": (
            lambda: keras.initializers.GlorotUniform(),
            lambda: keras.initializers.Zeros(),
        ),
    }


@keras.saving.register_keras_serializable(package="keras_capsules")
class PrimaryMatrixCapsule(PrimaryConvolution):
    """Primary matrix capsules: a pose conv and an activation conv.

    ```
    poses       = reshape(conv2d(x, W_pose) + b_pose, (batch, H', W', n, 16))
    activations = sigmoid(conv2d(x, W_act) + b_act)          # (batch, H', W', n)
    ```

    Both convolutions run as one, on the kernels concatenated along the
    output channels. Poses are 4x4 matrices, as `ConvMatrixCapsule` and
    `ClassMatrixCapsule` take them.

    Args:
        num_capsules: int, capsule types `n` per position (32 in the paper).
        kernel_size, strides: int or pair (1 and 1 in the paper).
        padding: `"valid"` or `"same"`.
        implementation: how the convolution is computed: `"conv"`,
            `"matmul"`, `"hybrid"`, `"space_to_depth"` or `"auto"` (the
            same numbers; see `keras_capsules.conv.resolve_implementation`); a speed option, not
            saved in the config.
        kernel_initializer, bias_initializer: initializers of both
            convolutions' kernels (`W_pose`, `W_act`) and biases (`b_pose`,
            `b_act`); `None`, the default: poses start with elements of
            standard deviation 0.2 whatever the inputs' scale (pose kernel
            of variance `0.04 / fan_in`, pose bias of standard deviation
            0.2), and a `glorot_uniform` activation kernel with zero bias
            (activations near 0.5); see `keras_capsules.initializers`.
        kernel_regularizer, bias_regularizer: regularizers of both kernels
            and of both biases, or `None`.
        kernel_constraint, bias_constraint: constraints on both kernels and
            on both biases, or `None`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: images (feature maps) `x` of shape `(batch, height, width,
            channels)`.

    Returns:
        `[poses, activations]`: poses of shape `(batch, H', W', num_capsules,
        16)` (row-major 4x4 pose matrices) and activations in
        `(0, 1)` of shape `(batch, H', W', num_capsules)`, `H', W'` as for a
        convolution.

    Example:

    >>> x = keras.Input((14, 14, 32))
    >>> poses, activations = keras_capsules.layers.PrimaryMatrixCapsule(8)(x)
    >>> poses.shape, activations.shape
    ((None, 14, 14, 8, 16), (None, 14, 14, 8))

    Reference: Hinton, Sabour & Frosst, "Matrix capsules with EM routing",
    ICLR 2018.
    """

    def __init__(
        self,
        num_capsules,
        kernel_size=1,
        strides=1,
        padding="valid",
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

    def build(self, input_shape):
        self._check_inputs(input_shape)
        pose_filters = self.num_capsules * POSE_SIZE
        defaults = _primary_matrix_initializers()
        for name, filters in (("pose", pose_filters), ("activation", self.num_capsules)):
            kernel_default, bias_default = defaults[name]
            setattr(
                self,
                f"{name}_kernel",
                self.add_weight(
                    name=f"{name}_kernel",
                    shape=(*self.kernel_size, input_shape[-1], filters),
                    initializer=self.kernel_initializer or kernel_default(),
                    regularizer=self.kernel_regularizer,
                    constraint=self.kernel_constraint,
                ),
            )
            setattr(
                self,
                f"{name}_bias",
                self.add_weight(
                    name=f"{name}_bias",
                    shape=(filters,),
                    initializer=self.bias_initializer or bias_default(),
                    regularizer=self.bias_regularizer,
                    constraint=self.bias_constraint,
                ),
            )

    def call(self, inputs):
        kernel = ops.concatenate([self.pose_kernel, self.activation_kernel], axis=-1)
        bias = ops.concatenate([self.pose_bias, self.activation_bias], axis=-1)
        y = self._conv(inputs, kernel, bias)
        pose_filters = self.num_capsules * POSE_SIZE
        grid = (-1, *y.shape[1:3], self.num_capsules)
        poses = ops.reshape(y[..., :pose_filters], (*grid, POSE_SIZE))
        activations = ops.sigmoid(y[..., pose_filters:])
        return [poses, activations]

    def compute_output_shape(self, input_shape):
        grid = (input_shape[0], *self._output_grid(input_shape), self.num_capsules)
        return [(*grid, POSE_SIZE), grid]
