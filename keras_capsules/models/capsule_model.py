"""The contract of every ready model: labels, `compile` defaults, the poses output."""

import contextlib

import keras
from keras import ops

from keras_capsules.labels import check_class_ids, class_targets
from keras_capsules.metrics import LabelSetAccuracy
from keras_capsules.models import presets
from keras_capsules.models.xla import xla_compile_kwargs
from keras_capsules.validation import int_tuple, positive_int


def _portable_optimizer_config(config):
    """The serialized optimizer `config`, made loadable on every backend.

    Keras 3.15.1 records an optimizer compiled on torch under its torch-only
    class (module `keras.src.backend.torch.optimizers...`), which cannot
    train on TensorFlow or JAX; the same optimizer under its public class
    (`keras.optimizers.Adam`, same arguments) trains everywhere, and keeps
    the saved optimizer variables (same names, same order).
    """
    if not isinstance(config, dict) or not str(config.get("module", "")).startswith(
        "keras.src.backend."
    ):
        return config
    name = config.get("class_name")
    if not isinstance(name, str) or not hasattr(keras.optimizers, name):
        return config
    return {**config, "module": "keras.optimizers", "registered_name": None}


class CapsuleModel(keras.Model):
    """Base of the ready models (the task contract): images in, scores out.

    The contract its subclasses keep (the task bases `CapsuleClassifier`
    and `CapsuleSegmenter`, and the ready models `MatrixCapsNet`,
    `HeinsenCapsNet`):

    - `model(images)`, `predict` and `export` give the class scores
      `(batch, num_classes)`.
    - `model(images, return_poses=True)` gives `(scores, poses)`, the class
      capsules' poses of the same forward pass too. `return_poses=None`
      (the default) means `False`, except inside the model's own
      `train_step` and `test_step` (what `fit`, `evaluate` and
      `keras_capsules.distribute` run) and inside `with
      model.returning_poses():` (for custom training loops): there the
      loss needs the poses (a decoder reconstructs from them), so `y_pred`
      is `(scores, poses)`. `model.returns_poses` says which holds now.
    - Labels: class ids `(batch,)` or `(batch, 1)`, or one-hot
      `(batch, num_classes)`; with `labels_per_image=k > 1` (several
      objects in one image, e.g. MultiMNIST), `k` distinct class ids
      `(batch, k)` or a k-hot `(batch, num_classes)`. The compiled loss
      and metrics receive them one-hot (k-hot): `targets(y)`. `fit` and
      `evaluate` refuse array labels with an id outside `[0,
      num_classes)` with a `ValueError` (`check_targets`); from a dataset
      such an id is a row of zeros (`keras_capsules.labels.one_hot`). A
      task base whose labels are not classes overrides `targets` and
      `check_targets` (`CapsuleSegmenter`: masks).
    - `compile(optimizer="auto", loss="auto", metrics="auto")`, like
      keras-hub's task models: Adam with the paper's learning rate
      (`default_learning_rate`), the model's own loss (`default_loss()`:
      margin or spread loss) and accuracy (`default_metrics()`). Compiling
      with `loss=None`, or not compiling, uses `default_loss()` too.
      `jit_compile="auto"` also turns XLA on with TensorFlow on CPU
      (Keras's own `"auto"` leaves it off there) for the models measured
      faster that way (`xla_on_cpu`), except with
      `run_eagerly=True` or under a `tf.distribute` strategy, and tells the
      layers whether XLA compiles them (`keras_capsules.models.set_xla`).
    - The loss is the classification loss (compiled or default, plus the
      layers' `add_loss` terms) plus `extra_loss(...)` (the
      reconstruction of `CapsuleClassifier`; none here).

    Subclasses implement `scores_and_poses(images, training)` and
    `default_loss()`, and may override `extra_loss`; `call`,
    `train_step`, `test_step`, `compute_loss` and `compute_metrics` keep
    the contract and should not be overridden.

    Args:
        input_shape: image shape `(height, width, channels)`.
        num_classes: number of classes.
        labels_per_image: objects (class labels) per image, `>= 1`.
        **kwargs: `keras.Model` arguments (`name`, `dtype`, ...).

    Call arguments:
        images: `(batch, height, width, channels)`.
        training: whether the layers run in training mode.
        return_poses: `True` for `(scores, poses)`, `False` for the
            scores; `None` (default): `model.returns_poses`.

    Returns:
        class scores `(batch, num_classes)`, or `(scores, poses)`.

    Example (the contract through a ready model):

    >>> model = keras_capsules.models.CapsNet((20, 20, 1), 3, conv_filters=4,
    ...     primary_capsules=2, primary_dim=4, capsule_dim=4, decoder_units=(8,))
    >>> images = np.random.default_rng(0).uniform(size=(2, 20, 20, 1))
    >>> scores, poses = model(images, return_poses=True)
    >>> tuple(scores.shape), tuple(poses.shape), model.returns_poses
    ((2, 3), (2, 3, 4), False)
    >>> model.compile()  # Adam(1e-3), MarginLoss(), accuracy
    >>> round(float(model.optimizer.learning_rate), 6) == model.default_learning_rate
    True

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017 (the margin loss and the label-masked reconstruction).
    """

    #: Adam's learning rate of `compile(optimizer="auto")`.
    default_learning_rate = 1e-3
    #: Whether `compile(jit_compile="auto")` turns XLA on with TensorFlow on
    #: CPU: `True` where the model's train step was measured faster with it
    #: there (CapsNet, the MNIST Efficient-CapsNet, MatrixCapsNet).
    xla_on_cpu = True

    def __init__(self, input_shape, num_classes, labels_per_image=1, **kwargs):
        super().__init__(**kwargs)
        self.image_shape = int_tuple(input_shape, 3, "input_shape")
        self.num_classes = positive_int(num_classes, "num_classes")
        self.labels_per_image = positive_int(labels_per_image, "labels_per_image")
        if self.labels_per_image > self.num_classes:
            raise ValueError(
                "`labels_per_image` must be at most `num_classes` (the labels of one image "
                f"are distinct classes). Received: labels_per_image={labels_per_image}, "
                f"num_classes={num_classes}"
            )
        # > 0 while train_step or test_step runs (traces, on TF and JAX), or
        # inside `returning_poses()`. A count, as MirroredStrategy runs its
        # replicas' steps in interleaved threads; a plain list, set past
        # Keras's attribute tracking, which torch.compile traces as is.
        object.__setattr__(self, "_poses_wanted", [0])

    # Presets: the authors' released weights (keras_capsules.models.presets).

    @classmethod
    def from_preset(cls, preset, weights=None, cache_dir=None):
        """This model with its authors' released weights
        (`keras_capsules.models.from_preset`, restricted to this class).

        Args:
            preset: a name of `cls.list_presets()`, or a `.keras` file.
            weights: a local copy of the authors' file, or `None` to
                download it.
            cache_dir: the download cache (default `~/.keras`).

        Returns:
            the model with the weights loaded.
        """
        return presets.from_preset(preset, weights, cache_dir, model_class=cls)

    @classmethod
    def list_presets(cls):
        """The presets of this class: name -> source, license, accuracy, parameters."""
        return presets.list_presets(model_class=cls)

    def load_authors_weights(self, path):
        """Loads the weights file the model's authors released (the ready
        models with a preset implement it)."""
        raise NotImplementedError(f"{type(self).__name__} has no authors' weights to load.")

    # The forward pass.

    def scores_and_poses(self, images, training=None):
        """`(scores (batch, num_classes), poses)` of one forward pass."""
        raise NotImplementedError(f"{type(self).__name__} must implement scores_and_poses")

    @property
    def returns_poses(self):
        """Whether `model(images)` returns `(scores, poses)` now."""
        return self._poses_wanted[0] > 0

    @contextlib.contextmanager
    def returning_poses(self):
        """Within this context `model(images)` returns `(scores, poses)`,
        the `y_pred` that `compute_loss` takes. For custom training loops,
        around the forward pass; `fit` and `evaluate` need nothing."""
        self._poses_wanted[0] += 1
        try:
            yield
        finally:
            self._poses_wanted[0] -= 1

    def call(self, images, training=None, return_poses=None):
        scores, poses = self.scores_and_poses(images, training=training)
        if return_poses is None:
            return_poses = self.returns_poses
        return (scores, poses) if return_poses else scores

    def build(self, input_shape=None):
        self.built = True

    def train_step(self, *args, **kwargs):
        return self._with_poses(super().train_step, *args, **kwargs)

    def test_step(self, *args, **kwargs):
        return self._with_poses(super().test_step, *args, **kwargs)

    def _with_poses(self, step, *args, **kwargs):
        # The backends' steps (data, or JAX's state and data) pass through.
        # Not the context manager: torch.compile traces this step.
        self._poses_wanted[0] += 1
        try:
            return step(*args, **kwargs)
        finally:
            self._poses_wanted[0] -= 1

    # Labels.

    def targets(self, y):
        """The labels `y` as the float32 targets the loss and the metrics
        take: one-hot (k-hot) `(batch, num_classes)` here; a task base may
        take other labels (`CapsuleSegmenter`: masks)."""
        return class_targets(y, self.num_classes, self.labels_per_image, "y")

    def check_targets(self, y, name):
        """Raises a `ValueError` naming `name` for array labels `y` that
        `targets` cannot take (here: a class id outside `[0, num_classes)`
        or the wrong number of ids); `fit` and `evaluate` call it before
        any step. Labels from a dataset are not checked."""
        labels = y.get("labels") if isinstance(y, dict) else y
        check_class_ids(labels, self.num_classes, name, self.labels_per_image)

    def check_images(self, x, name="x"):
        """Raises a `ValueError` naming `name` unless images `x` (an array,
        a tensor, or a dataset whose elements start with images) have the
        shape `(batch, *input_shape)`. `fit`, `evaluate` and `predict`
        call it before Keras traces a step: on JAX a step that fails inside
        Keras's traced function leaves the model unable to save."""
        spec = getattr(x, "element_spec", None)  # a tf.data.Dataset
        if spec is not None:
            x = spec[0] if isinstance(spec, (tuple, list)) else spec
        shape = getattr(x, "shape", None)
        if shape is None or isinstance(x, dict):
            return
        shape = tuple(None if n is None else int(n) for n in shape)
        expected = (None, *self.image_shape)
        if len(shape) != len(expected) or any(
            n is not None and n != e for n, e in zip(shape[1:], expected[1:])
        ):
            raise ValueError(
                f"{self.__class__.__name__} expects images of shape (batch, "
                f"{', '.join(map(str, self.image_shape))}). Received: {name}.shape={shape}"
            )

    def fit(self, x=None, y=None, *args, **kwargs):
        self.check_images(x)
        self.check_targets(y, "y")
        validation = kwargs.get("validation_data")
        if isinstance(validation, (tuple, list)) and len(validation) >= 2:
            self.check_targets(validation[1], "validation_data labels")
        return super().fit(x, y, *args, **kwargs)

    def evaluate(self, x=None, y=None, *args, **kwargs):
        self.check_images(x)
        self.check_targets(y, "y")
        return super().evaluate(x, y, *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        self.check_images(x)
        return super().predict(x, *args, **kwargs)

    def export(
        self, filepath, format="tf_saved_model", verbose=None, input_signature=None, **kwargs
    ):
        """`keras.Model.export`, with the images' signature `(None,
        *input_shape)` when `input_signature` is `None`: Keras infers a
        subclassed model's signature from an eager call, which `predict` on
        JAX does not make, so a model that has only predicted exports too."""
        if input_signature is None and self.built:
            input_signature = [
                keras.InputSpec(shape=(None, *self.image_shape), dtype=self.input_dtype)
            ]
        return super().export(
            filepath, format=format, verbose=verbose, input_signature=input_signature, **kwargs
        )

    # Compiling.

    def default_optimizer(self):
        """The optimizer of `compile(optimizer="auto")`: Adam with
        `default_learning_rate`."""
        return keras.optimizers.Adam(self.default_learning_rate)

    def default_loss(self):
        """The loss of `compile(loss="auto")`, on one-hot targets and scores."""
        raise NotImplementedError(f"{type(self).__name__} must implement default_loss")

    def default_metrics(self):
        """The metrics of `compile(metrics="auto")`: `"accuracy"`, or with
        several labels per image `keras_capsules.metrics.LabelSetAccuracy`
        (named `"accuracy"` too)."""
        if self.labels_per_image > 1:
            return [LabelSetAccuracy(self.labels_per_image, name="accuracy")]
        return ["accuracy"]

    def compile(self, optimizer="auto", loss="auto", metrics="auto", jit_compile="auto", **kwargs):
        if optimizer == "auto":
            optimizer = self.default_optimizer()
        if loss == "auto":
            loss = self.default_loss()
        if metrics == "auto":
            metrics = self.default_metrics()
        with xla_compile_kwargs(self, jit_compile, kwargs) as compile_kwargs:
            super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **compile_kwargs)

    def compile_from_config(self, config):
        # Keras's own skips models that override `compile`: a loaded `.keras`
        # file comes back compiled, through the `compile` above.
        config = dict(config, optimizer=_portable_optimizer_config(config.get("optimizer")))
        self.compile(**keras.saving.deserialize_keras_object(config))
        if hasattr(self, "optimizer") and self.built:
            self.optimizer.build(self.trainable_variables)  # its variables, to load

    # The loss.

    def extra_loss(self, x, y, targets, poses, sample_weight=None, training=True):
        """Terms added to the classification loss (none here), or `None`."""
        return None

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        scores, poses = y_pred if isinstance(y_pred, (tuple, list)) else (y_pred, None)
        targets = self.targets(y)
        if self.compiled and self.loss is not None:
            # The compiled loss and the layers' losses, as Keras adds them.
            loss = super().compute_loss(x, targets, scores, sample_weight, training)
        else:
            loss = self.default_loss()(targets, scores, sample_weight)
            for added in self.losses:
                loss = loss + ops.cast(ops.sum(added), "float32")
        loss = ops.cast(loss, "float32")
        extra = self.extra_loss(x, y, targets, poses, sample_weight, training)
        return loss if extra is None else loss + ops.cast(extra, "float32")

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        if isinstance(y_pred, (tuple, list)):
            y_pred = y_pred[0]  # The scores, without the poses.
        # One-hot whatever form the labels came in, so one compiled metric
        # serves ids and one-hot labels alike.
        return super().compute_metrics(x, self.targets(y), y_pred, sample_weight)

    def get_config(self):
        config = super().get_config()  # name, trainable, dtype (the policy)
        config.update(input_shape=self.image_shape, num_classes=self.num_classes)
        return config
