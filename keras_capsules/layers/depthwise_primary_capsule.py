"""The depthwise primary capsules of Efficient-CapsNet."""

import keras
from keras import ops

from keras_capsules.ops import efficient_squash
from keras_capsules.validation import built_input_spec, positive_int


@keras.saving.register_keras_serializable(package="keras_capsules")
class DepthwisePrimaryCapsule(keras.layers.Layer):
    """Depthwise-convolution primary capsules of Efficient-CapsNet.

    A depthwise convolution whose kernel covers the whole input grid
    (`valid` padding), so each of the `num_capsules * capsule_dim` input
    channels gives one number; these are grouped into capsules and
    squashed with `efficient_squash`:

    ```
    y[b, c] = sum_{h, w} x[b, h, w, c] * k[h, w, c] + bias[c]
    capsules = efficient_squash(reshape(y, (batch, num_capsules, capsule_dim)))
    ```

    Args:
        num_capsules: number of primary capsules (16 in the paper).
        capsule_dim: their dimension (8 in the paper); the input must have
            `num_capsules * capsule_dim` channels.
        kernel_initializer, bias_initializer: initializers of the
            depthwise kernel `k` `(height, width, channels)` and the bias
            `(channels,)`.
        kernel_regularizer, bias_regularizer: optional regularizers of them.
        kernel_constraint, bias_constraint: optional constraints on them.

    Call arguments:
        inputs: a feature map `(batch, height, width, num_capsules *
            capsule_dim)` of known height and width.

    Returns:
        capsules `(batch, num_capsules, capsule_dim)`, of length < 1.

    Example:

    >>> layer = keras_capsules.layers.DepthwisePrimaryCapsule(4, 2)
    >>> capsules = layer(keras.random.normal((2, 5, 5, 8)))
    >>> tuple(capsules.shape), tuple(layer.kernel.shape)
    ((2, 4, 2), (5, 5, 8))

    Reference: Mazzia, Salvetti & Chiaberge, "Efficient-CapsNet: capsule
    network with self-attention routing", Scientific Reports 11, 2021.
    """

    def __init__(
        self,
        num_capsules,
        capsule_dim,
        kernel_initializer="he_normal",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_capsules = positive_int(num_capsules, "num_capsules")
        self.capsule_dim = positive_int(capsule_dim, "capsule_dim")
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self.input_spec = keras.layers.InputSpec(ndim=4)

    def build(self, input_shape):
        channels = self.num_capsules * self.capsule_dim
        # The rank is the input spec's (checked when the layer is called).
        if None in input_shape[1:] or input_shape[-1] != channels:
            raise ValueError(
                "DepthwisePrimaryCapsule expects a known (height, width, "
                f"{channels}) feature map. Received: input_shape={tuple(input_shape)}"
            )
        # The kernel covers the grid: a built layer refuses other sizes.
        self.input_spec = built_input_spec(input_shape, (1, 2, -1))
        self.kernel = self.add_weight(
            name="kernel",
            shape=tuple(input_shape[1:]),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.bias = self.add_weight(
            name="bias",
            shape=(channels,),
            initializer=self.bias_initializer,
            regularizer=self.bias_regularizer,
            constraint=self.bias_constraint,
        )

    def call(self, inputs):
        # A broadcast product and sum, not einsum("bhwc,hwc->bc"): TensorFlow
        # lowers that einsum to a BatchMatMulV2 the TFLite converter rejects.
        y = ops.sum(inputs * self.kernel, axis=(1, 2)) + self.bias
        return efficient_squash(ops.reshape(y, (-1, self.num_capsules, self.capsule_dim)))

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_capsules, self.capsule_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_capsules=self.num_capsules,
            capsule_dim=self.capsule_dim,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
            kernel_regularizer=keras.regularizers.serialize(self.kernel_regularizer),
            bias_regularizer=keras.regularizers.serialize(self.bias_regularizer),
            kernel_constraint=keras.constraints.serialize(self.kernel_constraint),
            bias_constraint=keras.constraints.serialize(self.bias_constraint),
        )
        return config
