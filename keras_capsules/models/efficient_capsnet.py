"""Efficient-CapsNet of Mazzia et al. (2021)."""

import keras
from keras import ops

from keras_capsules.layers._common import serialize_router
from keras_capsules.layers.capsule import Capsule
from keras_capsules.layers.strided_conv import StridedConv2D
from keras_capsules.models.base import CapsuleClassifier
from keras_capsules.ops import efficient_squash
from keras_capsules.routing.self_attention import SelfAttentionRouting
from keras_capsules.validation import positive_int


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

    >>> layer = keras_capsules.models.DepthwisePrimaryCapsule(4, 2)
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

    def build(self, input_shape):
        channels = self.num_capsules * self.capsule_dim
        if len(input_shape) != 4 or None in input_shape[1:] or input_shape[-1] != channels:
            raise ValueError(
                "DepthwisePrimaryCapsule expects a known (height, width, "
                f"{channels}) feature map. Received: input_shape={tuple(input_shape)}"
            )
        self.kernel = self.add_weight(
            name="kernel", shape=tuple(input_shape[1:]), initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer, constraint=self.kernel_constraint,
        )
        self.bias = self.add_weight(
            name="bias", shape=(channels,), initializer=self.bias_initializer,
            regularizer=self.bias_regularizer, constraint=self.bias_constraint,
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


@keras.saving.register_keras_serializable(package="keras_capsules")
class EfficientCapsNet(CapsuleClassifier):
    """Efficient-CapsNet: a small conv stem, depthwise primary capsules,
    self-attention routing.

    ```
    images -> [Conv2D(32, 5), Conv2D(64, 3), Conv2D(64, 3),
               Conv2D(128, 3, strides=2)], each + BatchNorm + ReLU
               (`StridedConv2D`: slices + matmul where XLA's CPU conv is slow)
           -> DepthwisePrimaryCapsule(16, 8)
           -> Capsule(num_classes, 16, router=SelfAttentionRouting())
           -> lengths (class scores)
    decoder: mask(poses, label) -> Dense(512, relu) -> Dense(1024, relu)
             -> Dense(prod(input_shape), sigmoid) -> reshape
    ```

    Loss: the compiled loss (`MarginLoss()` if none) plus
    `reconstruction_weight` (0.392) times the mean squared reconstruction
    error, the decoder seeing the capsules masked by the true label (see
    `CapsuleClassifier`).

    Parameter count: the paper's 161,824 for MNIST counts the trainable
    weights without the decoder; `count_encoder_params()` returns exactly
    that (161,824 on MNIST; 162,400 with the 576 BatchNorm moving
    statistics). `count_params()` counts everything, decoder included
    (1,411,344 more on MNIST).

    Args:
        input_shape: image shape `(height, width, channels)`.
        num_classes: number of classes.
        router: the router of the class capsules, or its name or config
            (`keras_capsules.routing.get`); default `SelfAttentionRouting()`.
        reconstruction, reconstruction_weight, decoder_units,
            decoder_activation, labels_per_image, **kwargs (`name`,
            `dtype`): as in
            `CapsuleClassifier`.

    Call arguments:
        images: `(batch, *input_shape)`.
        training: BatchNormalization's mode.

    Returns:
        class scores `(batch, num_classes)` (capsule lengths).

    Example (16x16 images; the defaults are MNIST's):

    >>> model = keras_capsules.models.EfficientCapsNet((16, 16, 1), 3, decoder_units=(8,))
    >>> images = np.random.default_rng(0).uniform(size=(2, 16, 16, 1))
    >>> tuple(model(images).shape), model.count_encoder_params()
    ((2, 3), 138160)

    Reference: Mazzia, Salvetti & Chiaberge, "Efficient-CapsNet: capsule
    network with self-attention routing", Scientific Reports 11, 2021.
    """

    # compile(optimizer="auto"): Adam at Mazzia et al.'s rate.
    default_learning_rate = 5e-4

    def __init__(
        self,
        input_shape=(28, 28, 1),
        num_classes=10,
        router=None,
        reconstruction=True,
        reconstruction_weight=0.392,
        decoder_units=(512, 1024),
        decoder_activation="sigmoid",
        **kwargs,
    ):
        super().__init__(
            input_shape, num_classes, reconstruction, reconstruction_weight,
            decoder_units, decoder_activation, **kwargs,
        )
        dtype = self.dtype_policy
        images = keras.Input(self.image_shape)
        x = images
        for i, (filters, kernel, stride) in enumerate(
            [(32, 5, 1), (64, 3, 1), (64, 3, 1), (128, 3, 2)]
        ):
            # StridedConv2D: a Conv2D computed as `implementation="auto"`
            # picks (see keras_capsules.conv.resolve_implementation).
            x = StridedConv2D(
                filters, kernel, strides=stride, kernel_initializer="he_normal",
                name=f"conv{i + 1}", dtype=dtype,
            )(x)
            x = keras.layers.BatchNormalization(name=f"bn{i + 1}", dtype=dtype)(x)
            x = keras.layers.ReLU(name=f"relu{i + 1}", dtype=dtype)(x)
        x = DepthwisePrimaryCapsule(16, 8, name="primary", dtype=dtype)(x)
        router = SelfAttentionRouting(dtype=dtype) if router is None else router
        self.set_capsules(keras.Model(images, x, name="features"), Capsule(
            self.num_classes, 16, router=router, kernel_initializer="he_normal",
            name="digit_capsules", dtype=dtype,
        ))

    def count_encoder_params(self):
        """Trainable parameters without the decoder: the paper's count."""
        weights = self.features.trainable_weights + self.digit_capsules.trainable_weights
        return int(sum(ops.size(w) for w in weights))

    def get_config(self):
        config = super().get_config()
        config.update(router=serialize_router(self.digit_capsules.router))
        return config
