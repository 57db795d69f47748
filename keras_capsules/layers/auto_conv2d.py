"""`AutoConv2D`: a Keras `Conv2D` that computes its convolution the fastest
way for the backend."""

import keras

from keras_capsules.conv import IMPLEMENTATIONS, conv2d, resolve_implementation
from keras_capsules.validation import one_of
from keras_capsules.xla_hint import XlaHinted


@keras.saving.register_keras_serializable(package="keras_capsules")
class AutoConv2D(XlaHinted, keras.layers.Conv2D):
    """`keras.layers.Conv2D` with a choice of how the convolution is computed.

    Any strides, stride 1 included. Same arguments, weights and outputs as
    `keras.layers.Conv2D`, plus `implementation` (by default `"auto"`: the
    fastest way for the backend, the device and XLA):

    ```
    y = activation(conv2d(x, kernel, strides, padding, implementation) + bias)
    ```

    - `"conv"`: the native `ops.conv`.
    - `"matmul"`: `kh * kw` strided slices, concatenated, and one matmul
      (`keras_capsules.conv.conv2d`); the same numbers within float32
      rounding. Channels-last, undilated, ungrouped convolutions only.
    - `"hybrid"`: the native forward and input gradient, the kernel gradient
      as one matmul on the patches (`keras_capsules.conv.conv2d_hybrid`);
      the same restrictions as `"matmul"`.
    - `"space_to_depth"`: one stride-1 native convolution of the input
      rearranged into stride-sized blocks
      (`keras_capsules.conv.conv2d_space_to_depth`); the same restrictions
      as `"matmul"`.
    - `"auto"`: the fastest of these for the backend, the device and
      whether XLA compiles the layer (see
      `keras_capsules.conv.resolve_implementation`); `"conv"` where the
      others do not apply.

    Args:
        filters, kernel_size, strides: as for `keras.layers.Conv2D`.
        implementation: `"conv"`, `"matmul"`, `"hybrid"`,
            `"space_to_depth"` or `"auto"`; a speed option, not saved in
            the config (a saved layer loads with `"auto"`).
        **kwargs: the other arguments of `keras.layers.Conv2D` (`padding`,
            `activation`, `kernel_initializer`, `kernel_regularizer`,
            `kernel_constraint`, the `bias_*` ones, ...).

    Attributes:
        xla: whether XLA compiles the layer, the hint `"auto"` reads:
            `None` (unknown, the default), `True` or `False`. Set by the
            ready models' `compile` (`keras_capsules.models.set_xla`) or by
            you; a runtime setting, not saved in the config.

    Call arguments:
        inputs: images of shape `(batch, height, width, channels)`
            (`data_format="channels_last"`, the default).

    Returns:
        Feature maps of shape `(batch, H', W', filters)`, `H', W'` as for
        `keras.layers.Conv2D`.

    Example (the first layer of the matrix-capsule network, and the
    implementations agreeing):

    >>> x = keras.Input((32, 32, 2))
    >>> keras_capsules.layers.AutoConv2D(32, 5, strides=2, activation="relu")(x).shape
    (None, 14, 14, 32)
    >>> images = np.linspace(-1, 1, 2 * 6 * 6 * 3, dtype="float32").reshape(2, 6, 6, 3)
    >>> conv = keras_capsules.layers.AutoConv2D(4, 3, strides=2, implementation="conv")
    >>> matmul = keras_capsules.layers.AutoConv2D(4, 3, strides=2, implementation="matmul")
    >>> y = conv(images)
    >>> matmul.build(images.shape)
    >>> matmul.set_weights(conv.get_weights())
    >>> np.allclose(ops.convert_to_numpy(matmul(images)), ops.convert_to_numpy(y), atol=1e-5)
    True

    Reference: Dumoulin & Visin, "A guide to convolution arithmetic for
    deep learning", 2016 (the output sizes).
    """

    def __init__(self, filters, kernel_size, strides=(1, 1), implementation="auto", **kwargs):
        super().__init__(filters, kernel_size, strides=strides, **kwargs)
        self.implementation = one_of(implementation, IMPLEMENTATIONS, "implementation")
        if self.implementation not in ("auto", "conv") and not self._matmul_supported():
            raise ValueError(
                f"{self.__class__.__name__}(implementation={self.implementation!r}) "
                "supports channels_last, dilation_rate=1 and groups=1 only. Received: "
                f"data_format={self.data_format!r}, dilation_rate={self.dilation_rate}, "
                f"groups={self.groups}"
            )

    def _matmul_supported(self):
        return (
            self.data_format == "channels_last"
            and all(d == 1 for d in self.dilation_rate)
            and self.groups == 1
        )

    def convolution_op(self, inputs, kernel):
        implementation = resolve_implementation(
            self.implementation, self.strides, inputs, xla=self.xla
        )
        # The other forms need the sizes, unknown where `predict` is traced
        # with `None` sizes (TensorFlow, on images of another size).
        if not self._matmul_supported() or None in tuple(inputs.shape[1:3]):
            implementation = "conv"
        if implementation == "conv":
            return super().convolution_op(inputs, kernel)
        return conv2d(inputs, kernel, self.strides, self.padding, implementation)
