"""Time and peak memory of PointCapsNet's training step on each backend.

usage: python benchmarks/point_capsnet.py [--backends tensorflow,torch,jax]
           [--batch 8] [--points 2048] [--size paper|small] [--repeats 3]
           [--warmup 1] [--timeout 900] [--json out.json]

`keras_capsules.models.PointCapsNet` at the paper's sizes (`--size paper`:
1024 primary capsules of 16, 64 latent capsules of 64, 2048 points
reconstructed; 69.5 million parameters) or small ones (`--size small`: 64
of 4, 8 of 8, for a quick check) trains as the autoencoder it is:
`model.compile()` (Adam, the Chamfer distance) and `model.train_on_batch(
points, points)` on `--batch` random clouds of `--points` points: the
encoder (per-point layers, primary capsules max-pooled over the points,
dynamic routing to the latent capsules), the patch decoder, the loss, the
gradient and Adam's update. Keras's default compilation: a `tf.function`
without XLA on TensorFlow on a CPU, XLA on JAX, eager torch.

Each backend runs in a fresh worker process (benchmarks/harness.py). The
worker builds the model and Adam's variables (`built`, RSS after that over
the imports: the weights and the optimizer's slots), runs `--warmup`
untimed steps (compilation), then `--repeats` timed ones, each after the C
heap's free pages are returned and the peak RSS reset (see
benchmarks/memory.py). Columns: time per step, "median (best)" of the
timed steps; `built MiB`; `step peak MiB`, the largest peak RSS of a timed
step over `built`.
"""

import os
import time

import harness
from memory import release_free_memory, reset_peak_rss

SIZES = {
    "paper": dict(primary_capsules=1024, primary_dim=16, latent_capsules=64, latent_dim=64),
    "small": dict(primary_capsules=64, primary_dim=4, latent_capsules=8, latent_dim=8),
}
LABELS = {"tensorflow": "TensorFlow, tf.function", "torch": "torch, eager", "jax": "JAX, jit"}


def worker(config):
    harness.worker_setup(config, torch_first=False)
    import keras
    import numpy as np

    import keras_capsules as kc

    keras.ops.convert_to_numpy(keras.ops.ones(2) * 2)  # the runtime up
    kc.models.PointCapsNet(num_points=8, **SIZES["small"]).build((None, 8, 3))  # code paths up
    release_free_memory()
    imports_mb = harness.proc_status_mib("VmRSS")
    keras.utils.set_random_seed(0)
    model = kc.models.PointCapsNet(num_points=config["points"], **SIZES[config["size"]])
    model.build((None, config["points"], 3))
    model.compile()
    model.optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(0)
    points = rng.uniform(-1, 1, (config["batch"], config["points"], 3)).astype("float32")
    release_free_memory()
    built_mb = harness.proc_status_mib("VmRSS")

    def step():
        release_free_memory()
        reset_peak_rss()
        start = time.perf_counter()
        loss = float(np.asarray(model.train_on_batch(points, points)))
        seconds = time.perf_counter() - start
        return {"s": seconds, "peak_rss_mb": harness.proc_status_mib("VmHWM"), "loss": loss}

    warmup = [step() for _ in range(config["warmup"])]
    steps = [step() for _ in range(config["repeats"])]
    harness.reply(
        "RESULT",
        imports_mb=imports_mb,
        built_mb=built_mb,
        parameters=model.count_params(),
        warmup=warmup,
        steps=steps,
        keras=keras.__version__,
    )
    os._exit(0)  # no interpreter teardown


def print_report(rows, args):
    title = (
        f"PointCapsNet ({args.size} sizes, {rows[0]['parameters']:,} parameters), batch "
        f"{args.batch} of {args.points} points, {harness.machine()}; time of a training "
        f"step, median (best) of {args.repeats}:"
    )
    cells = []
    for row in rows:
        if "error" in row:
            cells.append([LABELS[row["backend"]], f"failed: {row['error']}"])
            continue
        median, best = harness.median_best(s["s"] for s in row["steps"])
        peak = max(s["peak_rss_mb"] for s in row["steps"]) - row["built_mb"]
        built = row["built_mb"] - row["imports_mb"]
        cells.append(
            [
                LABELS[row["backend"]],
                f"{median * 1e3:,.0f} ms ({best * 1e3:,.0f})",
                f"{built:,.0f}",
                f"{peak:,.0f}",
            ]
        )
    harness.print_table(["backend", "step", "built MiB", "step peak MiB"], cells, title=title)


def main():
    parser = harness.argument_parser(__doc__)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--points", type=int, default=2048)
    parser.add_argument("--size", choices=sorted(SIZES), default="paper")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.worker:
        import json

        return worker(json.loads(args.worker))
    rows = []
    for backend in args.backends.split(","):
        config = dict(
            backend=backend, batch=args.batch, points=args.points, size=args.size,
            repeats=args.repeats, warmup=args.warmup,
        )  # fmt: skip
        harness.log(f"{backend}: PointCapsNet training steps")
        result, error = harness.measure(__file__, config, timeout=args.timeout)
        rows.append({**config, **result} if result else {**config, "error": error})
    print_report(rows, args)
    if args.json:
        harness.write_results(args.json, {"args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
