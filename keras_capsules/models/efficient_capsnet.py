"""Efficient-CapsNet of Mazzia et al. (2021)."""

import keras
from keras import ops

from keras_capsules.layers.auto_conv2d import StridedConv2D
from keras_capsules.layers.capsule import Capsule
from keras_capsules.layers.depthwise_primary_capsule import DepthwisePrimaryCapsule
from keras_capsules.models.base import CapsuleClassifier
from keras_capsules.routing.layer_router import serialize_router
from keras_capsules.routing.self_attention import SelfAttentionRouting


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
            input_shape,
            num_classes,
            reconstruction,
            reconstruction_weight,
            decoder_units,
            decoder_activation,
            **kwargs,
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
                filters,
                kernel,
                strides=stride,
                kernel_initializer="he_normal",
                name=f"conv{i + 1}",
                dtype=dtype,
            )(x)
            x = keras.layers.BatchNormalization(name=f"bn{i + 1}", dtype=dtype)(x)
            x = keras.layers.ReLU(name=f"relu{i + 1}", dtype=dtype)(x)
        x = DepthwisePrimaryCapsule(16, 8, name="primary", dtype=dtype)(x)
        router = SelfAttentionRouting(dtype=dtype) if router is None else router
        self.set_capsules(
            keras.Model(images, x, name="features"),
            Capsule(
                self.num_classes,
                16,
                router=router,
                kernel_initializer="he_normal",
                name="digit_capsules",
                dtype=dtype,
            ),
        )

    def count_encoder_params(self):
        """Trainable parameters without the decoder: the paper's count."""
        weights = self.features.trainable_weights + self.digit_capsules.trainable_weights
        return int(sum(ops.size(w) for w in weights))

    def get_config(self):
        config = super().get_config()
        config.update(router=serialize_router(self.digit_capsules.router))
        return config
