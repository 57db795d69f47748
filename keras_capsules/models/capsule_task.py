"""The contract of every ready model, whatever its input: `compile("auto")`
and a loaded model that trains as it was compiled, labels, the poses
output, the XLA hint, presets and export."""

import contextlib

import keras
import numpy as np
from keras import ops

from keras_capsules.labels import check_class_ids, class_targets
from keras_capsules.metrics import LabelSetAccuracy
from keras_capsules.models import presets
from keras_capsules.models.export import check_export, export_errors
from keras_capsules.models.xla import xla_compile_kwargs
from keras_capsules.saving import portable_optimizer_config
from keras_capsules.validation import positive_int

# Sparse losses and metrics (class ids) -> the ones that take the one-hot
# targets a task passes them (`targets`): 0.2.0 compiled the point-cloud,
# quaternion and sequence classifiers with the sparse ones.
_ONE_HOT_COUNTERPARTS = {
    "SparseCategoricalCrossentropy": "CategoricalCrossentropy",
    "SparseCategoricalAccuracy": "CategoricalAccuracy",
    "SparseTopKCategoricalAccuracy": "TopKCategoricalAccuracy",
}
_ONE_HOT_NAMES = {
    "sparse_categorical_crossentropy": "categorical_crossentropy",
    "sparse_categorical_accuracy": "categorical_accuracy",
    "sparse_top_k_categorical_accuracy": "top_k_categorical_accuracy",
}


def _one_hot_counterpart(obj):
    """`obj` (a loss or metric, its name or its serialized config) taking
    one-hot targets: a sparse one becomes its categorical counterpart with
    the same arguments (and name); anything else comes back as it is."""
    if isinstance(obj, str):
        return _ONE_HOT_NAMES.get(obj, obj)
    is_object = isinstance(obj, (keras.losses.Loss, keras.metrics.Metric))
    config = keras.saving.serialize_keras_object(obj) if is_object else obj
    if not isinstance(config, dict) or config.get("class_name") not in _ONE_HOT_COUNTERPARTS:
        return obj
    arguments = {k: v for k, v in (config.get("config") or {}).items() if k != "ignore_class"}
    config = {**config, "class_name": _ONE_HOT_COUNTERPARTS[config["class_name"]]}
    config["config"] = arguments
    return keras.saving.deserialize_keras_object(config) if is_object else config


def _one_hot_compile_arguments(loss, metrics):
    """`compile`'s `loss` and `metrics` made to take one-hot targets."""
    loss = _one_hot_counterpart(loss)
    if isinstance(metrics, (list, tuple)):
        metrics = [_one_hot_counterpart(m) for m in metrics]
    return loss, metrics


