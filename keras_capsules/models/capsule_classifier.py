"""Capsule classifiers whose loss adds a label-masked reconstruction term."""

import keras
import numpy as np
from keras import ops

from keras_capsules.deprecation import renamed
from keras_capsules.labels import one_hot
from keras_capsules.layers.length import Length
from keras_capsules.layers.mask import Mask
from keras_capsules.losses import MarginLoss
from keras_capsules.models.capsule_model import CapsuleModel
from keras_capsules.validation import non_negative_float, positive_int


class CapsuleClassifier(CapsuleModel):
    """Base of the capsule classifiers: class scores out, reconstruction in the loss.

    The contract of `keras_capsules.models.CapsuleModel` holds: `model(images)`,
    `predict` and `export` give the class scores, the lengths of the class
    capsules, `(batch, num_classes)`; `model(images, return_poses=True)`
    gives `(scores, poses (batch, num_classes, capsule_dim))`, which is
    what `fit` and `evaluate` hand to the loss. The loss decodes the poses
    of that same forward pass, masked with the true labels `y`, and adds

    ```
    loss = compiled_loss(one_hot(y), scores)  # MarginLoss() with loss="auto"
           + reconstruction_weight * mean((decoder(mask(poses, y)) - x)^2)
    ```

    Training needs no second input: `fit(images, labels)`, labels as class
    ids or one-hot. The compiled metrics see the scores. Called by hand
    with the scores only, `compute_loss(x, y, model(x))` encodes `x` again
    for the poses.

    Several objects per image (`labels_per_image=k`, e.g. MultiMNIST's two
    overlapping digits): labels are `k` class ids per image; the margin
    loss has `k` ones in `T`, the metric `"auto"` is
    `keras_capsules.metrics.LabelSetAccuracy(k)`, and with a decoder `y`
    is a dict `{"labels": (batch, k) ids, "images": (batch, k, height,
    width, channels)}`, each object alone: each is reconstructed from its
    own capsule and the `k` errors are added (Sabour et al. section 6).

    `compile(optimizer="auto", loss="auto", metrics="auto")`: Adam with
    `default_learning_rate`, `MarginLoss()`, accuracy.
    `compile(jit_compile="auto")`, the default, also turns XLA on with
    TensorFlow on CPU where `xla_on_cpu` (CapsNet and the MNIST
    Efficient-CapsNet train 1.2-1.7x faster with it), except
    with `run_eagerly=True` or under a `tf.distribute` strategy; pass
    `jit_compile=False` to opt out.

    Dtype policy: the model's `dtype` (a policy name such as
    `"mixed_float16"`, default the global policy) is passed to every layer
    it builds, and saved in `get_config`, so a model keeps its policy
    after a `.keras` round trip whatever the global policy is then.

    Subclasses pass the base arguments to `__init__` by keyword, then
    call `self.set_capsules(features, class_capsules)` with `features` (a
    model: images -> child capsules `(batch, children, dim)`, taking
    `training`; a subclass that overrides `child_capsules` may feed it
    something else, as `CapsuleImageClassifier` feeds it the backbone's
    feature map) and `class_capsules` (a `keras_capsules.layers.Capsule` with one
    capsule per class), each of their layers made with
    `dtype=self.dtype_policy`; they extend `get_config`. `child_capsules`
    and `encode` may be overridden; `call`, `train_step`, `test_step`,
    `compute_loss` and `compute_metrics` should not.

    Args:
        input_shape: image shape `(height, width, channels)`.
        num_classes: number of classes (class capsules).
        reconstruction: build the decoder and add the reconstruction loss.
        reconstruction_weight: weight of the mean squared error, `>= 0`.
        decoder_units: hidden sizes of the decoder (ReLU `Dense` layers).
        decoder_activation: activation of the decoder output: `"sigmoid"`
            for images in [0, 1], `"linear"` for standardised images.
        labels_per_image: objects (distinct classes) per image, `>= 1`.
        **kwargs: `keras.Model` arguments (`name`, `dtype`, ...).

    Call arguments:
        images: `(batch, height, width, channels)`.
        training: whether the layers run in training mode.
        return_poses: `True` for `(scores, poses)`; `None`: only inside
            `fit`/`evaluate`'s steps and `returning_poses()`.

    Returns:
        class scores `(batch, num_classes)`, the lengths of the class
        capsules, or `(scores, poses (batch, num_classes, capsule_dim))`.

    Example:

    >>> class TinyCapsNet(keras_capsules.models.CapsuleClassifier):
    ...     def __init__(self, **kwargs):
    ...         super().__init__((12, 12, 1), 3, decoder_units=(8,), **kwargs)
    ...         images = keras.Input(self.image_shape)
    ...         children = keras_capsules.layers.PrimaryCapsule(
    ...             2, 4, 5, strides=2, dtype=self.dtype_policy)(images)
    ...         self.set_capsules(keras.Model(images, children), keras_capsules.layers.Capsule(
    ...             3, 6, dtype=self.dtype_policy, name="class_capsules"))
    >>> model = TinyCapsNet()
    >>> images = np.random.default_rng(0).uniform(size=(2, 12, 12, 1))
    >>> tuple(model(images).shape), tuple(model.reconstruct(images).shape)
    ((2, 3), (2, 12, 12, 1))

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017 (margin loss and the label-masked reconstruction).
    """

    def __init__(
        self,
        input_shape,
        num_classes,
        reconstruction=True,
        reconstruction_weight=0.392,
        decoder_units=(512, 1024),
        decoder_activation="sigmoid",
        labels_per_image=1,
        **kwargs,
    ):
        super().__init__(input_shape, num_classes, labels_per_image=labels_per_image, **kwargs)
        self.reconstruction = bool(reconstruction)
        self.reconstruction_weight = non_negative_float(
            reconstruction_weight, "reconstruction_weight"
        )
        if not isinstance(decoder_units, (list, tuple)):
            raise ValueError(
                "`decoder_units` must be a sequence of positive integers (the hidden "
                f"sizes, e.g. (512, 1024)). Received: decoder_units={decoder_units!r}"
            )
        self.decoder_units = tuple(positive_int(u, "decoder_units") for u in decoder_units)
        activation = keras.activations.get(decoder_activation)  # checks the name
        # A name stays a name: `serialize` would import TensorFlow (where it is
        # installed) into every torch and JAX process, ~250 MiB of RSS.
        self.decoder_activation = (
            decoder_activation
            if isinstance(decoder_activation, str)
            else keras.activations.serialize(activation)
        )
        self.scores = Length(name="scores", dtype=self.dtype_policy)
        self.mask = Mask(name="mask", dtype=self.dtype_policy)
        self.reconstruction_loss = keras.losses.MeanSquaredError()

    def set_capsules(self, features, class_capsules=None, **kwargs):
        """Sets `self.features` and `self.class_capsules` (built for the
        features' output), the decoder when `self.reconstruction`, and
        builds the model: the end of a subclass's `__init__`.

        `digit_capsules=` is the 0.2.0 name of `class_capsules=` (it goes
        in 0.4.0), and `self.digit_capsules` stays an alias of
        `self.class_capsules` until then: files saved by 0.2.0 keep their
        weights under that name, and load through it."""
        class_capsules = renamed(
            kwargs, "digit_capsules", "class_capsules", class_capsules, "set_capsules"
        )
        if kwargs:
            raise ValueError(f"Unknown arguments of set_capsules. Received: {sorted(kwargs)}")
        if class_capsules is None:
            raise ValueError(
                "`class_capsules` must be a capsule layer with one capsule per "
                "class. Received: class_capsules=None"
            )
        self.features = features
        self.class_capsules = class_capsules
        # The 0.2.0 name, a second reference to the same layer: Keras saves
        # the layer once, under `class_capsules` (the first name), and a
        # 0.2.0 file's weights, saved under `digit_capsules`, load through it.
        self.digit_capsules = class_capsules
        class_capsules.build(features.output.shape)
        # Called symbolically, so that `summary()` shows them built, with
        # their output shapes.
        poses = keras.KerasTensor(class_capsules.compute_output_shape(features.output.shape))
        self.scores(poses)
        self.mask(poses)
        if self.reconstruction:
            self.decoder = self._build_decoder(class_capsules.capsule_dim)
        self.build((None, *self.image_shape))

    def _build_decoder(self, capsule_dim):
        dtype = self.dtype_policy
        layers = [keras.Input((self.num_classes * capsule_dim,))]
        layers += [
            keras.layers.Dense(u, activation="relu", dtype=dtype) for u in self.decoder_units
        ]
        layers += [
            keras.layers.Dense(
                int(np.prod(self.image_shape)), activation=self.decoder_activation, dtype=dtype
            ),
            keras.layers.Reshape(self.image_shape, dtype=dtype),
        ]
        return keras.Sequential(layers, name="decoder")

    def child_capsules(self, images, training=None):
        """The child capsules `(batch, children, dim)` of the class capsules."""
        return self.features(images, training=training)

    def encode(self, images, training=None):
        """Class-capsule poses `(batch, num_classes, capsule_dim)`."""
        return self.class_capsules(self.child_capsules(images, training=training))

    def scores_and_poses(self, images, training=None):
        poses = self.encode(images, training=training)
        return self.scores(poses), poses

    def default_loss(self):
        """`MarginLoss()` (Sabour et al. eq. 4; several 1s in `T` with
        several labels per image)."""
        return MarginLoss()

    def extra_loss(self, x, y, targets, poses, sample_weight=None, training=True):
        """`reconstruction_weight` times the decoder's mean squared error."""
        if not self.reconstruction:
            return None
        if poses is None:  # Scores from `model(x)`: encode x again.
            if x is None:
                raise ValueError(
                    "compute_loss needs the images `x` for the reconstruction "
                    "loss when `y_pred` holds only the class scores. Received: x=None"
                )
            poses = self.encode(x, training=training)
        if self.labels_per_image == 1:
            return self.reconstruction_weight * self._reconstruction_error(
                x, poses, targets, sample_weight
            )
        ids, images = self._objects(y)
        error = 0.0
        for k in range(self.labels_per_image):  # each object alone, a fixed few
            mask = one_hot(ids[:, k], self.num_classes, "y['labels']")
            error = error + self._reconstruction_error(images[:, k], poses, mask, sample_weight)
        return self.reconstruction_weight * error

    def _objects(self, y):
        k = self.labels_per_image
        if not (isinstance(y, dict) and "labels" in y and "images" in y):
            raise ValueError(
                f"With labels_per_image={k} and a decoder, the labels must be a dict "
                f"with 'labels' (batch, {k}) class ids and 'images' (batch, {k}, height, "
                "width, channels), each object alone: the decoder reconstructs each "
                "from its own capsule. Received: "
                + (
                    f"a dict with keys {sorted(y)}"
                    if isinstance(y, dict)
                    else f"y of type {type(y).__name__}"
                )
            )
        return ops.convert_to_tensor(y["labels"]), ops.convert_to_tensor(y["images"])

    def _reconstruction_error(self, images, poses, labels, sample_weight):
        decoded = ops.cast(self.decoder(self.mask([poses, labels])), "float32")
        batch = ops.shape(decoded)[0]
        # A Keras loss, so tf.distribute replicas scale it like the others.
        return self.reconstruction_loss(
            ops.reshape(ops.cast(images, "float32"), (batch, -1)),
            ops.reshape(decoded, (batch, -1)),
            sample_weight,
        )

    def _one_hot(self, y):
        return one_hot(y, self.num_classes, "y")

    def _check_decoder(self, method):
        if not self.reconstruction:
            raise ValueError(
                f"`{method}` needs the decoder, and this model was built without one. "
                "Received: reconstruction=False (build the model with "
                "reconstruction=True)"
            )

    def reconstruct(self, images, labels=None):
        """Decoded images, masked by `labels` (ids or one-hot) or by the longest capsule."""
        self._check_decoder("reconstruct")
        poses = self.encode(ops.convert_to_tensor(images), training=False)
        if labels is None:
            return self.decoder(self.mask(poses))
        return self.decoder(self.mask([poses, self._one_hot(ops.convert_to_tensor(labels))]))

    def decode(self, poses):
        """Decodes class-capsule poses `(batch, num_classes, dim)` as they are."""
        self._check_decoder("decode")
        batch = ops.shape(poses)[0]
        return self.decoder(ops.reshape(poses, (batch, -1)))

    def routing_coefficients(self, images):
        """Coupling coefficients of the class capsules, `(batch, in_caps, num_classes)`."""
        children = self.child_capsules(ops.convert_to_tensor(images), training=False)
        return self.class_capsules(children, return_coefficients=True)[1]

    def get_config(self):
        config = super().get_config()  # name, trainable, dtype, input_shape, num_classes
        config.update(
            labels_per_image=self.labels_per_image,
            reconstruction=self.reconstruction,
            reconstruction_weight=self.reconstruction_weight,
            decoder_units=self.decoder_units,
            decoder_activation=self.decoder_activation,
        )
        return config
