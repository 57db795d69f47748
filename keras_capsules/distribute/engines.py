"""`scope()`: each backend's data-parallel engine, started and stopped.

Every engine imports its backend inside its function, so importing
`keras_capsules` loads no backend.
"""

import contextlib
import json
import os

import keras
import numpy as np

from keras_capsules.distribute.cluster import Cluster, _tf_worker, launcher_environment

# Seconds without a heartbeat after which JAX's coordination service takes a
# process for dead and stops the others (with a message naming it): the
# default of `scope(heartbeat_timeout_s=)`. At JAX's own default (100 s) the
# survivors of a dead process waited 94 s on a 2-core CPU machine.
JAX_HEARTBEAT_TIMEOUT_S = 30


@contextlib.contextmanager
def scope(heartbeat_timeout_s=JAX_HEARTBEAT_TIMEOUT_S):
    """Sets up data parallelism for the current backend; yields a `Cluster`.

    Build and compile the model inside it. On JAX and TensorFlow call it
    before anything else runs on the backend (the engines must start
    before the runtime does).

    Args:
        heartbeat_timeout_s: on JAX with several processes, the seconds
            without a heartbeat after which a process is taken for dead
            and the others are stopped (default `JAX_HEARTBEAT_TIMEOUT_S`,
            30); the other engines detect a lost process themselves.

    Returns:
        a context manager yielding this process's `Cluster`.

    Example: see the `keras_capsules.distribute` docstring (it needs a
    launcher, or a fresh process, so it is not run here).
    """
    backend = keras.backend.backend()
    launcher = launcher_environment(backend)
    if backend == "jax":
        with _jax_scope(launcher, heartbeat_timeout_s) as cluster:
            yield cluster
    elif backend == "tensorflow":
        with _tensorflow_scope(launcher) as cluster:
            yield cluster
    elif backend == "torch":
        with _torch_scope(launcher) as cluster:
            yield cluster
    else:
        raise ValueError(f"Unsupported Keras backend for data parallelism. Received: {backend}")


@contextlib.contextmanager
def _jax_scope(launcher, heartbeat_timeout_s):
    import jax

    if launcher is not None:
        # XLA's CPU client needs cross-process collectives (gloo is the
        # default in recent JAX, older ones had none); an explicit
        # $JAX_CPU_COLLECTIVES_IMPLEMENTATION (e.g. mpi) wins.
        if not os.environ.get("JAX_CPU_COLLECTIVES_IMPLEMENTATION"):
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        # What keras.distribution.initialize does, with a shorter heartbeat.
        jax.distributed.initialize(
            coordinator_address=launcher["JAX_COORDINATOR_ADDRESS"],
            num_processes=int(launcher["JAX_NUM_PROCESSES"]),
            process_id=int(launcher["JAX_PROCESS_ID"]),
            heartbeat_timeout_seconds=heartbeat_timeout_s,
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
