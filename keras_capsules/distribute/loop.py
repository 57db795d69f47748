"""The epochs, steps and callbacks of a multi-process `fit`, around a step
that each backend's loop (`tensorflow_loop`, `torch_loop`) supplies."""

import keras

from keras_capsules.distribute.sharding import local_batches


class _Loop:
    """The epochs, steps and callbacks of `fit` around a per-process step.

    Subclasses implement `train_step(inputs, labels)` (-> logs) and
    `evaluate(x, y, batch_size, steps)` (-> global logs), and may turn one
    process's logs into global ones in `epoch_logs`.
    """

    def __init__(self, model, num_processes, process_id):
        self.model, self.num_processes, self.process_id = model, num_processes, process_id

    def batches(self, x, y, batch_size):
        return local_batches(x, y, batch_size, self.num_processes, self.process_id)

    def fit(
        self,
        x,
        y,
        batch_size,
        epochs,
        steps_per_epoch,
        callbacks,
        validation_data,
        validation_steps,
        verbose,
        initial_epoch=0,
    ):
        model = self.model
        if model.optimizer is None:
            raise ValueError(
                "Call `model.compile(optimizer=...)` before `fit`. Received: optimizer=None"
            )
        verbose = 1 if verbose == "auto" else verbose
        callback_list = keras.callbacks.CallbackList(
            callbacks,
            add_history=True,
            add_progbar=bool(verbose) and self.process_id == 0,
            model=model,
            verbose=verbose,
            epochs=epochs,
            steps=steps_per_epoch,
        )
        model.stop_training = False
        callback_list.on_train_begin()
        batches, logs = None, {}
        for epoch in range(initial_epoch, epochs):
            model.reset_metrics()
            callback_list.on_epoch_begin(epoch)
            if batches is None or steps_per_epoch is None:  # Else: go on where it stopped.
                batches = self.batches(x, y, batch_size)
            for step, (inputs, labels) in enumerate(batches):
                callback_list.on_train_batch_begin(step)
                logs = self.train_step(inputs, labels)
                callback_list.on_train_batch_end(step, logs)
                if model.stop_training or step + 1 == steps_per_epoch:
                    break
            logs = self.epoch_logs(logs)
            if validation_data is not None:
                results = self.evaluate(validation_data, None, batch_size, validation_steps)
                logs.update({f"val_{k}": v for k, v in results.items()})
            callback_list.on_epoch_end(epoch, logs)
            if model.stop_training:
                break
        callback_list.on_train_end(logs)
        return model.history

    def epoch_logs(self, logs):
        return dict(logs)
