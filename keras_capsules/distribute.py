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
"""

import contextlib
import dataclasses
import json
import os

import keras
import numpy as np

from keras_capsules.models.capsule_model import CapsuleModel

JAX_VARIABLES = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")
TORCH_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclasses.dataclass
class Cluster:
    """Where this process stands in a data-parallel run.

    Attributes:
        backend: the Keras backend.
        num_processes: processes training together.
        process_id: this process, `0` (the chief) to `num_processes - 1`.
        replicas: model replicas in sync (devices over all processes).
        engine: the backend object driving it: a `tf.distribute.Strategy`,
            a `keras.distribution.DataParallel`, or the torch device.

    Example:

    >>> cluster = keras_capsules.distribute.Cluster("jax", num_processes=2, process_id=1)
    >>> cluster.is_chief, cluster.multi_process
    (False, True)
    >>> keras_capsules.distribute.Cluster("jax").chief_value(7)  # One process: its own.
    7
    """

    backend: str
    num_processes: int = 1
    process_id: int = 0
    replicas: int = 1
    engine: object = None

    @property
    def is_chief(self):
        return self.process_id == 0

    @property
    def multi_process(self):
        return self.num_processes > 1

    def chief_value(self, value):
        """Process 0's integer `value` (`0 <= value < 2**31`), on every
        process: a collective, which every process calls. E.g. the seed that
        process 0 drew, for all."""
        if not 0 <= int(value) < 2**31:
            raise ValueError(f"`value` must be in [0, 2**31). Received: value={value}")
        value = int(value)
        if not self.multi_process:
            return value
        if self.backend == "torch":
            import torch
            import torch.distributed as dist

            tensor = torch.tensor([value], dtype=torch.int64)
            dist.broadcast(tensor, 0)
            return int(tensor.item())
        if self.backend == "jax":
            from jax.experimental import multihost_utils

            return int(multihost_utils.broadcast_one_to_all(np.int32(value)))
        import tensorflow as tf

        # A sum over the replicas, of which only the chief's first is not 0.
        strategy, mine = self.engine, tf.constant(value if self.is_chief else 0, tf.int64)

        def replica_value():
            first = tf.distribute.get_replica_context().replica_id_in_sync_group == 0
            return tf.where(first, mine, tf.zeros_like(mine))

        total = strategy.reduce("SUM", strategy.run(replica_value), axis=None)
        return int(total.numpy())


def launcher_environment(backend=None, environ=None):
    """The multi-process launcher settings found in the environment, or None.

    Args:
        backend: the Keras backend; default the current one.
        environ: the environment mapping; default `os.environ`.

    Returns:
        a dict of the launcher's variables for `backend` (see the module
        docstring), or `None` outside a multi-process launch. Raises a
        `ValueError` when only some of JAX's three variables are set.

    Example:

    >>> keras_capsules.distribute.launcher_environment("jax", {
    ...     "JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234", "JAX_NUM_PROCESSES": "2",
    ...     "JAX_PROCESS_ID": "1", "HOME": "/root"})
    {'JAX_COORDINATOR_ADDRESS': '10.0.0.1:1234', 'JAX_NUM_PROCESSES': '2', 'JAX_PROCESS_ID': '1'}
    >>> keras_capsules.distribute.launcher_environment("torch", {}) is None
    True
    """
    backend = backend or keras.backend.backend()
    environ = os.environ if environ is None else environ
    if backend == "torch" and all(k in environ for k in TORCH_VARIABLES):
        return {k: environ[k] for k in TORCH_VARIABLES}
    if backend == "tensorflow" and environ.get("TF_CONFIG"):
        return {"TF_CONFIG": environ["TF_CONFIG"]}
    if backend == "jax" and any(k in environ for k in JAX_VARIABLES):
        missing = [k for k in JAX_VARIABLES if not environ.get(k)]
        if missing:
            raise ValueError(
                f"A multi-process JAX run needs {', '.join(JAX_VARIABLES)}. "
                f"Received: {', '.join(f'{k}={environ.get(k)!r}' for k in JAX_VARIABLES)}"
            )
        return {k: environ[k] for k in JAX_VARIABLES}
    return None


@contextlib.contextmanager
def scope():
    """Sets up data parallelism for the current backend; yields a `Cluster`.

    Build and compile the model inside it. On JAX and TensorFlow call it
    before anything else runs on the backend (the engines must start
    before the runtime does).

    Returns:
        a context manager yielding this process's `Cluster`.

    Example: see the module docstring (it needs a launcher, or a fresh
    process, so it is not run here).
    """
    backend = keras.backend.backend()
    launcher = launcher_environment(backend)
    if backend == "jax":
        with _jax_scope(launcher) as cluster:
            yield cluster
    elif backend == "tensorflow":
        with _tensorflow_scope(launcher) as cluster:
            yield cluster
    elif backend == "torch":
        with _torch_scope(launcher) as cluster:
            yield cluster
    else:
        raise ValueError(f"Unsupported Keras backend for data parallelism. Received: {backend}")


# Seconds without a heartbeat after which JAX's coordination service takes
# a process for dead and stops the others (with a message naming it).
JAX_HEARTBEAT_TIMEOUT_S = 30


@contextlib.contextmanager
def _jax_scope(launcher):
    import jax

    if launcher is not None:
        # XLA's CPU client needs cross-process collectives (gloo is the
        # default in recent JAX, older ones had none); an explicit
        # $JAX_CPU_COLLECTIVES_IMPLEMENTATION (e.g. mpi) wins.
        if not os.environ.get("JAX_CPU_COLLECTIVES_IMPLEMENTATION"):
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        # What keras.distribution.initialize does, with a shorter heartbeat:
        # at JAX's default (100 s) the survivors of a dead process waited
        # 94 s here before the coordination service stopped them.
        jax.distributed.initialize(
            coordinator_address=launcher["JAX_COORDINATOR_ADDRESS"],
            num_processes=int(launcher["JAX_NUM_PROCESSES"]),
            process_id=int(launcher["JAX_PROCESS_ID"]),
            heartbeat_timeout_seconds=JAX_HEARTBEAT_TIMEOUT_S,
        )
        # Then one random seed for all processes (process 0's draw, itself
        # fixed by an earlier keras.utils.set_random_seed), so that every
        # process initialises the same weights.
        from jax.experimental import multihost_utils

        draw = np.int32(np.random.randint(2**31 - 1))
        keras.utils.set_random_seed(int(multihost_utils.broadcast_one_to_all(draw)))
    devices = keras.distribution.list_devices()  # Every process's devices.
    distribution = keras.distribution.DataParallel(devices=devices)
    keras.distribution.set_distribution(distribution)
    try:
        yield Cluster("jax", jax.process_count(), jax.process_index(), len(devices), distribution)
    finally:
        keras.distribution.set_distribution(None)
    if launcher is not None:  # Waits for every process: not after an error.
        jax.distributed.shutdown()


@contextlib.contextmanager
def _tensorflow_scope(launcher):
    import tensorflow as tf

    if launcher is not None:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()  # Reads TF_CONFIG.
        config = json.loads(launcher["TF_CONFIG"])
        num_processes, process_id = _tf_worker(
            config["cluster"], config["task"]["type"], config["task"]["index"]
        )
    else:
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        strategy = tf.distribute.MirroredStrategy([d.name for d in devices])
        num_processes, process_id = 1, 0
    with strategy.scope():
        yield Cluster(
            "tensorflow", num_processes, process_id, strategy.num_replicas_in_sync, strategy
        )


@contextlib.contextmanager
def _torch_scope(launcher):
    import torch
    import torch.distributed as dist

    if launcher is None:
        raise ValueError(
            "Data-parallel training on the torch backend runs one process per "
            "device: start it with torchrun, e.g. `torchrun --nproc_per_node=2 "
            "script.py ...`, which sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT. "
            "Received: none of them set"
        )
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    started = not dist.is_initialized()
    if started:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        yield Cluster(
            "torch", dist.get_world_size(), dist.get_rank(), dist.get_world_size(), device
        )
    finally:
        if started:
            dist.destroy_process_group()


def _tf_worker(cluster, task_type, task_index):
    """(workers, this worker's index) of a TF_CONFIG cluster; a chief is 0."""
    chiefs = len(cluster.get("chief", []))
    return chiefs + len(cluster.get("worker", [])), task_index + (
        chiefs if task_type == "worker" else 0
    )


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

    Example: see the module docstring.
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
    the module docstring's `scope()`.
    """
    loop = _multi_process_loop(model)
    if loop is None:
        return model.evaluate(x, y, batch_size=batch_size, steps=steps, verbose=0, return_dict=True)
    return loop.evaluate(x, y, batch_size, steps)


def _multi_process_loop(model):
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


class _Loop:
    """The epochs, steps and callbacks of `fit` around a per-process step."""

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


class _TensorFlowLoop(_Loop):
    """`MultiWorkerMirroredStrategy`: each worker runs `model.train_step` on its slice.

    Under the strategy Keras scales each replica's loss by `1 / replicas` and
    the optimizer sums the gradients of all replicas (collective ops), so
    each step is one step on the global batch. The strategy runs Keras's own
    `train_step` / `test_step`; the step functions are ours because Keras
    3's reduce of the logs fails under this strategy (keras-team/keras#20585).
    Metrics are sync-on-read variables: read here, they are global.
    """

    def __init__(self, model, num_processes, process_id):
        import tensorflow as tf

        super().__init__(model, num_processes, process_id)
        strategy = model.distribute_strategy

        def run(step):
            @tf.function
            def function(inputs, labels):
                strategy.run(step, args=((inputs, labels),))
                # Read outside the replicas: summed over the workers.
                return model.get_metrics_result()

            return function

        self._train, self._test = run(model.train_step), run(model.test_step)
        self.optimizer_built = False

    def _build_optimizer(self):
        # Its variables, mirrored, before the first step is traced.
        if not self.optimizer_built:
            with self.model.distribute_strategy.scope():
                self.model.optimizer.build(self.model.trainable_variables)
            self.optimizer_built = True

    def train_step(self, inputs, labels):
        self._build_optimizer()
        return {k: float(v) for k, v in self._train(inputs, labels).items()}

    def evaluate(self, x, y, batch_size, steps):
        self.model.reset_metrics()
        logs = {}
        for step, (inputs, labels) in enumerate(self.batches(x, y, batch_size)):
            logs = self._test(inputs, labels)
            if step + 1 == steps:
                break
        return {k: float(v) for k, v in logs.items()}


class _TorchLoop(_Loop):
    """`DistributedDataParallel` around the Keras model (the Keras torch guide).

    The forward pass and `model.compute_loss` run inside the DDP module, whose
    backward pass averages the gradients over the processes; the model's
    optimizer applies them. Logs are this process's, averaged over the
    processes at the end of each epoch.
    """

    def __init__(self, model, num_processes, process_id):
        import torch

        super().__init__(model, num_processes, process_id)

        class TrainStep(torch.nn.Module):
            def __init__(self, model):
                super().__init__()
                self.model = model

            def forward(self, inputs, labels):
                # The ready models return the poses their loss decodes too.
                if isinstance(self.model, CapsuleModel):
                    y_pred = self.model(inputs, training=True, return_poses=True)
                else:
                    y_pred = self.model(inputs, training=True)
                return self.model.compute_loss(inputs, labels, y_pred, training=True), y_pred

        device_ids = [torch.cuda.current_device()] if torch.cuda.is_available() else None
        # DDP broadcasts process 0's variables now, then averages the gradients.
        self.module = torch.nn.parallel.DistributedDataParallel(TrainStep(model), device_ids)
        self.losses = []

    def train_step(self, inputs, labels):
        import torch

        model, trainable = self.model, self.model.trainable_variables
        inputs, labels = keras.ops.convert_to_tensor(inputs), keras.ops.convert_to_tensor(labels)
        for variable in trainable:
            variable.value.grad = None
        loss, y_pred = self.module(inputs, labels)
        loss.backward()
        with torch.no_grad():
            model.optimizer.apply([v.value.grad for v in trainable], trainable)
            logs = dict(model.compute_metrics(inputs, labels, y_pred))
        self.losses.append(float(loss.detach()))
        logs["loss"] = float(np.mean(self.losses))
        return {k: float(keras.ops.convert_to_numpy(v)) for k, v in logs.items()}

    def epoch_logs(self, logs):
        import torch.distributed as dist

        self.losses = []
        # Non-trainable variables (BatchNorm statistics) follow process 0,
        # as DDP's `broadcast_buffers` does for torch modules.
        for variable in self.model.non_trainable_variables:
            dist.broadcast(variable.value.data, 0)
        return _mean_over_processes(logs)

    def evaluate(self, x, y, batch_size, steps):
        self.model.reset_metrics()
        logs = {}
        for step, (inputs, labels) in enumerate(self.batches(x, y, batch_size)):
            logs = self.model.test_on_batch(inputs, labels, return_dict=True)
            if step + 1 == steps:
                break
        return _mean_over_processes(logs)


def _mean_over_processes(logs):
    """Per-process means -> global means (equal slices per process)."""
    import torch
    import torch.distributed as dist

    if not logs:
        return {}
    values = torch.tensor([float(v) for v in logs.values()], dtype=torch.float64)
    dist.all_reduce(values)
    values /= dist.get_world_size()
    return dict(zip(logs, values.tolist()))
