"""Data-parallel training on one or many processes, on each backend's own engine.

`scope()` sets up the backend's data parallelism and `fit()` trains in it:

- JAX: `jax.distributed.initialize` (CPU collectives: gloo) and
  `keras.distribution.DataParallel` over the devices of every process;
  `model.fit` shards a `tf.data` dataset of global batches per process.
- TensorFlow: `tf.distribute.MultiWorkerMirroredStrategy` from `TF_CONFIG`
  (one process: `MirroredStrategy` over the local devices); `model.fit`
  shards the data per worker.
- PyTorch: `torch.distributed` (NCCL on GPU, gloo on CPU) and
  `DistributedDataParallel` around the Keras model, in a torch training
  loop as in the Keras guide "Multi-GPU distributed training with
  PyTorch"; each process takes its slice of every global batch, as
  `DistributedSampler` does. The model's own optimizer applies the averaged
  gradients, so schedules, `optimizer.iterations` and callbacks such as
  `SpreadLossMarginScheduler` behave as in `model.fit`.

Multi-process runs are recognised by the launcher's environment:

- torch: `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT` (and
  `LOCAL_RANK`), as `torchrun` sets them;
- tensorflow: `TF_CONFIG`, the cluster's `worker` addresses and this `task`;
- jax: `JAX_COORDINATOR_ADDRESS` (host:port of process 0),
  `JAX_NUM_PROCESSES` and `JAX_PROCESS_ID`.

Without them, `scope()` uses the devices of this process (torch needs
`torchrun`, also on one machine). Every process runs the same program on
the same global batches; the gradient is the mean over the global batch
(equal slices per process), so `n` processes at global batch `B` train as
one process at `B`. BatchNormalization statistics are global on JAX (one
global array), per replica on TensorFlow (unless the layer is built with
`synchronized=True`) and per process on torch.

Example (each process runs this, started by a launcher such as
`torchrun`; `images`, `labels` hold the whole data; not a doctest, as it
takes several processes):

```python
with keras_capsules.distribute.scope() as cluster:  # Before any TF/JAX op.
    dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(64)
    model = keras_capsules.models.EfficientCapsNet((28, 28, 1), 10)
    model.compile(optimizer="adam", metrics=["accuracy"])
    keras_capsules.distribute.fit(model, dataset, epochs=5)
    if cluster.is_chief:
        model.save("model.keras")
```

Modules: `cluster` (the launcher's environment, `Cluster`), `engines`
(`scope()`), `sharding` (`local_batches`), `training` (`fit`, `evaluate`)
and its per-process loops (`loop`, `tensorflow_loop`, `torch_loop`).
"""

from keras_capsules.distribute.cluster import (
    JAX_VARIABLES,
    TORCH_VARIABLES,
    Cluster,
    launcher_environment,
)
from keras_capsules.distribute.engines import JAX_HEARTBEAT_TIMEOUT_S, scope
from keras_capsules.distribute.sharding import local_batches
from keras_capsules.distribute.training import evaluate, fit