class CapsuleTask(keras.Model):
    """Base of every ready model: the task contract, for any input.

    Images (`CapsuleModel` and the bases on it), point clouds and
    sequences share it:

    - `model(inputs)`, `predict` and `export` give the outputs (class
      scores `(batch, num_classes)` for a classifier).
    - `model(inputs, return_poses=True)` gives `(outputs, poses)`, the
      capsules' poses of the same forward pass too (the class capsules; an
      autoencoder's latent capsules). `return_poses=None` (the default)
      means `False`, except inside the model's own `train_step` and
      `test_step` (what `fit`, `evaluate` and `keras_capsules.distribute`
      run) and inside `with model.returning_poses():` (custom training
      loops): there `y_pred` is `(outputs, poses)`, for a loss that needs
      the poses. `model.returns_poses` says which holds now.
    - Labels of a classifier (`num_classes` given): class ids `(batch,)` or
      `(batch, 1)`, or one-hot `(batch, num_classes)`; with
      `labels_per_image=k > 1`, `k` distinct class ids `(batch, k)` or a
      k-hot `(batch, num_classes)`. The compiled loss and metrics receive
      them one-hot (k-hot): `targets(y)`; a sparse loss or metric given to
      `compile` is replaced by its one-hot counterpart
      (`SparseCategoricalCrossentropy` -> `CategoricalCrossentropy`, same
      arguments). `fit` and `evaluate` refuse array labels with an id
      outside `[0, num_classes)` (`check_targets`). Without `num_classes`
      the labels pass to the loss as they are (an autoencoder's: the
      inputs). A base whose labels are neither overrides `targets` and
      `check_targets` (`CapsuleSegmenter`: masks).
    - Inputs: `fit`, `evaluate` and `predict` refuse arrays whose shape is
      not `(batch, *input_shape)` (`None` in `input_shape`: any size but
      0), or of no inputs (`batch = 0`), with a `ValueError` before Keras
      traces a step (`check_inputs`;
      the point-cloud models' `scores_and_poses` call it too, so that
      `model(x)` names the shape before any computation).
    - `compile(optimizer="auto", loss="auto", metrics="auto",
      jit_compile="auto")`, like keras-hub's tasks: `default_optimizer()`
      (Adam at `default_learning_rate`), `default_loss()`,
      `default_metrics()`. Compiling with `loss=None`, or not compiling,
      uses `default_loss()` too. `jit_compile="auto"` also turns XLA on
      with TensorFlow on CPU for the models measured faster that way
      (`xla_on_cpu`), and tells the layers whether XLA compiles them
      (`keras_capsules.models.set_xla`).
    - A `.keras` file comes back compiled as it was saved, its optimizer's
      state included, on any backend (`compile_from_config`; an optimizer
      saved on torch is loaded as its public class). `jit_compile="auto"`
      is saved as `"auto"`, not as the backend that saved it resolved it:
      a file saved on JAX (XLA) does not bring `torch.compile` to torch.
    - Presets: `from_preset(name or .keras file)`, `list_presets()`.
    - `export` gives the inputs' signature `(None, *input_shape)`.
    - The loss is the compiled (or default) loss on `(targets(y),
      outputs)`, plus the layers' `add_loss` terms, plus `extra_loss(...)`.

    Subclasses implement `scores_and_poses(inputs, training)` (with a
    `mask=` argument too when they take Keras masks) and `default_loss()`,
    and may override `extra_loss`, `default_optimizer`,
    `default_metrics`; `call`, `train_step`, `test_step`, `compute_loss`
    and `compute_metrics` keep the contract and should not be overridden.

    Args:
        input_shape: the shape of one input, without the batch axis;
            `None` entries for sizes that vary (`(None, 3)`: clouds of any
            number of points); for inputs that are a dict of arrays (a
            backbone's), a dict of such shapes (`{"token_ids": (None,),
            ...}`); `None`: not checked.
        num_classes: number of classes, or `None` for a model whose labels
            are not classes.
        labels_per_image: class labels per input, `>= 1`.
        **kwargs: `keras.Model` arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: `(batch, *input_shape)`.
        training: whether the layers run in training mode.
        mask: a Keras mask of the inputs, for models that take one.
        return_poses: `True` for `(outputs, poses)`, `False` for the
            outputs; `None` (default): `model.returns_poses`.

    Returns:
        the outputs (class scores `(batch, num_classes)` for a
        classifier), or `(outputs, poses)`.

    Example (a classifier of point clouds on the contract):

    >>> class TinyPointClassifier(keras_capsules.models.CapsuleTask):
    ...     def __init__(self, **kwargs):
    ...         super().__init__(input_shape=(None, 3), num_classes=2, **kwargs)
    ...         self.primary = keras_capsules.layers.SetPrimaryCapsule(4, 4)
    ...         self.classes = keras_capsules.layers.Capsule(2, 4)
    ...         self.lengths = keras_capsules.layers.Length()
    ...     def scores_and_poses(self, points, training=None):
    ...         poses = self.classes(self.primary(points))
    ...         return self.lengths(poses), poses
    ...     def default_loss(self):
    ...         return keras_capsules.losses.MarginLoss()
    >>> model = TinyPointClassifier()
    >>> model.compile()  # Adam(1e-3), MarginLoss(), accuracy
    >>> points = np.random.default_rng(0).normal(size=(4, 16, 3))
    >>> history = model.fit(points, np.array([0, 1, 0, 1]), verbose=0)
    >>> tuple(model.predict(points, verbose=0).shape)
    (4, 2)

    Reference: the task models of keras-hub (`keras_hub.models.Task`).
    """

    #: Adam's learning rate of `compile(optimizer="auto")`.
    default_learning_rate = 1e-3
    #: Whether `compile(jit_compile="auto")` turns XLA on with TensorFlow on
    #: CPU: `True` only where the model's train step was measured faster
    #: with it there.
    xla_on_cpu = False
    #: What the inputs are, for error messages.
    inputs_name = "inputs"
    #: The fewest classes the model takes (a classifier needs two).
    min_classes = 1
    #: Whether the model takes a mask of its inputs (`mask=` or a Keras
    #: mask; its `scores_and_poses` has a `mask` argument).
    takes_mask = False

    def __init__(self, input_shape=None, num_classes=None, labels_per_image=1, **kwargs):
        super().__init__(**kwargs)
        self.sample_shape = None if input_shape is None else sample_shape(input_shape)
        self.num_classes = None if num_classes is None else positive_int(num_classes, "num_classes")
        if self.num_classes is not None and self.num_classes < self.min_classes:
            raise ValueError(
                f"`num_classes` must be >= {self.min_classes}. Received: num_classes={num_classes}"
            )
        self.labels_per_image = positive_int(labels_per_image, "labels_per_image")
        if self.num_classes is not None and self.labels_per_image > self.num_classes:
            raise ValueError(
                "`labels_per_image` must be at most `num_classes` (the labels of one input "
                f"are distinct classes). Received: labels_per_image={labels_per_image}, "
                f"num_classes={num_classes}"
            )
        # > 0 while train_step or test_step runs (traces, on TF and JAX), or
        # inside `returning_poses()`. A count, as MirroredStrategy runs its
        # replicas' steps in interleaved threads; a plain list, set past
        # Keras's attribute tracking, which torch.compile traces as is.
        object.__setattr__(self, "_poses_wanted", [0])
        self.supports_masking = self.takes_mask
        # `compile`'s `jit_compile` as given (`"auto"`), for the saved config.
        self._jit_compile_given = None

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

    def scores_and_poses(self, inputs, training=None):
        """`(outputs, poses)` of one forward pass."""
        raise NotImplementedError(f"{type(self).__name__} must implement scores_and_poses")

    @property
    def returns_poses(self):
        """Whether `model(inputs)` returns `(outputs, poses)` now."""
        return self._poses_wanted[0] > 0

    @contextlib.contextmanager
    def returning_poses(self):
        """Within this context `model(inputs)` returns `(outputs, poses)`,
        the `y_pred` that `compute_loss` takes. For custom training loops,
        around the forward pass; `fit` and `evaluate` need nothing."""
        self._poses_wanted[0] += 1
        try:
            yield
        finally:
            self._poses_wanted[0] -= 1

    def call(self, inputs, training=None, mask=None, return_poses=None):
        # A mask reaches only the models that take one (their
        # `scores_and_poses` has a `mask` argument); Keras gives dict inputs
        # a dict of `None`s.
        unmasked = all(m is None for m in keras.tree.flatten(mask))
        masked = {} if unmasked else {"mask": mask}
        scores, poses = self.scores_and_poses(inputs, training=training, **masked)
        if return_poses is None:
            return_poses = self.returns_poses
        return (scores, poses) if return_poses else scores

    def build(self, input_shape=None):
        self.built = True

    def compute_mask(self, inputs, mask=None):
        # A mask of the inputs is used, not passed on: the outputs (scores,
        # a reconstruction) have no axis of the inputs.
        return None

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

    # Labels and inputs.

    def targets(self, y):
        """The labels `y` as the targets the loss and the metrics take:
        float32 one-hot (k-hot) `(batch, num_classes)` for a classifier,
        `y` itself otherwise; a task base may take other labels
        (`CapsuleSegmenter`: masks)."""
        if self.num_classes is None:
            return y
        return class_targets(y, self.num_classes, self.labels_per_image, "y")

    def check_targets(self, y, name):
        """Raises a `ValueError` naming `name` for array labels `y` that
        `targets` cannot take (for a classifier: a class id outside `[0,
        num_classes)` or the wrong number of ids); `fit` and `evaluate`
        call it before any step. Labels from a dataset are not checked."""
        if self.num_classes is None:
            return
        labels = y.get("labels") if isinstance(y, dict) else y
        check_class_ids(labels, self.num_classes, name, self.labels_per_image)

    def check_inputs(self, x, name="x"):
        """Raises a `ValueError` naming `name` unless `x` (an array, a
        tensor, or a dataset whose elements start with the inputs) has the
        shape `(batch, *input_shape)`, with at least one element on each
        axis of `input_shape` (a cloud of no points is refused). `fit`,
        `evaluate` and `predict` call it before Keras traces a step (on JAX
        a step that fails inside Keras's traced function leaves the model
        unable to save)."""
        if self.sample_shape is None:
            return
        x = model_inputs(x)
        if not isinstance(self.sample_shape, dict):
            if not isinstance(x, dict):
                _check_shape(self, self.inputs_name, self.sample_shape, x, name)
            return
        missing = sorted(set(self.sample_shape) - set(x)) if isinstance(x, dict) else None
        if missing is None or missing:
            if isinstance(x, dict):
                received = f"{name}.keys()={sorted(x)}"
            elif getattr(x, "shape", None) is not None:  # one array
                received = f"{name}.shape={tuple(x.shape)}"
            else:
                received = f"{name}={x!r}"
            raise ValueError(
                f"{type(self).__name__} expects {self.inputs_name}: a dict with the keys "
                f"{sorted(self.sample_shape)}. Received: {received[:200]}"
            )
        for key, sample_shape in self.sample_shape.items():
            _check_shape(self, f"{key!r}", sample_shape, x[key], f"{name}[{key!r}]")

    def _check_not_empty(self, x, method):
        # Keras 3.15.1 fails on arrays of no inputs with its own internal
        # error (`predict`: 'batch_outputs' referenced before assignment).
        first = next(iter(x.values()), None) if isinstance(x, dict) else x
        shape = getattr(first, "shape", None)
        if shape is not None and len(shape) and shape[0] == 0:
            shape = tuple(None if n is None else int(n) for n in shape)
            raise ValueError(
                f"{type(self).__name__}.{method} needs at least one input. "
                f"Received: x.shape={shape}"
            )

    def fit(self, x=None, y=None, *args, **kwargs):
        self.check_inputs(x)
        self._check_not_empty(x, "fit")
        self.check_targets(y, "y")
        validation = kwargs.get("validation_data")
        if isinstance(validation, (tuple, list)) and len(validation) >= 2:
            self.check_targets(validation[1], "validation_data labels")
        return super().fit(x, y, *args, **kwargs)

    def evaluate(self, x=None, y=None, *args, **kwargs):
        self.check_inputs(x)
        self._check_not_empty(x, "evaluate")
        self.check_targets(y, "y")
        return super().evaluate(x, y, *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        self.check_inputs(x)
        self._check_not_empty(x, "predict")
        return super().predict(x, *args, **kwargs)

    def export(
        self, filepath, format="tf_saved_model", verbose=None, input_signature=None, **kwargs
    ):
        """`keras.Model.export`, with the inputs' signature `(None,
        *input_shape)` when `input_signature` is `None`: Keras infers a
        subclassed model's signature from an eager call, which `predict` on
        JAX does not make, so a model that has only predicted exports too.
        A converter the backend needs for `format` and does not have is
        named, with its install line, before Keras starts
        (`keras_capsules.models.export.check_export`)."""
        if input_signature is None and self.built and isinstance(self.sample_shape, tuple):
            input_signature = [
                keras.InputSpec(shape=(None, *self.sample_shape), dtype=self.input_dtype)
            ]
        check_export(format)  # a missing converter named before Keras starts
        with export_errors(format):
            return super().export(
                filepath, format=format, verbose=verbose, input_signature=input_signature, **kwargs
            )

    # Compiling.

    def default_optimizer(self):
        """The optimizer of `compile(optimizer="auto")`: Adam with
        `default_learning_rate`."""
        return keras.optimizers.Adam(self.default_learning_rate)

    def default_loss(self):
        """The loss of `compile(loss="auto")`, on `targets(y)` and the outputs."""
        raise NotImplementedError(f"{type(self).__name__} must implement default_loss")

    def default_metrics(self):
        """The metrics of `compile(metrics="auto")`: for a classifier
        `"accuracy"`, or with several labels per input
        `keras_capsules.metrics.LabelSetAccuracy` (named `"accuracy"` too);
        none otherwise."""
        if self.num_classes is None:
            return []
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
        if self.num_classes is not None:
            loss, metrics = _one_hot_compile_arguments(loss, metrics)
        with xla_compile_kwargs(self, jit_compile, kwargs) as compile_kwargs:
            super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **compile_kwargs)
        self._jit_compile_given = jit_compile

    def get_compile_config(self):
        # Keras saves `jit_compile` as this backend resolved it (`True` on
        # JAX): a file saved on JAX would compile with torch.compile on
        # torch, tens of seconds before its first step. `"auto"` given is
        # saved as `"auto"`, resolved again where the file is loaded.
        config = super().get_compile_config()
        if config and isinstance(self._jit_compile_given, str):
            config["jit_compile"] = self._jit_compile_given
        return config

    def compile_from_config(self, config):
        # Keras's own skips models that override `compile`: a loaded `.keras`
        # file comes back compiled, through the `compile` above.
        config = dict(config, optimizer=portable_optimizer_config(config.get("optimizer")))
        if self.num_classes is not None:
            config["loss"], config["metrics"] = _one_hot_compile_arguments(
                config.get("loss"), config.get("metrics")
            )
        self.compile(**keras.saving.deserialize_keras_object(config))
        if hasattr(self, "optimizer") and self.built:
            self.optimizer.build(self.trainable_variables)  # its variables, to load

    # The loss.

    def extra_loss(self, x, y, targets, poses, sample_weight=None, training=True):
        """Terms added to the loss (none here), or `None`."""
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
            y_pred = y_pred[0]  # The outputs, without the poses.
        # One-hot whatever form the labels came in, so one compiled metric
        # serves ids and one-hot labels alike.
        return super().compute_metrics(x, self.targets(y), y_pred, sample_weight)


