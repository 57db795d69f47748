"""Training callbacks for capsule networks."""

import keras

from keras_capsules.losses import SpreadLoss
from keras_capsules.validation import positive_float, positive_int


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
