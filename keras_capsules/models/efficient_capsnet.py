"""Efficient-CapsNet of Mazzia et al. (2021)."""

import keras
from keras import ops

from keras_capsules import routing
from keras_capsules.convert import escvm
from keras_capsules.layers.auto_conv2d import AutoConv2D
from keras_capsules.layers.capsule import Capsule
from keras_capsules.layers.depthwise_primary_capsule import DepthwisePrimaryCapsule
from keras_capsules.models.capsule_classifier import CapsuleClassifier
from keras_capsules.models.efficient_capsnet_presets import EFFICIENT_CAPSNET_PRESETS
from keras_capsules.models.presets import register_presets
from keras_capsules.validation import one_of

# architecture -> (input_shape, num_classes, decoder_units) defaults.
ARCHITECTURES = {
    "mnist": ((28, 28, 1), 10, (512, 1024)),
    "smallnorb": ((48, 48, 2), 5, (64, 128, 128)),
}


@keras.saving.register_keras_serializable(package="keras_capsules")
class EfficientCapsNet(CapsuleClassifier):
    """Efficient-CapsNet: a small conv stem, depthwise primary capsules,
    self-attention routing; the authors' MNIST or smallNORB architecture.

    `architecture="mnist"` (the default; Mazzia et al.'s MNIST model):

    ```
    images -> [Conv2D(32, 5), Conv2D(64, 3), Conv2D(64, 3),
               Conv2D(128, 3, strides=2)], each + BatchNorm + ReLU
               (`AutoConv2D`: each backend's fastest convolution form)
           -> DepthwisePrimaryCapsule(16, 8)
           -> Capsule(num_classes, 16, router=SelfAttentionRouting())
           -> lengths (class scores)
    decoder: mask(poses, label) -> Dense(512, relu) -> Dense(1024, relu)
             -> Dense(prod(input_shape), sigmoid) -> reshape
    ```

    `architecture="smallnorb"` (their smallNORB model,
    `models/efficient_capsnet_graph_smallnorb.py`; 48x48x2 stereo images
    standardised per image and channel, 5 classes by default):

    ```
    images -> [Conv2D(32, 7, strides=2), Conv2D(64, 3), Conv2D(64, 3),
               Conv2D(128, 3, strides=2)], valid, he_normal, each
               + LeakyReLU(0.3) + instance normalization
               (GroupNormalization(groups=-1, epsilon=1e-3): each channel
               of each image over height and width; `AutoConv2D`)
           -> DepthwisePrimaryCapsule(16, 8) -> Capsule(num_classes, 16,
              router=SelfAttentionRouting()) -> lengths
    decoder (their generator; decoder_units = its filters (64, 128, 128)):
        mask(poses, label) -> Dense(h0 * w0) -> reshape (h0, w0, 1)
        -> [UpSampling2D(2, bilinear) -> Conv2D(f, 3, valid, leaky_relu(0.2))]
           for f in decoder_units
        -> Conv2D(channels, 3, valid, decoder_activation)   # (8 h0 - 16) = height
    ```

    so images' height and width must be multiples of 8 and at least 24
    (h0 = w0 = 8 for 48x48). `load_authors_weights(path)` sets every
    weight from the file the authors released; with them the model gives
    their model's outputs within float32 rounding
    (`tests/fixtures/README.md`).

    Loss: the compiled loss (`MarginLoss()` if none) plus
    `reconstruction_weight` (0.392, the authors' `lmd_gen`) times the mean
    squared reconstruction error, the decoder seeing the capsules masked by
    the true label (see `CapsuleClassifier`).

    Parameter count: the paper's 161,824 for MNIST counts the trainable
    weights without the decoder; `count_encoder_params()` returns exactly
    that (161,824 on MNIST; 162,400 with the 576 BatchNorm moving
    statistics). `count_params()` counts everything, decoder included
    (1,411,344 more on MNIST). smallNORB: 151,664 without the generator
    (the instance normalizations' 1,152 included), 229,570 more with it.

    Args:
        input_shape: image shape `(height, width, channels)`; `None`: the
            architecture's, `(28, 28, 1)` or `(48, 48, 2)`.
        num_classes: number of classes; `None`: the architecture's, 10 or 5.
        router: the router of the class capsules, or its name or config
            (`keras_capsules.routing.get`); default `SelfAttentionRouting()`.
        decoder_units: the hidden sizes of the decoder (`"mnist"`), or the
            filters of the generator's three upsampling convolutions
            (`"smallnorb"`); `None`: `(512, 1024)` or `(64, 128, 128)`.
        architecture: `"mnist"` or `"smallnorb"`.
        reconstruction, reconstruction_weight, decoder_activation,
            labels_per_image, **kwargs (`name`, `dtype`): as in
            `CapsuleClassifier`.

    Call arguments:
        images: `(batch, *input_shape)`.
        training: BatchNormalization's mode.

    Returns:
        class scores `(batch, num_classes)` (capsule lengths).

    Example (16x16 images; the defaults are MNIST's; smallNORB's defaults):

    >>> model = keras_capsules.models.EfficientCapsNet((16, 16, 1), 3, decoder_units=(8,))
    >>> images = np.random.default_rng(0).uniform(size=(2, 16, 16, 1))
    >>> tuple(model(images).shape), model.count_encoder_params()
    ((2, 3), 138160)
    >>> keras_capsules.models.efficient_capsnet.ARCHITECTURES["smallnorb"]  # shape, classes, units
    ((48, 48, 2), 5, (64, 128, 128))

    Reference: Mazzia, Salvetti & Chiaberge, "Efficient-CapsNet: capsule
    network with self-attention routing", Scientific Reports 11, 2021;
    code and weights: github.com/EscVM/Efficient-CapsNet (Apache-2.0).
    """

    # compile(optimizer="auto"): Adam at Mazzia et al.'s rate.
    default_learning_rate = 5e-4

    @property
    def xla_on_cpu(self):
        # TensorFlow's CPU, a train step of 16 (2 cores): the MNIST model is
        # faster with XLA, the smallNORB one slower (0.46-0.51 s against 0.26 s).
        return self.architecture == "mnist"

    def __init__(
        self,
        input_shape=None,
        num_classes=None,
        router=None,
        reconstruction=True,
        reconstruction_weight=0.392,
        decoder_units=None,
        decoder_activation="sigmoid",
        architecture="mnist",
        **kwargs,
    ):
        self.architecture = one_of(architecture, tuple(ARCHITECTURES), "architecture")
        default_shape, default_classes, default_units = ARCHITECTURES[self.architecture]
        super().__init__(
            default_shape if input_shape is None else input_shape,
            default_classes if num_classes is None else num_classes,
            reconstruction=reconstruction,
            reconstruction_weight=reconstruction_weight,
            decoder_units=default_units if decoder_units is None else decoder_units,
            decoder_activation=decoder_activation,
            **kwargs,
        )
        images = keras.Input(self.image_shape)
        if self.architecture == "mnist":
            x = self._mnist_stem(images)
        else:
            x = self._smallnorb_stem(images)
        dtype = self.dtype_policy
        x = DepthwisePrimaryCapsule(16, 8, name="primary", dtype=dtype)(x)
        self.set_capsules(
            keras.Model(images, x, name="features"),
            Capsule(
                self.num_classes,
                16,
                router="self_attention" if router is None else router,
                kernel_initializer="he_normal",
                name="class_capsules",
                dtype=dtype,
            ),
        )

    def _mnist_stem(self, x):
        dtype = self.dtype_policy
        for i, (filters, kernel, stride) in enumerate(
            [(32, 5, 1), (64, 3, 1), (64, 3, 1), (128, 3, 2)]
        ):
            # A Conv2D computed as `implementation="auto"` picks (see
            # keras_capsules.conv.resolve_implementation).
            x = AutoConv2D(
                filters,
                kernel,
                strides=stride,
                kernel_initializer="he_normal",
                name=f"conv{i + 1}",
                dtype=dtype,
            )(x)
            x = keras.layers.BatchNormalization(name=f"bn{i + 1}", dtype=dtype)(x)
            x = keras.layers.ReLU(name=f"relu{i + 1}", dtype=dtype)(x)
        return x

    def _smallnorb_stem(self, x):
        height, width = self.image_shape[:2]
        if min(height, width) < 24:
            raise ValueError(
                'EfficientCapsNet(architecture="smallnorb") needs images of at least '
                f"24x24 (its four valid convolutions). Received: input_shape={self.image_shape}"
            )
        dtype = self.dtype_policy
        for i, (filters, kernel, stride) in enumerate(
            [(32, 7, 2), (64, 3, 1), (64, 3, 1), (128, 3, 2)]
        ):
            x = AutoConv2D(
                filters,
                kernel,
                strides=stride,
                kernel_initializer="he_normal",
                name=f"conv{i + 1}",
                dtype=dtype,
            )(x)
            x = keras.layers.LeakyReLU(0.3, name=f"leaky_relu{i + 1}", dtype=dtype)(x)
            # Instance normalization (tfa.layers.InstanceNormalization): each
            # channel of each image over (height, width), epsilon 1e-3; the
            # authors' random_uniform initializers.
            x = keras.layers.GroupNormalization(
                groups=-1,
                epsilon=1e-3,
                beta_initializer="random_uniform",
                gamma_initializer="random_uniform",
                name=f"norm{i + 1}",
                dtype=dtype,
            )(x)
        return x

    def _build_decoder(self, capsule_dim):
        if self.architecture == "mnist":
            return super()._build_decoder(capsule_dim)
        # The authors' generator: Dense -> (h0, w0, 1) -> [bilinear x2 ->
        # Conv 3x3 valid, leaky_relu(0.2)] x 3 -> Conv 3x3 valid: size 8 h0 - 16.
        height, width, channels = self.image_shape
        if height % 8 or width % 8 or len(self.decoder_units) != 3:
            raise ValueError(
                'The decoder of EfficientCapsNet(architecture="smallnorb") makes images '
                "whose height and width are multiples of 8, with 3 upsampling "
                f"convolutions. Received: input_shape={self.image_shape}, "
                f"decoder_units={self.decoder_units}"
            )
        start = ((height + 16) // 8, (width + 16) // 8)
        dtype = self.dtype_policy
        layers = [
            keras.Input((self.num_classes * capsule_dim,)),
            keras.layers.Dense(start[0] * start[1], name="dense", dtype=dtype),
            keras.layers.Reshape((*start, 1), name="reshape", dtype=dtype),
        ]
        for i, filters in enumerate(self.decoder_units, start=1):
            layers += [
                keras.layers.UpSampling2D(
                    2, interpolation="bilinear", name=f"upsampling{i}", dtype=dtype
                ),
                AutoConv2D(filters, 3, activation="leaky_relu", name=f"conv{i}", dtype=dtype),
            ]
        layers.append(
            AutoConv2D(channels, 3, activation=self.decoder_activation, name="conv4", dtype=dtype)
        )
        return keras.Sequential(layers, name="decoder")

    def count_encoder_params(self):
        """Trainable parameters without the decoder: the paper's count."""
        weights = self.features.trainable_weights + self.class_capsules.trainable_weights
        return int(sum(ops.size(w) for w in weights))

    def get_config(self):
        config = super().get_config()
        config.update(
            router=routing.serialize(self.class_capsules.router), architecture=self.architecture
        )
        return config

    def load_authors_weights(self, path):
        """Sets every weight from the authors' released smallNORB weights file.

        `path`: the Keras 2 weights file Mazzia et al. released,
        `bin/efficient_capsnet_SMALLNORB.h5` of EscVM/Efficient-CapsNet
        (commit 4b337f5, Apache-2.0), read and mapped by
        `keras_capsules.convert.escvm.load_authors_weights`: the encoder
        (`CapsNet/...`) and, when the model has a decoder, the generator
        (`Generator/...`). The model must be
        `EfficientCapsNet(architecture="smallnorb")` with its defaults
        (48x48x2 images, 5 classes, `SelfAttentionRouting` with priors);
        every name and shape is checked before any weight is set.

        Raises:
            ValueError: another architecture, a key missing from the file or
                unexpected, or a shape that is not the model's.
        """
        if self.architecture != "smallnorb":
            raise ValueError(
                "load_authors_weights loads the authors' smallNORB model: build it "
                'with EfficientCapsNet(architecture="smallnorb"). Received: '
                f"architecture={self.architecture!r}"
            )
        escvm.load_authors_weights(self, path)


register_presets(EFFICIENT_CAPSNET_PRESETS, EfficientCapsNet)
