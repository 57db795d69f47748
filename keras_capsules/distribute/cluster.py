"""Where this process stands in a run: the launcher's environment, `Cluster`."""

import dataclasses
import os

import keras
import numpy as np

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
        a dict of the launcher's variables for `backend` (see the
        `keras_capsules.distribute` docstring), or `None` outside a
        multi-process launch. Raises a `ValueError` when only some of JAX's
        three variables are set.

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


def _tf_worker(cluster, task_type, task_index):
    """(workers, this worker's index) of a TF_CONFIG cluster; a chief is 0.

    Both the TensorFlow engine (from `TF_CONFIG`) and the training loop
    (from the strategy's resolver) place the process with it."""
    chiefs = len(cluster.get("chief", []))
    return chiefs + len(cluster.get("worker", [])), task_index + (
        chiefs if task_type == "worker" else 0
    )
