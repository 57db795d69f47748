"""Capsules on top of any feature extractor."""

import keras

from keras_capsules import routing
from keras_capsules.layers.capsule import Capsule
from keras_capsules.layers.primary_capsule import PrimaryCapsule
from keras_capsules.models.capsule_classifier import CapsuleClassifier
from keras_capsules.validation import int_tuple, positive_int


@keras.saving.register_keras_serializable(package="keras_capsules")
class CapsuleImageClassifier(CapsuleClassifier):
    """Primary capsules, routed class capsules and the margin loss on any backbone.

    ```
    images -> backbone (any Keras model or layer: images -> (h, w, c) map)
           -> PrimaryCapsule(primary_capsules, primary_dim, primary_kernel_size)
              (h' * w' * primary_capsules capsules, squashed)
           -> Capsule(num_classes, capsule_dim, router) -> lengths (scores)
    loss:  compiled loss (MarginLoss() if none)
           + reconstruction_weight * mean((decoder(mask(poses, y)) - x)^2)
             (only with reconstruction=True)
    ```

    The backbone is, for example,
    `keras.applications.ResNet50(include_top=False, weights=None)` or a
    keras-hub backbone, and is trained with the capsules (freeze it with
    `backbone.trainable = False`). It is saved inside the `.keras` file
    (its config and weights), so it must itself be serializable: a
    Functional or Sequential model of built-in layers, or registered
    custom layers. The reconstruction decoder (`CapsuleClassifier`) is off by
    default: on large RGB images its last Dense layer alone has
    `decoder_units[-1] * height * width * channels` weights.

    Args:
        backbone: a `keras.Model` or `keras.layers.Layer` mapping
            `(batch, *input_shape)` images to a `(batch, h, w, c)` map.
        num_classes: number of classes (class capsules).
        input_shape: image shape `(height, width, channels)`; default the
            backbone's own input shape, which must then be fully known.
        router: the router of the class capsules, or its name or config
            (`keras_capsules.routing.get`); default `DynamicRouting()` (3
            iterations).
        primary_capsules: primary capsule types per position.
        primary_dim: dimension of the primary capsules.
        capsule_dim: dimension of the class capsules.
        primary_kernel_size, primary_strides: the primary capsules' conv.
        reconstruction: build the decoder and add its loss (off by
            default, see above).
        reconstruction_weight, decoder_units, decoder_activation,
            labels_per_image: as in
            `CapsuleClassifier`.
        **kwargs: `keras.Model` arguments; `dtype` is the policy of the
            layers the model adds (the backbone keeps its own).

    Call arguments:
        images: `(batch, *input_shape)`.
        training: whether the layers (the backbone's too) run in training
            mode.

    Returns:
        class scores `(batch, num_classes)`: the lengths of the class
        capsules.

    Example (a tiny backbone; `keras.applications.ResNet50(include_top=False,
    weights=None, input_shape=(224, 224, 3))` is used the same way):

    >>> backbone = keras.Sequential([keras.Input((12, 12, 3)),
    ...                              keras.layers.Conv2D(8, 3, strides=2)])
    >>> model = keras_capsules.models.CapsuleImageClassifier(
    ...     backbone, 5, primary_capsules=4, primary_dim=4, capsule_dim=8)
    >>> model.features.output_shape        # 5 x 5 positions x 4 capsule types
    (None, 100, 4)
    >>> tuple(model(np.zeros((2, 12, 12, 3))).shape)
    (2, 5)

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017 (primary and routed class capsules, margin loss).
    """

    # compile(optimizer="auto"): Adam at its usual rate.
    default_learning_rate = 1e-3

    def __init__(
        self,
        backbone,
        num_classes,
        input_shape=None,
        router=None,
        primary_capsules=32,
        primary_dim=8,
        capsule_dim=16,
        primary_kernel_size=1,
        primary_strides=1,
        reconstruction=False,
        reconstruction_weight=0.392,
        decoder_units=(512, 1024),
        decoder_activation="sigmoid",
        **kwargs,
    ):
        if isinstance(backbone, dict):  # from_config
            backbone = keras.saving.deserialize_keras_object(backbone)
        if not isinstance(backbone, keras.layers.Layer):
            raise ValueError(
                "`backbone` must be a keras.Model or keras.layers.Layer. "
                f"Received: backbone={backbone!r}"
            )
        if input_shape is None:
            input_shape = _known_input_shape(backbone)
        super().__init__(
            input_shape,
            num_classes,
            reconstruction=reconstruction,
            reconstruction_weight=reconstruction_weight,
            decoder_units=decoder_units,
            decoder_activation=decoder_activation,
            **kwargs,
        )
        self.backbone = backbone
        self.primary_capsules = positive_int(primary_capsules, "primary_capsules")
        self.primary_dim = positive_int(primary_dim, "primary_dim")
        self.capsule_dim = positive_int(capsule_dim, "capsule_dim")
        self.primary_kernel_size = int_tuple(primary_kernel_size, 2, "primary_kernel_size")
        self.primary_strides = int_tuple(primary_strides, 2, "primary_strides")
        # The features model starts at the backbone's feature map, so that
        # the backbone is one layer of this model (not also one inside
        # `features`: `summary()` would count its weights twice).
        x = backbone(keras.Input(self.image_shape))
        if len(x.shape) != 4:
            raise ValueError(
                "`backbone` must map images to a (batch, height, width, channels) "
                f"feature map. Received: backbone output shape {tuple(x.shape)} for "
                f"input_shape={self.image_shape}"
            )
        feature_map = keras.Input(x.shape[1:])
        x = PrimaryCapsule(
            self.primary_capsules,
            self.primary_dim,
            self.primary_kernel_size,
            strides=self.primary_strides,
            name="primary",
            dtype=self.dtype_policy,
        )(feature_map)
        self.set_capsules(
            keras.Model(feature_map, x, name="features"),
            Capsule(
                self.num_classes,
                self.capsule_dim,
                router=router,
                name="class_capsules",
                dtype=self.dtype_policy,
            ),
        )

    def child_capsules(self, images, training=None):
        return self.features(self.backbone(images, training=training), training=training)

    def get_config(self):
        config = super().get_config()
        config.update(
            backbone=keras.saving.serialize_keras_object(self.backbone),
            router=routing.serialize(self.class_capsules.router),
            primary_capsules=self.primary_capsules,
            primary_dim=self.primary_dim,
            capsule_dim=self.capsule_dim,
            primary_kernel_size=self.primary_kernel_size,
            primary_strides=self.primary_strides,
        )
        return config


def _known_input_shape(backbone):
    try:
        shape = tuple(backbone.input_shape[1:])
    except (AttributeError, ValueError):  # a layer, or a model without one input
        shape = None
    if shape is None or len(shape) != 3 or None in shape:
        raise ValueError(
            "Pass `input_shape=(height, width, channels)`: the backbone has no fully "
            f"known image input shape. Received: backbone input shape {shape}"
        )
    return shape
