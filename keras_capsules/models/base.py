"""Capsule classifiers whose loss adds a label-masked reconstruction term."""

import contextlib

import keras
import numpy as np
from keras import ops

from keras_capsules.labels import check_class_ids, one_hot
from keras_capsules.layers.length import Length
from keras_capsules.layers.mask import Mask
from keras_capsules.losses import MarginLoss
from keras_capsules.models._compile import AutoXLACompile
from keras_capsules.validation import int_tuple, non_negative_float, positive_int


class ClassIdCheck:
    """A ready model's `fit` and `evaluate` refuse array labels with a class
    id outside `[0, num_classes)` (`keras_capsules.labels.check_class_ids`),
    the same `ValueError` on every backend, before any step runs. Labels
    from a dataset or generator are not read ahead: an id out of range
    there is a row of zeros in the loss (`keras_capsules.labels.one_hot`)."""

    def fit(self, x=None, y=None, *args, **kwargs):
        check_class_ids(y, self.num_classes)
        validation = kwargs.get("validation_data")
        if isinstance(validation, (tuple, list)) and len(validation) >= 2:
            check_class_ids(validation[1], self.num_classes, "validation_data labels")
        return super().fit(x, y, *args, **kwargs)

    def evaluate(self, x=None, y=None, *args, **kwargs):
        check_class_ids(y, self.num_classes)
        return super().evaluate(x, y, *args, **kwargs)


