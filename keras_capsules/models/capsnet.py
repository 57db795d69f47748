"""The CapsNet of Sabour et al. (2017)."""

import keras

from keras_capsules import routing
from keras_capsules.layers.capsule import Capsule
from keras_capsules.layers.primary_capsule import PrimaryCapsule
from keras_capsules.models.capsule_classifier import CapsuleClassifier
from keras_capsules.validation import positive_int

# Sabour et al.'s code: see "Initialisation" in the CapsNet docstring.
_BIAS = keras.initializers.Constant(0.1)


def _truncated_normal(stddev):
    return keras.initializers.TruncatedNormal(stddev=stddev)


@keras.saving.register_keras_serializable(package="keras_capsules")
class CapsNet(CapsuleClassifier):
    """CapsNet with dynamic routing and a reconstruction decoder.

    ```
    images -> Conv2D(256, 9, relu) -> PrimaryCapsule(32, 8, 9, strides=2)
           -> Capsule(num_classes, 16, router)  -> lengths (class scores)
    decoder: mask(poses, label) -> Dense(512, relu) -> Dense(1024, relu)
             -> Dense(prod(input_shape), sigmoid) -> reshape
    ```

    The decoder sees the class capsules masked by the true label during
    training and evaluation (inside `compute_loss`) and by the longest
    capsule in `reconstruct(images)`. The loss is the compiled loss
    (`MarginLoss()` if none) plus `reconstruction_weight` times the mean
    squared reconstruction error; 0.392 = 0.0005 * 784, the paper's weight
    on the summed squared error, for MNIST. With the default arguments the
    model has 8,215,568 parameters (6,804,224 without the decoder), as in
    the paper.

    Initialisation follows the authors' code, not Keras's defaults: truncated
    normal kernels (std 0.05 for the ReLU conv, 0.01 for the primary
    capsules and the transforms `W`) and biases of 0.1. With Glorot kernels
    and zero biases the primary capsules start at length ~0.006 and the
    class capsules, squashed twice, at ~1e-8; their gradients then fall
    below Adam's epsilon and training stays at chance (measured on MNIST).

    Args:
        input_shape: image shape `(height, width, channels)`.
        num_classes: number of classes (class capsules).
        router: the router of the class capsules, or its name or config
            (`keras_capsules.routing.get`); default `DynamicRouting()` (3
            iterations).
        reconstruction, reconstruction_weight: the decoder and the weight
            of its loss, as in `CapsuleClassifier`.
        conv_filters: filters of the first convolution (256 in the paper).
        primary_capsules: primary capsule types (32).
        primary_dim: dimension of the primary capsules (8).
        capsule_dim: dimension of the class capsules (16).
        decoder_units, decoder_activation, labels_per_image, **kwargs
            (`name`, `dtype`): as
            in `CapsuleClassifier`.

    Call arguments:
        images: `(batch, *input_shape)`; `training` as for any model.

    Returns:
        the lengths of the class capsules, `(batch, num_classes)`.

    Example (a small CapsNet; the defaults are the paper's):

    >>> model = keras_capsules.models.CapsNet(
    ...     (20, 20, 1), num_classes=3, conv_filters=8, primary_capsules=2,
    ...     primary_dim=4, capsule_dim=4, decoder_units=(8,))
    >>> rng = np.random.default_rng(0)
    >>> images, labels = rng.uniform(size=(4, 20, 20, 1)), np.array([0, 1, 2, 0])
    >>> model.compile(optimizer="adam", metrics=["accuracy"])
    >>> history = model.fit(images, labels, batch_size=4, verbose=0)  # class ids
    >>> model.predict(images, verbose=0).shape                        # lengths
    (4, 3)

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017.
    """

    # compile(optimizer="auto"): Adam at Sabour et al.'s (TensorFlow's Adam default) rate.
    default_learning_rate = 1e-3

    def __init__(
        self,
        input_shape=(28, 28, 1),
        num_classes=10,
        router=None,
        reconstruction=True,
        reconstruction_weight=0.392,
        conv_filters=256,
        primary_capsules=32,
        primary_dim=8,
        capsule_dim=16,
        decoder_units=(512, 1024),
        decoder_activation="sigmoid",
        **kwargs,
    ):
        super().__init__(
            input_shape,
            num_classes,
            reconstruction=reconstruction,
            reconstruction_weight=reconstruction_weight,
            decoder_units=decoder_units,
            decoder_activation=decoder_activation,
            **kwargs,
        )
        self.conv_filters = positive_int(conv_filters, "conv_filters")
        self.primary_capsules = positive_int(primary_capsules, "primary_capsules")
        self.primary_dim = positive_int(primary_dim, "primary_dim")
        self.capsule_dim = positive_int(capsule_dim, "capsule_dim")
        dtype = self.dtype_policy
        images = keras.Input(self.image_shape)
        x = keras.layers.Conv2D(
            self.conv_filters,
            9,
            activation="relu",
            name="conv",
            dtype=dtype,
            kernel_initializer=_truncated_normal(0.05),
            bias_initializer=_BIAS,
        )(images)
        x = PrimaryCapsule(
            self.primary_capsules,
            self.primary_dim,
            9,
            strides=2,
            name="primary",
            dtype=dtype,
            kernel_initializer=_truncated_normal(0.01),
            bias_initializer=_BIAS,
        )(x)
        self.set_capsules(
            keras.Model(images, x, name="features"),
            Capsule(
                self.num_classes,
                self.capsule_dim,
                router=router,
                dtype=dtype,
                kernel_initializer=_truncated_normal(0.01),
                name="class_capsules",
            ),
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            router=routing.serialize(self.class_capsules.router),
            conv_filters=self.conv_filters,
            primary_capsules=self.primary_capsules,
            primary_dim=self.primary_dim,
            capsule_dim=self.capsule_dim,
        )
        return config
