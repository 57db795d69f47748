"""`PrimaryConvolution`: the base of the primary capsule layers, which
turn images (or volumes) into capsules with one convolution."""

import keras

from keras_capsules.conv import (
    IMPLEMENTATIONS,
    conv2d,
    conv3d,
    resolve_implementation,
    resolve_implementation_3d,
)
from keras_capsules.validation import (
    built_input_spec,
    check_kernel_fits,
    int_tuple,
    non_empty,
    one_of,
    positive_int,
)
from keras_capsules.xla_hint import XlaHinted

# What each rank convolves, for the error messages, and the implementations
# its convolution has (`conv.resolve_implementation`, `resolve_implementation_3d`).
_INPUTS = {
    2: "images of shape (batch, height, width, channels)",
    3: "volumes of shape (batch, depth, height, width, channels)",
}
_IMPLEMENTATIONS = {2: IMPLEMENTATIONS, 3: ("auto", "conv", "matmul")}


class PrimaryConvolution(XlaHinted, keras.layers.Layer):
    """Base of the primary capsule layers: the arguments, checks and call
    of their one convolution of `(batch, height, width, channels)` images
    (`rank = 2`: `PrimaryCapsule`, `PrimaryMatrixCapsule`) or `(batch,
    depth, height, width, channels)` volumes (`rank = 3`:
    `PrimaryCapsule3D`).

    Attributes:
        xla: whether XLA compiles the layer, the hint that
            `implementation="auto"` reads: `None` (unknown, the default),
            `True` or `False`. Set by the ready models' `compile`
            (`keras_capsules.models.set_xla`) or by you; a runtime setting,
            not saved in the config (nor is `implementation`: it changes
            speed only).
    """

    rank = 2  # spatial dimensions of the inputs; a subclass of volumes sets 3

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
        self.kernel_size = int_tuple(kernel_size, self.rank, "kernel_size")
        self.strides = int_tuple(strides, self.rank, "strides")
        self.padding = one_of(padding, ("valid", "same"), "padding")
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self.implementation = one_of(implementation, _IMPLEMENTATIONS[self.rank], "implementation")
        self.input_spec = keras.layers.InputSpec(ndim=self.rank + 2)

    def _check_inputs(self, input_shape):
        # The rank is the input spec's (checked when the layer is called).
        if input_shape[-1] is None:
            raise ValueError(
                f"{self.__class__.__name__} expects {_INPUTS[self.rank]} with known "
                f"channels. Received: input_shape={tuple(input_shape)}"
            )
        non_empty(self.__class__.__name__, "inputs", input_shape, (-1,), ("channel",))
        self._output_grid(input_shape)
        # A built layer refuses other channels (and ranks) when called.
        self.input_spec = built_input_spec(input_shape, (-1,))

    def _output_grid(self, input_shape):
        return check_kernel_fits(
            self.__class__.__name__,
            "input",
            input_shape[1 : 1 + self.rank],
            self.kernel_size,
            self.strides,
            self.padding,
        )

    def _conv(self, inputs, kernel, bias):
        # Sizes unknown when traced (TensorFlow retraces `predict` on images
        # of another size with `None` sizes): the native convolution, the one
        # form that needs none of them (the same numbers).
        unknown = None in tuple(inputs.shape[1 : 1 + self.rank])
        if self.rank == 3:
            implementation = resolve_implementation_3d(self.implementation, xla=self.xla)
            implementation = "conv" if unknown else implementation
            return conv3d(inputs, kernel, self.strides, self.padding, implementation) + bias
        implementation = resolve_implementation(
            self.implementation, self.strides, inputs, xla=self.xla
        )
        implementation = "conv" if unknown else implementation
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
