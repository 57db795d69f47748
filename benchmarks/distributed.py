"""Training images/s of `keras_capsules.distribute` on 1 and on N processes.

usage: python benchmarks/distributed.py [--backends torch,tensorflow,jax]
           [--processes 1,2] [--batch 32] [--steps 10] [--warmup 2] [--repeats 2]
           [--threads N]

For each backend and process count, starts the processes on localhost with
the launcher environment of `keras_capsules.distribute` (torchrun's
variables, TF_CONFIG, the JAX coordinator variables; one process: no
launcher, plain `model.fit`). Each trains `EfficientCapsNet()` (MNIST
sized) with Adam on random in-memory global batches of `--batch` images,
`--warmup` steps untimed, then `--steps` timed; process 0 reports the
global images/s; the runs of each backend alternate between the process
counts for `--repeats` rounds, and the median is reported (the convention
of benchmarks/harness.py; the processes of one run train together, so they
are started here, not as harness workers). The CPU threads are split over
the processes (cores / processes each; `--threads` sets it). TensorFlow
runs without XLA on both sides (the multi-worker step is a `tf.function`),
JAX jitted, torch eager.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

import harness


def free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def launcher_env(backend, processes, process_id, ports):
    if processes == 1:
        return {}
    if backend == "torch":
        return {
            "RANK": str(process_id),
            "LOCAL_RANK": str(process_id),
            "WORLD_SIZE": str(processes),
            "MASTER_ADDR": "localhost",
            "MASTER_PORT": str(ports[0]),
        }
    if backend == "tensorflow":
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
        "JAX_NUM_PROCESSES": str(processes),
        "JAX_PROCESS_ID": str(process_id),
    }


def measure(backend, processes, args):
    threads = str(args.threads or max(1, os.cpu_count() // processes))
    ports = [free_port() for _ in range(processes)]
    env = dict(
        os.environ,
        PYTHONPATH=harness.ROOT,
        KERAS_BACKEND=backend,
        OMP_NUM_THREADS=threads,
        TF_NUM_INTRAOP_THREADS=threads,
        TF_NUM_INTEROP_THREADS="1",
        XLA_FLAGS=f"--xla_cpu_multi_thread_eigen={'true' if threads != '1' else 'false'}",
    )
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--worker",
                str(args.batch),
                str(args.warmup),
                str(args.steps),
            ],
            env=dict(env, **launcher_env(backend, processes, i, ports)),
            cwd=harness.ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(processes)
    ]
    try:
        outputs = [w.communicate(timeout=900)[0] for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    for w, out in zip(workers, outputs):
        if w.returncode:
            raise RuntimeError(f"{backend} x{processes} failed: {out[-2000:]}")
    return json.loads(outputs[0].strip().splitlines()[-1])


def worker(batch, warmup, steps):
    if os.environ.get("KERAS_BACKEND") == "torch":
        import torch  # noqa: F401  (before tensorflow)
    import keras
    import numpy as np
    import tensorflow as tf

    import keras_capsules as kc
    from keras_capsules import distribute

    class Timer(keras.callbacks.Callback):
        def on_train_batch_end(self, batch_index, logs=None):
            if batch_index + 1 == warmup:
                self.start = time.perf_counter()
            self.end = time.perf_counter()

    rng = np.random.default_rng(0)
    images = rng.uniform(0, 1, (batch * 4, 28, 28, 1)).astype("float32")
    labels = rng.integers(0, 10, batch * 4)
    multi = distribute.launcher_environment() is not None
    timer = Timer()
    # The scope first: TF's collectives must be set up before any TF op runs.
    with distribute.scope() if multi else _nothing() as cluster:
        dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(batch).repeat()
        model = kc.models.EfficientCapsNet()
        model.compile(optimizer="adam", jit_compile=keras.backend.backend() == "jax")
        distribute.fit(model, dataset, steps_per_epoch=warmup + steps, callbacks=[timer], verbose=0)
        if cluster is None or cluster.is_chief:
            print(json.dumps({"images_per_second": steps * batch / (timer.end - timer.start)}))


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="torch,tensorflow,jax")
    parser.add_argument("--processes", default="1,2")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads per process (default: cores / processes)",
    )
    args = parser.parse_args()
    counts = list(map(int, args.processes.split(",")))
    rows = []
    for backend in args.backends.split(","):
        runs = {n: [] for n in counts}
        for _ in range(args.repeats):
            for n in counts:
                runs[n].append(measure(backend, n, args)["images_per_second"])
        rates = {n: harness.median_best(r, higher_is_better=True)[0] for n, r in runs.items()}
        for n in counts:
            harness.log(f"{backend}, {n} process(es): {rates[n]:.1f} images/s")
            rows.append(
                [
                    backend,
                    n,
                    f"{rates[n]:.1f}",
                    ", ".join(f"{r:.1f}" for r in runs[n]),
                    f"x{rates[n] / rates[1]:.2f}" if 1 in rates else "",
                ]
            )
    harness.print_table(
        ["backend", "processes", "images/s median", "runs", "vs 1 process"],
        rows,
        title=f"{harness.machine()}; EfficientCapsNet, global batch {args.batch}, "
        f"{args.steps} timed steps, median of {args.repeats}",
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(*map(int, sys.argv[2:5]))
    else:
        main()
