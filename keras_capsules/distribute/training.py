"""`fit` and `evaluate` on global batches: `model.fit`, or a per-process loop.

`model.fit` serves one process and JAX (`keras.distribution` shards the
batches); several torch or TensorFlow processes need a loop of their own
(`torch_loop`, `tensorflow_loop`).
"""

import keras

from keras_capsules.distribute.cluster import _tf_worker
from keras_capsules.distribute.tensorflow_loop import _TensorFlowLoop
from keras_capsules.distribute.torch_loop import _TorchLoop


def fit(
    model,
    x,
    y=None,
    batch_size=None,
    epochs=1,
    steps_per_epoch=None,
    callbacks=None,
    validation_data=None,
    validation_steps=None,
    verbose="auto",
    initial_epoch=0,
):
    """`model.fit` in a `scope()`, on global batches; returns the `History`.

    `x` is a batched `tf.data.Dataset` of `(inputs, labels)` global batches,
    or arrays `x`, `y` with the global `batch_size`. In one process, and on
    JAX, this is `model.fit` (`keras.distribution` shards the batches per
    process). With several torch or TensorFlow processes each process takes
    its slice of every global batch and trains on it: torch in a
    `DistributedDataParallel` step, TensorFlow with Keras's `train_step`
    under `MultiWorkerMirroredStrategy` (Keras 3's `fit` fails there:
    keras-team/keras#20585). `callbacks` and `validation_data` work as in
    `model.fit` there too.

    Args:
        model: a compiled `keras.Model`, built in `scope()`.
        x, y, batch_size, epochs, steps_per_epoch, callbacks,
            validation_data, validation_steps, verbose, initial_epoch: as
            for `model.fit`; `batch_size` is the global batch size.

    Returns:
        the `keras.callbacks.History` of the run.

    Example: see the `keras_capsules.distribute` docstring.
    """
    loop = _multi_process_loop(model)
    if loop is None:
        return model.fit(
            x,
            y,
            batch_size=batch_size,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            callbacks=callbacks,
            validation_data=validation_data,
            validation_steps=validation_steps,
            verbose=verbose,
            initial_epoch=initial_epoch,
            # Arrays are shuffled each epoch; a dataset keeps its own order
            # (Keras warns that `shuffle=True` is ignored for one).
            shuffle=_is_arrays(x),
        )
    return loop.fit(
        x,
        y,
        batch_size,
        epochs,
        steps_per_epoch,
        callbacks,
        validation_data,
        validation_steps,
        verbose,
        initial_epoch,
    )


def evaluate(model, x, y=None, batch_size=None, steps=None):
    """`model.evaluate(..., return_dict=True)` in a `scope()`, on global batches.

    Args:
        model: a compiled `keras.Model`, built in `scope()`.
        x, y, batch_size, steps: as for `model.evaluate`; `batch_size` is
            the global batch size.

    Returns:
        a dict of the loss and metrics, averaged over all processes.

    Example: `keras_capsules.distribute.evaluate(model, test_dataset)` in
    the `scope()` of the `keras_capsules.distribute` docstring.
    """
    loop = _multi_process_loop(model)
    if loop is None:
        return model.evaluate(x, y, batch_size=batch_size, steps=steps, verbose=0, return_dict=True)
    return loop.evaluate(x, y, batch_size, steps)


def _is_arrays(x):
    """Whether `x` is arrays (or a list, tuple or dict of them), which
    `model.fit` shuffles, rather than a dataset, which it cannot."""
    return hasattr(x, "shape") or isinstance(x, (list, tuple, dict))


def _multi_process_loop(model):
    """The loop for several torch or TensorFlow processes; `None` for `model.fit`."""
    backend = keras.backend.backend()
    if backend == "torch":
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            return _TorchLoop(model, dist.get_world_size(), dist.get_rank())
    elif backend == "tensorflow":
        import tensorflow as tf

        strategy = model.distribute_strategy
        if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            resolver = strategy.cluster_resolver
            workers, index = _tf_worker(
                resolver.cluster_spec().as_dict(), resolver.task_type, resolver.task_id
            )
            if workers > 1:
                return _TensorFlowLoop(model, workers, index)
    return None
