"""Peak memory and time of a ConvCapsule3D training step vs the volume's side.

usage: python benchmarks/volume_memory.py [--backends tensorflow,torch,jax]
           [--sides 8,12,16,20] [--batch 2] [--types 8] [--dim 8]
           [--repeats 2] [--timeout 900] [--max-rss-gib 12] [--json out.json]

A grid of `side^3` positions of `--types` capsule types of `--dim` (random,
batch `--batch`) -> `ConvCapsule3D(types, dim, 3, padding="same")`
(dynamic routing, 3 iterations) -> the capsules' lengths -> a mean squared
error, trained by Keras's own step (`compile(optimizer="adam")`,
`train_on_batch`; a `tf.function` without XLA on TensorFlow on a CPU, XLA
on JAX, eager torch). The votes of a step hold `batch * side^3 * 27 *
types * types * dim` numbers: 27 children per window and type, where 2-D
windows have 9.

Each (backend, side) runs in a fresh worker process (benchmarks/harness.py):
it builds the model and Adam's variables, runs one untimed step, then
`--repeats` timed ones, each after the C heap's free pages are returned and
the peak RSS reset (benchmarks/memory.py). Columns: time per step, "median
(best)"; the votes' size (MiB, float32); `step peak MiB`, the largest peak
of a timed step over the built model; `/ votes`, that peak in vote-sized
buffers. Then per backend the least-squares line `peak = a + b votes`
over the sides measured and the side whose step peak it puts at 4 GiB.
A worker that fails or passes `--max-rss-gib` gives a failed row and the
larger sides of that backend are skipped.
"""

import json
import os
import time

import harness
from memory import release_free_memory, reset_peak_rss

MIB = harness.MIB
LIMIT_MIB = 4096
LABELS = {"tensorflow": "TensorFlow, tf.function", "torch": "torch, eager", "jax": "JAX, jit"}


def vote_mib(side, args):
    return args["batch"] * side**3 * 27 * args["types"] ** 2 * args["dim"] * 4 / MIB


def worker(config):
    harness.worker_setup(config, torch_first=False)
    import keras
    import numpy as np

    import keras_capsules as kc

    keras.ops.convert_to_numpy(keras.ops.ones(2) * 2)  # the runtime up
    side, types, dim = config["side"], config["types"], config["dim"]
    keras.utils.set_random_seed(0)
    poses = keras.Input((side, side, side, types, dim))
    parents = kc.ConvCapsule3D(types, dim, 3, padding="same")(poses)
    model = keras.Model(poses, kc.Length()(parents))
    model.compile(optimizer="adam", loss="mse")
    model.optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(config["batch"], side, side, side, types, dim)).astype("float32")
    y = rng.uniform(size=(config["batch"], side, side, side, types)).astype("float32")
    release_free_memory()
    built_mb = harness.proc_status_mib("VmRSS")

    def step():
        release_free_memory()
        reset_peak_rss()
        start = time.perf_counter()
        loss = float(np.asarray(model.train_on_batch(x, y)))
        return {
            "s": time.perf_counter() - start,
            "peak_rss_mb": harness.proc_status_mib("VmHWM"),
            "loss": loss,
        }

    step()  # compilation
    steps = [step() for _ in range(config["repeats"])]
    harness.reply("RESULT", built_mb=built_mb, steps=steps)
    os._exit(0)


def least_squares(xs, ys):
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def print_report(rows, args):
    title = (
        f"ConvCapsule3D({args.types}, {args.dim}, 3, padding='same') training step, batch "
        f"{args.batch}, {harness.machine()}; time median (best) of {args.repeats}:"
    )
    lines, fits = [], []
    for backend in args.backends.split(","):
        measured = []
        for row in (r for r in rows if r["backend"] == backend):
            votes = vote_mib(row["side"], vars(args))
            if "error" in row:
                lines.append([LABELS[backend], row["side"], f"{votes:,.0f}", row["error"]])
                continue
            median, best = harness.median_best(s["s"] for s in row["steps"])
            peak = max(s["peak_rss_mb"] for s in row["steps"]) - row["built_mb"]
            measured.append((votes, peak))
            lines.append(
                [
                    LABELS[backend],
                    row["side"],
                    f"{votes:,.1f}",
                    f"{median * 1e3:,.0f} ms ({best * 1e3:,.0f})",
                    f"{peak:,.0f}",
                    f"{peak / votes:.1f}",
                ]
            )
        if len(measured) >= 2:
            a, b = least_squares(*zip(*measured))
            per_side3 = vote_mib(1, vars(args))
            side = ((LIMIT_MIB - a) / b / per_side3) ** (1 / 3) if b > 0 else float("inf")
            fits.append(
                f"- {LABELS[backend]}: peak = {a:,.0f} MiB + {b:.1f} x votes; 4 GiB at side "
                f"{side:.0f} (batch {args.batch})"
            )
    harness.print_table(
        ["backend", "side", "votes MiB", "step", "step peak MiB", "/ votes"],
        lines,
        title=title,
        notes=fits,
    )


def main():
    parser = harness.argument_parser(__doc__)
    parser.add_argument("--sides", default="8,12,16,20")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--types", type=int, default=8)
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--max-rss-gib", type=float, default=12)
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    rows = []
    for backend in args.backends.split(","):
        failed = False
        for side in map(int, args.sides.split(",")):
            config = dict(backend=backend, side=side, batch=args.batch, types=args.types,
                          dim=args.dim, repeats=args.repeats)  # fmt: skip
            if failed:
                rows.append({**config, "error": "skipped (a smaller side failed)"})
                continue
            harness.log(f"{backend}: side {side}")
            result, error = harness.measure(
                __file__, config, timeout=args.timeout, max_rss_mb=args.max_rss_gib * 1024
            )
            rows.append({**config, **result} if result else {**config, "error": error})
            failed = result is None
    print_report(rows, args)
    if args.json:
        harness.write_results(args.json, {"args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