class CapsuleClassifier(ClassIdCheck, AutoXLACompile, keras.Model):
    """Base of the capsule classifiers: class scores out, reconstruction in the loss.

    `model(images)`, `predict` and `export` give the class scores, the
    lengths of the class capsules, `(batch, num_classes)`.

    Training needs no second input. Inside the model's own `train_step`
    and `test_step` (what `fit` and `evaluate` run), `call` returns
    `(scores, poses)`: the loss then decodes the poses of that same
    forward pass, masked with the true labels `y`, and adds

    ```
    loss = compiled_loss(one_hot(y), scores)  # MarginLoss() if none compiled
           + reconstruction_weight * mean((decoder(mask(poses, y)) - x)^2)
    ```

    The compiled metrics see the scores. Called by hand with the scores,
    `compute_loss(x, y, model(x))` encodes `x` again for the poses.

    Labels may be integer class ids `(batch,)` or `(batch, 1)`, or one-hot
    `(batch, num_classes)`; the compiled loss receives them one-hot. `fit`
    and `evaluate` refuse array labels with an id outside `[0,
    num_classes)` with a `ValueError` (labels from a dataset are not read
    ahead: there such an id is a row of zeros, see
    `keras_capsules.labels.one_hot`).

    `compile(jit_compile="auto")`, the default, also turns XLA on with
    TensorFlow on CPU (Keras's own `"auto"` leaves it off there; these
    models train 1.2-1.7x faster with it), except with `run_eagerly=True`
    or under a `tf.distribute` strategy; pass `jit_compile=False` to opt
    out. `compile` then tells the layers whether XLA compiles them, so
    their `implementation="auto"` convolutions pick the faster way
    (`keras_capsules.conv.resolve_implementation`).

    Dtype policy: the model's `dtype` (a policy name such as
    `"mixed_float16"`, default the global policy) is passed to every layer
    it builds, and saved in `get_config`, so a model keeps its policy
    after a `.keras` round trip whatever the global policy is then.

    Subclasses pass the base arguments to `__init__`, then call
    `self._set_capsules(features, digit_capsules)` with `features` (a
    model: images -> child capsules `(batch, children, dim)`, taking
    `training`; a subclass that overrides `child_capsules` may feed it something
    else, as `BackboneCapsNet` feeds it the backbone's feature map) and `digit_capsules` (a `keras_capsules.layers.Capsule`
    with one capsule per class), each of their layers made with
    `dtype=self.dtype_policy`; they extend `get_config`.
    `child_capsules` and `encode` may be overridden; `call`, `train_step`, `test_step`,
    `compute_loss` and `compute_metrics` should not.

    Args:
        input_shape: image shape `(height, width, channels)`.
        num_classes: number of classes (class capsules).
        reconstruction: build the decoder and add the reconstruction loss.
        reconstruction_weight: weight of the mean squared error, `>= 0`.
        decoder_units: hidden sizes of the decoder (ReLU `Dense` layers).
        decoder_activation: activation of the decoder output: `"sigmoid"`
            for images in [0, 1], `"linear"` for standardised images.
        **kwargs: `keras.Model` arguments (`name`, `dtype`, ...).

    Call arguments:
        images: `(batch, height, width, channels)`.
        training: whether the layers run in training mode.

    Returns:
        class scores `(batch, num_classes)`, the lengths of the class
        capsules (`(scores, poses (batch, num_classes, capsule_dim))`
        inside `train_step`, `test_step` and `loss_outputs()`).

    Example:

    >>> class TinyCapsNet(keras_capsules.models.CapsuleClassifier):
    ...     def __init__(self, **kwargs):
    ...         super().__init__((12, 12, 1), 3, decoder_units=(8,), **kwargs)
    ...         images = keras.Input(self.image_shape)
    ...         children = keras_capsules.layers.PrimaryCapsule(
    ...             2, 4, 5, strides=2, dtype=self.dtype_policy)(images)
    ...         self._set_capsules(keras.Model(images, children), keras_capsules.layers.Capsule(
    ...             3, 6, dtype=self.dtype_policy, name="digit_capsules"))
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
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.image_shape = int_tuple(input_shape, 3, "input_shape")
        self.num_classes = positive_int(num_classes, "num_classes")
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
        self.decoder_activation = (decoder_activation if isinstance(decoder_activation, str)
                                   else keras.activations.serialize(activation))
        self.scores = Length(name="scores", dtype=self.dtype_policy)
        self.mask = Mask(name="mask", dtype=self.dtype_policy)
        self.margin_loss = MarginLoss()
        self.reconstruction_loss = keras.losses.MeanSquaredError()
        # > 0 while train_step or test_step runs (traces, on TF and JAX):
        # `call` then returns the poses too. A count, as MirroredStrategy
        # runs its replicas' steps in interleaved threads; a plain list, set
        # past Keras's attribute tracking, which torch.compile traces as is.
        object.__setattr__(self, "_steps_running", [0])

    def _set_capsules(self, features, digit_capsules):
        """Sets `self.features` and `self.digit_capsules` (built for the
        features' output), the decoder when `self.reconstruction`, and
        builds the model: the end of a subclass's `__init__`."""
        self.features = features
        self.digit_capsules = digit_capsules
        digit_capsules.build(features.output.shape)
        # Called symbolically, so that `summary()` shows them built, with
        # their output shapes.
        poses = keras.KerasTensor(digit_capsules.compute_output_shape(features.output.shape))
        self.scores(poses)
        self.mask(poses)
        if self.reconstruction:
            self.decoder = self._build_decoder(digit_capsules.capsule_dim)
        self.build((None, *self.image_shape))

    def _build_decoder(self, capsule_dim):
        dtype = self.dtype_policy
        layers = [keras.Input((self.num_classes * capsule_dim,))]
        layers += [keras.layers.Dense(u, activation="relu", dtype=dtype)
                   for u in self.decoder_units]
        layers += [
            keras.layers.Dense(
                int(np.prod(self.image_shape)), activation=self.decoder_activation, dtype=dtype
            ),
            keras.layers.Reshape(self.image_shape, dtype=dtype),
        ]
        return keras.Sequential(layers, name="decoder")

    def build(self, input_shape=None):
        self.built = True

    def child_capsules(self, images, training=None):
        """The child capsules `(batch, children, dim)` of the class capsules."""
        return self.features(images, training=training)

    def encode(self, images, training=None):
        """Class-capsule poses `(batch, num_classes, capsule_dim)`."""
        return self.digit_capsules(self.child_capsules(images, training=training))

    def call(self, images, training=None):
        poses = self.encode(images, training=training)
        scores = self.scores(poses)
        if self._steps_running[0] > 0:
            return scores, poses
        return scores

    def train_step(self, *args, **kwargs):
        return self._step(super().train_step, *args, **kwargs)

    def test_step(self, *args, **kwargs):
        return self._step(super().test_step, *args, **kwargs)

    @contextlib.contextmanager
    def loss_outputs(self):
        """Within this context `call` returns `(scores, poses)`: the `y_pred`
        that `compute_loss` decodes the reconstruction from. For custom
        training loops, around the forward pass (`fit` and `evaluate` need
        nothing: `train_step` and `test_step` do the same)."""
        self._steps_running[0] += 1
        try:
            yield
        finally:
            self._steps_running[0] -= 1

    def _step(self, step, *args, **kwargs):
        # The backends' steps (data, or JAX's state and data) pass through.
        # Not `loss_outputs`: torch.compile traces this step.
        self._steps_running[0] += 1
        try:
            return step(*args, **kwargs)
        finally:
            self._steps_running[0] -= 1

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        scores, poses = y_pred if isinstance(y_pred, (tuple, list)) else (y_pred, None)
        labels = self._one_hot(y)
        if self._compile_loss is not None:
            loss = self._compile_loss(labels, scores, sample_weight)
        else:
            loss = self.margin_loss(labels, scores, sample_weight)
        losses = [ops.cast(loss, "float32")]
        if self.reconstruction:
            if poses is None:  # Scores from `model(x)`: encode x again.
                if x is None:
                    raise ValueError(
                        "compute_loss needs the images `x` for the reconstruction "
                        "loss when `y_pred` holds only the class scores. Received: x=None"
                    )
                poses = self.encode(x, training=training)
            losses.append(self.reconstruction_weight * self._reconstruction_error(
                x, poses, labels, sample_weight))
        losses += [ops.cast(self._aggregate_additional_loss(l), "float32") for l in self.losses]
        return ops.sum(ops.stack(losses))

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        if isinstance(y_pred, (tuple, list)):
            y_pred = y_pred[0]  # The scores, without the poses.
        return super().compute_metrics(x, y, y_pred, sample_weight)

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
        layer = self.digit_capsules
        return layer.router(layer.votes(children), None, return_coefficients=True)[2]

    def get_config(self):
        config = super().get_config()  # name, trainable, dtype (the policy)
        config.update(
            input_shape=self.image_shape,
            num_classes=self.num_classes,
            reconstruction=self.reconstruction,
            reconstruction_weight=self.reconstruction_weight,
            decoder_units=self.decoder_units,
            decoder_activation=self.decoder_activation,
        )
        return config


