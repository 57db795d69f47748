"""`PrimaryConvolution`: the base of the primary capsule layers, which
turn images into capsules with one 2-D convolution."""

import keras

from keras_capsules.conv import IMPLEMENTATIONS, conv2d, resolve_implementation
from keras_capsules.validation import check_kernel_fits, int_tuple, one_of, positive_int
from keras_capsules.xla_hint import XlaHinted


class PrimaryConvolution(XlaHinted, keras.layers.Layer):
    """Base of the primary capsule layers: the arguments, checks and call
    of their one 2-D convolution of `(batch, height, width, channels)`
    images (see `PrimaryCapsule` and `PrimaryMatrixCapsule`).

    Attributes:
        xla: whether XLA compiles the layer, the hint that
            `implementation="auto"` reads: `None` (unknown, the default),
            `True` or `False`. Set by the ready models' `compile`
            (`keras_capsules.models.set_xla`) or by you; a runtime setting,
            not saved in the config (nor is `implementation`: it changes
            speed only).
    """

    def __init__(
        self,
        num_capsules,
        kernel_size,
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
        super().__init__(**kwargs)
        self.num_capsules = positive_int(num_capsules, "num_capsules")
        self.kernel_size = int_tuple(kernel_size, 2, "kernel_size")
        self.strides = int_tuple(strides, 2, "strides")
        self.padding = one_of(padding, ("valid", "same"), "padding")
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self.implementation = one_of(implementation, IMPLEMENTATIONS, "implementation")
        self.input_spec = keras.layers.InputSpec(ndim=4)

    def _check_images(self, input_shape):
        # The rank is the input spec's (checked when the layer is called).
        if input_shape[-1] is None:
            raise ValueError(
                f"{self.__class__.__name__} expects images of shape (batch, height, "
                f"width, channels) with known channels. "
                f"Received: input_shape={tuple(input_shape)}"
            )
        self._output_grid(input_shape)

    def _output_grid(self, input_shape):
        return check_kernel_fits(
            self.__class__.__name__,
            "input",
            input_shape[1:3],
            self.kernel_size,
            self.strides,
            self.padding,
        )

    def _conv(self, inputs, kernel, bias):
        implementation = resolve_implementation(
            self.implementation, self.strides, inputs, xla=self.xla
        )
        return conv2d(inputs, kernel, self.strides, self.padding, implementation) + bias

    def get_config(self):
        config = super().get_config()
        config.update(
            num_capsules=self.num_capsules,
            kernel_size=self.kernel_size,
            strides=self.strides,
            padding=self.padding,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            kernel_regularizer=keras.regularizers.serialize(self.kernel_regularizer),
            kernel_constraint=keras.constraints.serialize(self.kernel_constraint),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
            bias_regularizer=keras.regularizers.serialize(self.bias_regularizer),
            bias_constraint=keras.constraints.serialize(self.bias_constraint),
        )
        return config
