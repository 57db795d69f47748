"""Multi-process data-parallel training with `keras_capsules.distribute`.

Two OS processes on localhost (the launcher's environment: torchrun's
variables, TF_CONFIG, or the JAX coordinator variables) train the models
of tests/distributed_worker.py for 3 SGD steps, each on its own slice of a
fixed global batch (the other rows are noise there). Their final weights
must agree, and equal one process trained on the whole clean batch.
"""

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from tests import distributed_worker as worker
from tests.conftest import BACKEND, FAST_COMPILE_FLAGS, exclusive

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


def worker_environment():
    """This process's environment without a launcher's or device flags."""
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TF_CONFIG", "RANK", "WORLD_SIZE", "XLA_FLAGS")
    }
    base.update(
        XLA_FLAGS=FAST_COMPILE_FLAGS,
        PYTHONPATH=ROOT,
        KERAS_BACKEND=BACKEND,
        CUDA_VISIBLE_DEVICES="",
        OMP_NUM_THREADS="1",
    )
    return base


@contextlib.contextmanager
def started(out_dir, commands):
    """Starts `[(name, argv, env)]` logging to OUT/<name>.log; kills their
    process groups when the block ends, also on failure."""
    processes = []
    try:
        for name, argv, env in commands:
            with open(os.path.join(out_dir, f"{name}.log"), "w") as log:
                processes.append(
                    subprocess.Popen(
                        argv,
                        env=env,
                        cwd=ROOT,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        yield processes
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def worker_commands(args):
    """One `tests.distributed_worker` process per process id, as a launcher starts them."""
    ports, base = free_ports(PROCESSES), worker_environment()
    return [
        (
            f"worker{process_id}",
            [sys.executable, "-m", "tests.distributed_worker", *args],
            dict(base, **launcher_environment(process_id, ports)),
        )
        for process_id in range(PROCESSES)
    ]


def log_text(out_dir, name):
    with open(os.path.join(out_dir, f"{name}.log")) as f:
        return f.read()


def wait_all(out_dir, processes):
    deadline = time.monotonic() + TIMEOUT
    for process_id, process in enumerate(processes):
        try:
            code = process.wait(max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            code = "timeout"
        if code != 0:
            log = log_text(out_dir, f"worker{process_id}")
            pytest.fail(f"process {process_id} exited with {code}:\n{log[-4000:]}")


def run_workers(out_dir, names):
    """Runs the workers to the end; fails with the log of one that did not exit 0."""
    with started(out_dir, worker_commands([str(out_dir), *names])) as workers:
        wait_all(out_dir, workers)


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
            "chief_value": int(data["chief_value"]),
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
    assert [r["chief_value"] for r in runs] == [100] * PROCESSES  # Cluster.chief_value
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


def test_chief_value_must_be_a_31_bit_integer():
    from keras_capsules.distribute import Cluster

    assert Cluster(BACKEND).chief_value(2**31 - 1) == 2**31 - 1
    with pytest.raises(ValueError, match=r"Received: value=-1"):
        Cluster(BACKEND).chief_value(-1)


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


# What names the killed process 1: torchrun's report of the failed worker;
# TensorFlow's collective error; JAX's coordination service.
LOST_PROCESS_NAMED = {
    "torch": r"Root Cause[\s\S]*rank\s*: 1 \(local_rank: 1\)[\s\S]*SIGKILL",
    "tensorflow": r"/job:worker/replica:0/task:1",
    "jax": r"unhealthy \(stopped sending heartbeats\):\s+1\n",
}
FAIL_FAST_S = 60


def wait_for_files(paths, processes, timeout):
    deadline = time.monotonic() + timeout
    while not all(os.path.exists(p) for p in paths):
        exited = [p.returncode for p in processes if p.poll() is not None]
        if exited or time.monotonic() > deadline:
            pytest.fail(f"the processes did not all start training (exit codes: {exited})")
        time.sleep(0.2)


@pytest.mark.multiprocess
def test_a_killed_process_stops_the_other_with_its_name(tmp_path):
    """Process 1 of 2 is SIGKILLed mid-training: the run exits non-zero
    within a minute, and its output names process 1 (torch under torchrun,
    its launcher; TensorFlow and JAX: the surviving process)."""
    args = [str(tmp_path), "--until-killed"]
    if BACKEND == "torch":
        port = free_ports(1)[0]
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
        torchrun += ["--master_port", str(port), "-m", "tests.distributed_worker", *args]
        commands = [("torchrun", torchrun, worker_environment())]
    else:
        commands = worker_commands(args)
    with started(tmp_path, commands) as processes:
        markers = [tmp_path / f"started.{p}" for p in range(PROCESSES)]
        wait_for_files(markers, processes, TIMEOUT)
        if BACKEND == "torch":  # torchrun's workers are its children.
            os.kill(int(markers[1].read_text()), signal.SIGKILL)
            survivor, log = processes[0], "torchrun"
        else:
            os.killpg(processes[1].pid, signal.SIGKILL)
            survivor, log = processes[0], "worker0"
        killed = time.monotonic()
        try:
            code = survivor.wait(FAIL_FAST_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {FAIL_FAST_S} s after process 1 was killed")
        elapsed = time.monotonic() - killed
    text = log_text(tmp_path, log)
    assert code != 0, text[-3000:]
    assert re.search(LOST_PROCESS_NAMED[BACKEND], text), text[-3000:]
    print(f"{BACKEND}: exit {code} {elapsed:.1f} s after the kill")


def snapshot(process_id, output_dir, snapshot_dir):
    """What process 0 does mid-run in the resume test: copy the files a
    SIGKILL of the whole run at that moment would leave behind (the backup
    of the last finished epoch, the log) to `snapshot_dir`, and train on."""
    if process_id:
        return "pass"
    return f"""
os.makedirs({str(snapshot_dir)!r})
for name in ("backup.npz", "training_log.csv"):
    shutil.copy(os.path.join({str(output_dir)!r}, name), {str(snapshot_dir)!r})
"""


def example_commands(output_dir, flags, prelude=lambda process_id: ""):
    """tests/examples/resume_worker.py with --distribute, one process per process id,
    each after the code `prelude(process_id)`."""
    ports, base = free_ports(PROCESSES), worker_environment()
    args = [str(output_dir), "--distribute", *flags]
    code = f"from tests.examples import resume_worker\nresume_worker.main(*{args!r})\n"
    return [
        (
            f"worker{process_id}",
            [sys.executable, "-c", prelude(process_id) + code],
            dict(base, **launcher_environment(process_id, ports)),
        )
        for process_id in range(PROCESSES)
    ]


@pytest.mark.multiprocess
def test_a_two_process_run_resumes_from_process_0s_backup(tmp_path):
    """An uninterrupted 2-process run leaves, mid-epoch 2, the files a kill
    would leave (process 0's backup of epoch 1); both processes resume from
    them to the same weights and log as the uninterrupted run."""
    import keras

    from tests.examples.test_resume import RUN, at_step

    straight, resumed = tmp_path / "straight", tmp_path / "resumed"

    def prelude(process_id):  # Step 8: the second batch of epoch 2.
        return at_step(8, snapshot(process_id, straight, resumed))

    with started(tmp_path, example_commands(straight, RUN, prelude)) as processes:
        wait_all(tmp_path, processes)
    assert not (straight / "backup.npz").exists()  # finished
    assert len((resumed / "training_log.csv").read_text().splitlines()) == 2  # header, epoch 1
    with started(tmp_path, example_commands(resumed, [*RUN, "--resume"])) as processes:
        wait_all(tmp_path, processes)
    assert "1 of 3 epochs done" in log_text(tmp_path, "worker1")

    def weights(path):
        model = keras.saving.load_model(path, safe_mode=True)
        return [keras.ops.convert_to_numpy(w) for w in model.weights]

    for a, b in zip(weights(resumed / "model.keras"), weights(straight / "model.keras")):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    log = (resumed / "training_log.csv").read_text()
    assert log == (straight / "training_log.csv").read_text() and len(log.splitlines()) == 4
