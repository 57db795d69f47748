"""Training callbacks for capsule networks."""

import importlib.util
import os

import keras
import numpy as np

from keras_capsules import capsule_measures
from keras_capsules.diagnostics import StatisticsProbe, routing_figure
from keras_capsules.losses import SpreadLoss
from keras_capsules.validation import boolean, positive_float, positive_int


class SpreadLossMarginScheduler(keras.callbacks.Callback):
    """Raises the margin of a `SpreadLoss` linearly, once per training step.

    Before training step `t` (the optimizer's iteration count, so it
    continues across `fit` calls):

    ```
    margin = start + (end - start) * min(t / steps, 1)
    ```

    The paper starts the margin at 0.2 and raises it to 0.9, so that
    early training is not dominated by dead capsules. The callback attaches
    the loss's margin to the model's metric state, which the compiled
    train step (`jit_compile=True` on TensorFlow and JAX) reads on every
    step: a loss's own variables are constants inside a jitted JAX step.
    The margin then also appears in the training logs as `margin`. A
    subclassed model that is built before `fit` (Keras then locks its
    state) must track the margin itself: `self.spread_loss_margin =
    loss.margin_state` in its `__init__` (`MatrixCapsNet` does). With
    `steps_per_execution > 1` it changes once per execution.

    Args:
        loss: the `keras_capsules.losses.SpreadLoss` given to `compile`.
        start: the margin at step 0, `> 0`.
        end: the margin from step `steps` on, `> 0`.
        steps: number of training steps of the ramp, `>= 1`.

    Example (a tiny model; `steps` is usually some epochs' worth):

    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, "sigmoid")])
    >>> loss = keras_capsules.losses.SpreadLoss()
    >>> model.compile(optimizer="adam", loss=loss)
    >>> scheduler = keras_capsules.callbacks.SpreadLossMarginScheduler(
    ...     loss, start=0.2, end=0.9, steps=4)
    >>> x, y = np.ones((4, 4)), np.eye(3)[[0, 1, 2, 0]]
    >>> history = model.fit(x, y, batch_size=2, epochs=2, callbacks=[scheduler], verbose=0)
    >>> [round(m, 2) for m in history.history["margin"]]  # before steps 1 and 3
    [0.38, 0.73]
    >>> round(scheduler.margin_at(4), 2)
    0.9

    Reference: Hinton, Sabour & Frosst, "Matrix capsules with EM routing",
    ICLR 2018 (section 3).
    """

    def __init__(self, loss, start=0.2, end=0.9, steps=1):
        super().__init__()
        if not isinstance(loss, SpreadLoss):
            raise ValueError(
                f"`loss` must be a keras_capsules.losses.SpreadLoss. Received: loss={loss!r}"
            )
        self.loss = loss
        # Margins, as SpreadLoss(margin) takes them.
        self.start = positive_float(start, "start")
        self.end = positive_float(end, "end")
        self.steps = positive_int(steps, "steps")

    def margin_at(self, step):
        """The margin before training step `step`, a Python float."""
        return self.start + (self.end - self.start) * min(step / self.steps, 1.0)

    def set_model(self, model):
        super().set_model(model)
        state = self.loss.margin_state
        # A metric tracked by the model (set as one of its attributes, which
        # Keras tracks) is part of the compiled step's state, so the jitted
        # step reads its current value. Set here, not in on_train_begin: fit
        # calls set_model before it builds the train function, whose JAX
        # state layout (and shardings under keras.distribution) is fixed then.
        if any(m is state for m in model.metrics):
            return  # as `MatrixCapsNet` tracks its own loss's margin
        try:
            model.spread_loss_margin = state
        except ValueError as error:  # a built subclassed model: its state is locked
            raise ValueError(
                "SpreadLossMarginScheduler needs the loss's margin among the model's "
                "metrics, and this built model takes no new state. In the model's "
                "`__init__`, set `self.spread_loss_margin = loss.margin_state` for the "
                f"SpreadLoss you compile with. Received: model={type(model).__name__}"
            ) from error

    def on_train_begin(self, logs=None):
        # One read of the step count (continuing across `fit` calls); the
        # steps are counted here after that, so no step waits for the device.
        self._next_step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start = self._next_step

    def on_train_batch_begin(self, batch, logs=None):
        # `batch`: the epoch's step index that this execution starts at.
        # Reading `self.model` hands JAX's training state back to the
        # variables (no wait for the device), so the next step reads them
        # again, the new margin included.
        self.model  # noqa: B018
        self.loss.margin.assign(self.margin_at(self._epoch_start + batch))

    def on_train_batch_end(self, batch, logs=None):
        # `batch`: the epoch's last step index of this execution.
        self._next_step = self._epoch_start + batch + 1


