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

    Example:

    >>> x = keras.Input((9, 9, 128))
    >>> DepthwisePrimaryCapsule(16, 8)(x).shape
    (None, 16, 8)

    Reference: Mazzia, Salvetti & Chiaberge, "Efficient-CapsNet: capsule
    network with self-attention routing", Scientific Reports 11, 2021.
    """

    def __init__(self, num_capsules, capsule_dim, kernel_initializer="he_normal", **kwargs):
        super().__init__(**kwargs)
        self.num_capsules = positive_int(num_capsules, "num_capsules")
        self.capsule_dim = positive_int(capsule_dim, "capsule_dim")
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        channels = self.num_capsules * self.capsule_dim
        if len(input_shape) != 4 or None in input_shape[1:] or input_shape[-1] != channels:
            raise ValueError(
                "DepthwisePrimaryCapsule expects a known (height, width, "
                f"{channels}) feature map. Received: input_shape={tuple(input_shape)}"
            )
        self.kernel = self.add_weight(
            name="kernel", shape=tuple(input_shape[1:]), initializer=self.kernel_initializer
        )
        self.bias = self.add_weight(name="bias", shape=(channels,), initializer="zeros")

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
        reconstruction: build the decoder and add the reconstruction loss.
        reconstruction_weight: weight of the mean squared error.
        decoder_units: hidden sizes of the decoder.
        decoder_activation: activation of the decoder output (`"sigmoid"`
            for images in [0, 1], `"linear"` for standardised images).

    Example:

    >>> model = keras_capsules.models.EfficientCapsNet((28, 28, 1), 10)
    >>> model.compile(optimizer=keras.optimizers.Adam(5e-4), metrics=["accuracy"])
    >>> model.fit(images, labels, batch_size=16)

    Reference: Mazzia, Salvetti & Chiaberge, "Efficient-CapsNet: capsule
    network with self-attention routing", Scientific Reports 11, 2021.
    """

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
        images = keras.Input(self.image_shape)
        x = images
        for i, (filters, kernel, stride) in enumerate(
            [(32, 5, 1), (64, 3, 1), (64, 3, 1), (128, 3, 2)]
        ):
            # StridedConv2D: Conv2D, computed as slices + one matmul where
            # XLA's CPU convolution is slow (JAX: 3x faster train step).
            x = StridedConv2D(
                filters, kernel, strides=stride, kernel_initializer="he_normal",
                name=f"conv{i + 1}",
            )(x)
            x = keras.layers.BatchNormalization(name=f"bn{i + 1}")(x)
            x = keras.layers.ReLU(name=f"relu{i + 1}")(x)
        x = DepthwisePrimaryCapsule(16, 8, name="primary")(x)
        self.features = keras.Model(images, x, name="features")
        router = SelfAttentionRouting() if router is None else router
        self.digit_capsules = Capsule(
            num_classes, 16, router=router, kernel_initializer="he_normal",
            name="digit_capsules",
        )
        self.digit_capsules.build(x.shape)
        if self.reconstruction:
            self.decoder = self._build_decoder(16)
        self.build((None, *self.image_shape))

    def count_encoder_params(self):
        """Trainable parameters without the decoder: the paper's count."""
        weights = self.features.trainable_weights + self.digit_capsules.trainable_weights
        return int(sum(ops.size(w) for w in weights))

    def get_config(self):
        config = super().get_config()
        config.update(router=serialize_router(self.digit_capsules.router))
        return config
