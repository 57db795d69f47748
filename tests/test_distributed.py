"""Multi-process data-parallel training with `keras_capsules.distribute`.

Two OS processes on localhost (the launcher's environment: torchrun's
variables, TF_CONFIG, or the JAX coordinator variables) train the models
of tests/distributed_worker.py for 3 SGD steps, each on its own slice of a
fixed global batch (the other rows are noise there). Their final weights
must agree, and equal one process trained on the whole clean batch.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from tests import distributed_worker as worker
from tests.conftest import BACKEND, exclusive

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROCESSES = 2
TIMEOUT = 240  # Seconds for all workers of one run (a loaded 2-core machine).


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def launcher_environment(process_id, ports):
    """What torchrun, a TF_CONFIG cluster or a JAX launcher would set."""
    if BACKEND == "torch":
        return {
            "RANK": str(process_id),
            "LOCAL_RANK": str(process_id),
            "WORLD_SIZE": str(PROCESSES),
            "MASTER_ADDR": "localhost",
            "MASTER_PORT": str(ports[0]),
        }
    if BACKEND == "tensorflow":
        return {
            "TF_CONFIG": json.dumps(
                {
                    "cluster": {"worker": [f"localhost:{p}" for p in ports]},
                    "task": {"type": "worker", "index": process_id},
                }
            )
        }
    return {
        "JAX_COORDINATOR_ADDRESS": f"localhost:{ports[0]}",
        "JAX_NUM_PROCESSES": str(PROCESSES),
        "JAX_PROCESS_ID": str(process_id),
    }


def run_workers(out_dir, names):
    """Runs the workers to the end; kills their process groups on any failure."""
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TF_CONFIG", "RANK", "WORLD_SIZE", "XLA_FLAGS")
    }
    base.update(
        PYTHONPATH=ROOT, KERAS_BACKEND=BACKEND, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1"
    )
    ports, workers = free_ports(PROCESSES), []
    try:
        for process_id in range(PROCESSES):
            log = open(os.path.join(out_dir, f"worker{process_id}.log"), "w")
            workers.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tests.distributed_worker", str(out_dir), *names],
                    env=dict(base, **launcher_environment(process_id, ports)),
                    cwd=ROOT,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
            log.close()
        deadline = time.monotonic() + TIMEOUT
        for process_id, process in enumerate(workers):
            try:
                code = process.wait(max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                code = "timeout"
            if code != 0:
                with open(os.path.join(out_dir, f"worker{process_id}.log")) as f:
                    pytest.fail(f"worker {process_id} exited with {code}:\n{f.read()[-4000:]}")
    finally:
        for process in workers:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def load(out_dir, name, process_id):
    with np.load(os.path.join(out_dir, f"{name}.{process_id}.npz")) as data:
        count = int(data["count"])
        arrays = [data[f"arr_{i}"] for i in range(2 * count)]
        return {
            "initial": arrays[:count],
            "final": arrays[count:],
            "num_processes": int(data["num_processes"]),
            "replicas": int(data["replicas"]),
            "margin": float(data["margin"]),
        }


def single_process(name, initial):
    """One process, no distribution, on the whole clean batch."""
    import keras

    keras.utils.set_random_seed(0)
    model, callbacks = worker.build(name)
    model.set_weights(initial)
    worker.train(model, callbacks, *worker.global_batch(name))
    return model, worker.weights(model)


# All models train in the same two processes (one start-up).
MODEL_NAMES = ["capsule", "efficient_capsnet", "matrix_capsnet"]


@pytest.fixture(scope="module")
def cluster_run(request, tmp_path_factory):
    """The workers' output dir. Under pytest-xdist the first test process to
    need it runs the workers, the others of this run wait and read it."""
    root = tmp_path_factory.getbasetemp()
    if hasattr(request.config, "workerinput"):  # An xdist process: share the run's dir.
        root = root.parent
    out_dir = root / f"distributed-{BACKEND}"
    with exclusive(root / f"distributed-{BACKEND}.lock"):
        if not (out_dir / "done").exists():
            out_dir.mkdir(exist_ok=True)
            run_workers(out_dir, MODEL_NAMES)
            (out_dir / "done").touch()
    return out_dir


def assert_weights_match(runs, expected):
    for run in runs[1:]:
        for a, b in zip(runs[0]["final"], run["final"]):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    for got, want in zip(runs[0]["final"], expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", MODEL_NAMES[:2])
def test_two_processes_train_as_one_on_the_whole_batch(cluster_run, name):
    runs = [load(cluster_run, name, p) for p in range(PROCESSES)]
    assert [r["num_processes"] for r in runs] == [PROCESSES] * PROCESSES
    assert runs[0]["replicas"] >= PROCESSES
    _, expected = single_process(name, runs[0]["initial"])
    # The steps changed the weights: a run that learnt nothing cannot pass.
    assert max(np.abs(a - b).max() for a, b in zip(expected, runs[0]["initial"])) > 1e-3
    assert_weights_match(runs, expected)


@pytest.mark.multiprocess
def test_spread_loss_margin_is_the_same_on_every_process(cluster_run):
    runs = [load(cluster_run, "matrix_capsnet", p) for p in range(PROCESSES)]
    model, expected = single_process("matrix_capsnet", runs[0]["initial"])
    # Set before each of the 3 steps from optimizer.iterations: margin_at(2).
    scheduler = worker.kc.callbacks.SpreadLossMarginScheduler(
        model.spread_loss, 0.2, 0.9, worker.MARGIN_STEPS
    )
    margin = scheduler.margin_at(worker.STEPS - 1)
    assert float(np.asarray(model.spread_loss.margin.numpy())) == pytest.approx(margin)
    for run in runs:
        assert run["margin"] == pytest.approx(margin)
    assert_weights_match(runs, expected)


def test_launcher_environment_is_read_per_backend():
    from keras_capsules.distribute import launcher_environment

    assert launcher_environment("jax", {}) is None
    assert launcher_environment("torch", {"TF_CONFIG": "{}"}) is None
    torch_env = dict(RANK="1", WORLD_SIZE="2", MASTER_ADDR="h", MASTER_PORT="1")
    assert launcher_environment("torch", torch_env) == torch_env
    assert launcher_environment("tensorflow", {"TF_CONFIG": "{}"}) == {"TF_CONFIG": "{}"}
    with pytest.raises(
        ValueError, match="Received: JAX_COORDINATOR_ADDRESS='h:1', JAX_NUM_PROCESSES=None"
    ):
        launcher_environment("jax", {"JAX_COORDINATOR_ADDRESS": "h:1"})


def test_global_batch_must_split_evenly():
    from keras_capsules.distribute import local_batches

    images, labels = np.zeros((6, 2), "float32"), np.zeros(6, "int32")
    with pytest.raises(ValueError, match="Received: batch_size=3"):
        next(local_batches(images, labels, batch_size=3, num_processes=2, process_id=0))
    slices = list(local_batches(images + np.arange(6)[:, None], labels, 6, 2, 1))
    assert len(slices) == 1
    np.testing.assert_array_equal(
        np.asarray(slices[0][0])[:, 0], [1, 3, 5] if BACKEND == "torch" else [3, 4, 5]
    )