# The scalar measures a CapsuleMonitor logs, and the ones its figure draws.
MONITORED = (
    "activation_mean", "starved_fraction", "active_fraction", "coefficient_entropy",
    "tree_fraction", "coefficient_spread", "children_per_active_parent",
    "parent_consistency", "pose_length_mean",
)  # fmt: skip
DRAWN = ("starved_fraction", "coefficient_entropy", "activation_mean", "tree_fraction")


class CapsuleMonitor(keras.callbacks.Callback):
    """Measures every routed layer at the end of each epoch
    (`diagnostics.capsule_statistics` on a fixed batch) and logs it.

    Each measure goes into the epoch's logs as `capsules/<layer>/<measure>`,
    so `History`, `keras.callbacks.CSVLogger` and
    `keras.callbacks.TensorBoard` (scalars) record it when they come after
    this callback in the list. With `figure_path`, the end of training
    draws the measures over the epochs, one panel per measure and a line
    per layer (starved fraction, coefficient entropy, activations, tree
    fraction), and a heat map of the last layer's mean coefficients beside
    it (`figure_path` with `_routing` before its suffix); needs matplotlib.

    Cost: one forward pass of the batch per epoch (`every` epochs apart),
    with the coefficients of every routed layer; the probe model is made
    once, on the model's own layers.

    Args:
        inputs: the batch to measure on (arrays), e.g. some validation
            inputs.
        labels: optional class ids or one-hot labels of `inputs`, for
            `parent_consistency`.
        threshold: the activation below which a parent is inactive.
        every: measure every `every` epochs (the first and the last
            measured epochs included).
        figure_path: where to save the figure at the end of training, or
            `None`.
        iteration_change: bool, also log `coefficient_change`, how much
            each iterating router's last iteration moves its coefficients
            (a second forward pass; `diagnostics.capsule_statistics`).
        log_dir: a TensorBoard log directory (that of your
            `keras.callbacks.TensorBoard`), or `None`: each measured epoch
            also writes every routed layer's mean coefficients there as a
            grey image (a row per child, a column band per parent; white:
            the largest coefficient), under the run `capsules`, tag
            `routing/<layer>`. Written with `tf.summary`, so it needs
            TensorFlow and TensorBoard installed (as Keras's TensorBoard
            callback does), whatever the backend: `pip install
            "keras-capsules[monitor]" tensorflow-cpu`.

    Attributes:
        history: `{epoch: {layer: {measure: value}}}`, every measured epoch.

    Example:

    >>> inputs = keras.Input((6, 4))
    >>> poses = keras_capsules.layers.Capsule(3, 5, name="classes")(inputs)
    >>> model = keras.Model(inputs, keras_capsules.layers.Length()(poses))
    >>> model.compile(optimizer="adam", loss="mse")
    >>> x, y = np.random.default_rng(0).normal(size=(8, 6, 4)), np.full((8, 3), 0.5)
    >>> monitor = keras_capsules.callbacks.CapsuleMonitor(x)
    >>> logs = model.fit(x, y, epochs=2, callbacks=[monitor], verbose=0).history
    >>> len(logs["capsules/classes/starved_fraction"])
    2

    Reference: Mitterreiter, Koch, Giesen & Laue, "Why Capsule Neural
    Networks Do Not Scale: Challenging the Dynamic Parse-Tree Assumption",
    AAAI 2023; Everett, Zhong & Leontidis, "Vanishing Activations: A
    Symptom of Deep Capsule Networks", 2023.
    """

    def __init__(
        self,
        inputs,
        labels=None,
        threshold=0.01,
        every=1,
        figure_path=None,
        iteration_change=False,
        log_dir=None,
    ):
        super().__init__()
        self.iteration_change = boolean(iteration_change, "iteration_change")
        missing = [m for m in ("tensorflow", "tensorboard") if importlib.util.find_spec(m) is None]
        if log_dir is not None and missing:
            raise ValueError(
                "CapsuleMonitor writes TensorBoard images with tf.summary, which needs "
                f"TensorFlow and TensorBoard (missing: {', '.join(missing)}; `pip install "
                f"tensorflow-cpu tensorboard`). Received: log_dir={log_dir!r}"
            )
        self.log_dir = None if log_dir is None else os.fspath(log_dir)
        self._writer = None
        self.inputs = inputs
        self.labels = labels
        self.threshold = positive_float(threshold, "threshold")
        self.every = positive_int(every, "every")
        self.figure_path = figure_path
        self.history = {}
        self._probe = None
        self._last_coefficients = None

    def on_train_begin(self, logs=None):
        if self._probe is None:
            self._probe = StatisticsProbe(self.model, self.iteration_change)

    def on_epoch_end(self, epoch, logs=None):
        last = self.params and epoch + 1 == self.params.get("epochs")
        if epoch % self.every and not last:
            return
        stats, coefficients = self._probe(
            self.inputs, self.labels, self.threshold, coefficients=True
        )
        self.history[epoch] = stats
        self._last_coefficients = coefficients
        measured = MONITORED + (("coefficient_change",) if self.iteration_change else ())
        if logs is not None:
            for layer, row in stats.items():
                for measure in measured:
                    logs[f"capsules/{layer}/{measure}"] = row[measure]
        if self.log_dir is not None:
            self._write_routing_images(epoch, coefficients)

    def _write_routing_images(self, epoch, coefficients):
        import tensorflow as tf  # TensorBoard's own writer, on any backend

        if self._writer is None:
            self._writer = tf.summary.create_file_writer(os.path.join(self.log_dir, "capsules"))
        with self._writer.as_default():
            for layer, c in coefficients.items():
                tf.summary.image(f"routing/{layer}", routing_image(c)[None], step=epoch)
        self._writer.flush()

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self.figure_path and self.history:
            self.figure().savefig(self.figure_path)
            layer, c = list(self._last_coefficients.items())[-1]
            root, dot, suffix = str(self.figure_path).rpartition(".")
            routing_path = f"{root}_routing.{suffix}" if dot else f"{self.figure_path}_routing"
            c = c.reshape(len(c), -1, c.shape[-1])
            routing_figure(c, title=f"{layer}: mean coefficients").savefig(routing_path)

    def figure(self):
        """The measures over the measured epochs: a panel per measure, a line
        per layer (a `matplotlib.figure.Figure`)."""
        try:
            from matplotlib.figure import Figure
        except ImportError as error:  # an optional dependency
            raise ImportError(
                "CapsuleMonitor draws with matplotlib: `pip install matplotlib`."
            ) from error
        epochs = sorted(self.history)
        figure = Figure(figsize=(10, 7))
        for k, measure in enumerate(DRAWN):
            ax = figure.add_subplot(2, 2, k + 1)
            for layer in self.history[epochs[0]]:
                ax.plot([e + 1 for e in epochs], [self.history[e][layer][measure] for e in epochs],
                        marker="o", label=layer)  # fmt: skip
            ax.set_xlabel("epoch")
            ax.set_title(measure.replace("_", " "))
        figure.axes[0].legend(fontsize="small")
        figure.tight_layout()
        return figure


def routing_image(coefficients, band=8):
    """Routing coefficients `(batch, ..., parents)` as a grey image
    `(children, parents * band, 1)` of `uint8`: each child's distribution
    over its parents averaged over the batch, a row per child and `band`
    columns per parent, scaled so that the largest mean is white."""
    c = np.asarray(coefficients, dtype="float64")
    c = capsule_measures.per_child(c.reshape(len(c), -1, c.shape[-1])).mean(axis=0)
    peak = c.max()
    grey = np.round(255 * c / peak) if peak > 0 else np.zeros_like(c)
    return np.repeat(grey.astype("uint8"), band, axis=1)[..., None]