def _check_shape(model, what, sample_shape, x, name):
    """Raises unless `x` (anything with a `shape`) is `(batch,
    *sample_shape)` with no empty axis but the batch's."""
    shape = getattr(x, "shape", None)
    if shape is None:
        return
    # A symbolic size (JAX's export, `batch`) is not checked: only known ones.
    shape = tuple(int(n) if isinstance(n, (int, np.integer)) else None for n in shape)
    expected = (None, *sample_shape)
    if (
        len(shape) != len(expected)
        or any(n is not None and e is not None and n != e for n, e in zip(shape[1:], expected[1:]))
        or 0 in shape[1:]
    ):
        sizes = ", ".join("n" if n is None else str(n) for n in sample_shape)
        varying = " with n >= 1" if None in sample_shape else ""
        raise ValueError(
            f"{type(model).__name__} expects {what} of shape (batch, {sizes}){varying}. "
            f"Received: {name}.shape={shape}"
        )


def model_inputs(x):
    """The inputs of `x`: `x` itself, or the spec of the first element of a
    `tf.data.Dataset`'s elements (inputs, targets, ...)."""
    spec = getattr(x, "element_spec", None)
    if spec is None:
        return x
    return spec[0] if isinstance(spec, (tuple, list)) else spec


def sample_shape(shape):
    """`input_shape` as a tuple of positive ints and `None`s, at least one
    axis; a dict of them for named inputs."""
    if isinstance(shape, dict) and shape and all(isinstance(k, str) for k in shape):
        return {key: sample_shape(value) for key, value in shape.items()}
    values = tuple(shape) if isinstance(shape, (list, tuple)) else None
    if not values or not all(
        v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1) for v in values
    ):
        raise ValueError(
            "`input_shape` must be the shape of one input without the batch axis: a "
            "non-empty tuple of positive ints (or None for a size that varies). "
            f"Received: input_shape={shape!r}"
        )
    return values
