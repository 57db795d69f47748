"""Each process's slice of the global batches."""

import keras
import numpy as np


def local_batches(x, y=None, batch_size=None, num_processes=1, process_id=0):
    """This process's `(inputs, labels)` slices of the global batches.

    A `tf.data` dataset of global batches is rebatched to `batch /
    num_processes` and process `r` takes slice `r` of each batch, as
    `keras.distribution` does on JAX and `MultiWorkerMirroredStrategy`'s
    DATA sharding does. Arrays on torch go through `DistributedSampler` and
    a `DataLoader` of the local batch size, as in the Keras guide.

    Args:
        x: a batched `tf.data.Dataset` of `(inputs, labels)`, or inputs.
        y: labels when `x` is an array.
        batch_size: the global batch size, a multiple of `num_processes`;
            for a dataset, default its `element_spec`'s batch dimension or
            the size of its first batch.
        num_processes, process_id: the processes, and this one.

    Returns:
        an iterator of `(inputs, labels)` local batches of `batch_size /
        num_processes` examples.

    Example (process 1 of 2, global batches of 4):

    ```python
    for inputs, labels in local_batches(images, labels, batch_size=4,
                                        num_processes=2, process_id=1):
        ...  # inputs: (2, ...), examples 2-3, 6-7, ... of `images`
    ```
    """
    if y is not None and keras.backend.backend() == "torch":
        import torch

        _check_divisible(batch_size, num_processes)
        data = torch.utils.data.TensorDataset(
            torch.as_tensor(np.asarray(x)), torch.as_tensor(np.asarray(y))
        )
        sampler = torch.utils.data.distributed.DistributedSampler(
            data, num_processes, process_id, shuffle=False, drop_last=True
        )
        yield from torch.utils.data.DataLoader(
            data, batch_size=batch_size // num_processes, sampler=sampler, drop_last=True
        )
        return
    import tensorflow as tf

    if y is not None:
        x = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size, drop_remainder=True)
    global_batch = _dataset_batch_size(x, batch_size)
    _check_divisible(global_batch, num_processes)
    dataset = x.rebatch(global_batch // num_processes).shard(num_processes, process_id)
    for batch in dataset.as_numpy_iterator():
        yield batch[:2]


def _dataset_batch_size(dataset, batch_size=None):
    # The caller's batch_size, else the static batch dimension of the
    # dataset's inputs (known when batched with drop_remainder=True), else
    # the size of its first batch (a last, smaller batch is dropped later).
    import tensorflow as tf

    if batch_size is not None:
        return int(batch_size)
    first = tf.nest.flatten(dataset.element_spec)[0]
    if first.shape.rank and first.shape[0] is not None:
        return int(first.shape[0])
    for batch in dataset.take(1):
        return int(tf.nest.flatten(batch)[0].shape[0])
    raise ValueError(f"`x` is an empty dataset. Received: x={dataset}")


def _check_divisible(batch_size, num_processes):
    if batch_size is None or batch_size <= 0 or batch_size % num_processes:
        raise ValueError(
            f"The global batch size must be a multiple of the {num_processes} "
            f"processes. Received: batch_size={batch_size}"
        )
