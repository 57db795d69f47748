"""Memory and time of VectorRouting's training step vs the number of input vectors.

usage: python benchmarks/vector_routing_memory.py [--backends tensorflow,torch,jax]
           [--sizes 1000,10000,100000,1000000] [--repeats 3] [--warmup 1]
           [--authors-code DIR] [--tf-jit] [--check-limit] [--timeout 600]
           [--max-rss-gib 16] [--json out.json]

`keras_capsules.layers.VectorRouting(32, 64)` with its defaults (any
number of inputs, 2 iterations) routes `n` vectors of 256-D (batch 1,
random normal, the same on every backend) to 32 vectors of 64-D. A step is
the forward pass and the gradient of `sum(outputs ** 2)` with respect to
the inputs and every weight of the layer: a `tf.function` around a
`GradientTape` on TensorFlow (no XLA, what a user gets on a CPU;
`--tf-jit`: XLA), `jax.jit(jax.value_and_grad(...))` of the layer's
`stateless_call` on JAX, eager `.backward()` on torch. Heinsen's routing
never forms the `(n, 32, 64)` votes, so the step's memory should grow
linearly in `n`.

`--authors-code DIR`: a directory holding the authors' `heinsen_routing.py`
(glassroom/heinsen_routing), imported from there, never copied here; its
`EfficientVectorRouting(n_inp=-1, n_out=32, d_inp=256, d_out=64,
n_iters=2)` runs the same step on torch (eager `.backward()`), as a row
of its own. Without the flag that row is left out.

Each configuration (implementation, `n`) runs in a fresh worker process
(benchmarks/harness.py), one at a time, so that peaks do not mix. The
worker imports its framework and starts its runtime, builds the layer
(`built`, the baseline: RSS after imports and building), makes the
inputs, then runs `--warmup` untimed steps (compilation) and `--repeats`
timed ones; before each step it returns the C heap's free pages and resets
the process's peak RSS (`VmHWM`, see benchmarks/memory.py), so each step's
peak is its own. Columns: time per step, ms, "median (best)" of the timed
steps; `peak MiB`, the largest peak RSS of the timed steps over `built`
(the inputs, `n x 256` float32, included, and their gradient); `MiB per
1e5`, that peak per 100,000 input vectors; `/ inputs`, the peak in
input-sized buffers.

Then, per implementation, the growth of the peak: the least-squares slope
of log(peak) against log(n) over the largest three sizes measured (1.0:
linear; a fixed part of the peak, compiled code and the allocators'
caches, pulls it below 1), the least-squares line `peak = a + b n` over
the same three sizes (`a` MiB + `b` MiB per 1e5 vectors), the `n` where
that line reaches 4 GiB (4096 MiB over `built`; `interpolated` between
measured sizes, `extrapolated` beyond the largest), and the largest
measured `n` whose peak stays under 4 GiB. `--check-limit` also measures
each implementation at the line's `n`, rounded down to two significant
digits (a row marked `4 GiB check`, left out of the fits). With the
authors' code, ours / theirs on torch at each `n`: peak memory and time.

A worker that fails (an exception, killed by the system or by the
`--max-rss-gib` watch, past `--timeout` seconds) gives a failed row, and
the larger sizes of that implementation are skipped and say so.
"""

import hashlib
import json
import math
import os
import sys
import time

import harness
from memory import release_free_memory, reset_peak_rss

MIB = harness.MIB
INPUT_DIM, OUTPUTS, OUTPUT_DIM, ITERATIONS = 256, 32, 64, 2
SIZES = (1000, 10_000, 100_000, 1_000_000)
LIMIT_MIB = 4096  # the "under 4 GiB" of the report
AUTHORS = "torch-authors"
LABELS = {
    "tensorflow": "TensorFlow, tf.function (ours)",
    "tensorflow+xla": "TensorFlow, XLA (ours)",
    "torch": "torch, eager (ours)",
    "jax": "JAX, jit (ours)",
    AUTHORS: "torch, eager (authors' EfficientVectorRouting)",
}


# ----------------------------------------------------------------- worker


def ours(config):
    """`(step, to_input, wait)` of our layer on the worker's backend."""
    import keras

    from keras_capsules.layers import VectorRouting

    backend = config["backend"]
    layer = VectorRouting(OUTPUTS, OUTPUT_DIM, iterations=ITERATIONS)
    layer.build((1, None, INPUT_DIM))
    if backend == "tensorflow":
        import tensorflow as tf

        def tf_step(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                outputs = layer(x)
                loss = tf.reduce_sum(outputs**2)
            return loss, tape.gradient(loss, [x, *layer.trainable_variables])

        step = tf.function(tf_step, jit_compile=bool(config["tf_jit"]))
        return step, tf.constant, lambda out: float(out[0])
    if backend == "jax":
        import jax

        trainable = [v.value for v in layer.trainable_variables]
        non_trainable = [v.value for v in layer.non_trainable_variables]

        def loss_fn(weights, x):
            outputs, _ = layer.stateless_call(weights, non_trainable, x)
            return keras.ops.sum(outputs**2)

        grad_fn = jax.jit(jax.value_and_grad(loss_fn, argnums=(0, 1)))
        return (
            lambda x: grad_fn(trainable, x),
            jax.numpy.asarray,
            lambda out: float(jax.block_until_ready(out)[0]),
        )
    return torch_step(layer, [v.value for v in layer.trainable_variables])


def authors(config):
    """`(step, to_input, wait)` of the authors' `EfficientVectorRouting`."""
    sys.path.insert(0, config["authors_code"])
    from heinsen_routing import EfficientVectorRouting

    module = EfficientVectorRouting(
        n_inp=-1, n_out=OUTPUTS, d_inp=INPUT_DIM, d_out=OUTPUT_DIM, n_iters=ITERATIONS
    )
    return torch_step(module, list(module.parameters()))


def torch_step(fn, parameters):
    """Eager forward and `.backward()` of `sum(fn(x) ** 2)`: gradients of
    the inputs and of `parameters`, fresh ones each step."""
    import torch

    def step(x):
        loss = torch.sum(fn(x) ** 2)
        loss.backward()
        grads = []
        for p in [x, *parameters]:
            grads.append(p.grad)
            p.grad = None  # the caller's reference is the only one left
        return loss, grads

    return step, lambda a: torch.from_numpy(a).requires_grad_(True), lambda out: float(out[0])


def runtime_up(config):
    """Imports the worker's framework and runs one op; returns versions."""
    if config["implementation"] == AUTHORS:
        import torch

        float(torch.ones(2).sum())
        return {"torch": torch.__version__}
    import keras

    keras.ops.convert_to_numpy(keras.ops.ones(2) * 2)  # backend runtime up
    backend = config["backend"]
    module = {"tensorflow": "tensorflow", "torch": "torch", "jax": "jax"}[backend]
    return {"keras": keras.__version__, backend: sys.modules[module].__version__}


def timed_step(step, x, wait):
    """One step after the heap is trimmed and the peak reset: its wall and
    CPU seconds, the RSS before it and its peak (MiB), its loss, and whether
    the peak could be reset. Its outputs are dropped before returning."""
    release_free_memory()
    resettable = reset_peak_rss()
    before = harness.proc_status_mib("VmRSS")
    start, cpu = time.perf_counter(), time.process_time()
    out = step(x)
    loss = wait(out)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak = harness.proc_status_mib("VmHWM")
    del out
    return {
        "s": wall,
        "cpu_s": cpu,
        "rss_before_mb": before,
        "peak_rss_mb": peak,
        "loss": loss,
        "peak_reset": resettable,
    }


def worker(config):
    # Only the framework measured is imported (RSS): no torch first.
    harness.worker_setup(config, torch_first=False)
    import numpy as np

    versions = runtime_up(config)
    release_free_memory()
    imports_mb = harness.proc_status_mib("VmRSS")
    step, to_input, wait = (authors if config["implementation"] == AUTHORS else ours)(config)
    release_free_memory()
    built_mb = harness.proc_status_mib("VmRSS")
    n = config["n"]
    array = np.random.default_rng(0).standard_normal((1, n, INPUT_DIM), dtype=np.float32)
    x = to_input(array)
    del array  # torch shares it; the others copied it
    release_free_memory()
    inputs_mb = harness.proc_status_mib("VmRSS")
    warmup = [timed_step(step, x, wait) for _ in range(config["warmup"])]
    steps = [timed_step(step, x, wait) for _ in range(config["repeats"])]
    harness.reply(
        "RESULT",
        imports_mb=imports_mb,
        built_mb=built_mb,
        inputs_mb=inputs_mb,
        warmup=warmup,
        steps=steps,
        versions=versions,
    )
    os._exit(0)  # no interpreter teardown


# ----------------------------------------------------------------- parent


def implementations(args):
    names = []
    for backend in args.backends:
        names.append("tensorflow+xla" if backend == "tensorflow" and args.tf_jit else backend)
        if backend == "torch" and args.authors_code:
            names.append(AUTHORS)
    if args.authors_code and AUTHORS not in names:
        names.append(AUTHORS)
    return names


def summarise(row):
    times = [s["s"] for s in row["steps"]]
    row["median_s"], row["best_s"] = harness.median_best(times)
    row["peak_mb"] = max(s["peak_rss_mb"] for s in row["steps"]) - row["built_mb"]
    row["input_mb"] = row["n"] * INPUT_DIM * 4 / MIB
    row["mb_per_1e5"] = row["peak_mb"] / row["n"] * 1e5


def measure_row(name, n, args, rows, check=False):
    """Runs the worker of implementation `name` at `n`; appends its row."""
    config = dict(
        implementation=name,
        backend="torch" if name == AUTHORS else name.split("+")[0],
        n=n,
        warmup=args.warmup,
        repeats=args.repeats,
        tf_jit=args.tf_jit,
        authors_code=args.authors_code if name == AUTHORS else None,
    )
    row = {k: v for k, v in config.items() if k != "authors_code"}
    row["check"] = check
    rows.append(row)
    label = f"{name} n={n}{' (4 GiB check)' if check else ''}"
    start = time.perf_counter()
    result, error = harness.measure(
        os.path.abspath(__file__),
        config,
        timeout=args.timeout,
        max_rss_mb=args.max_rss_gib * 1024,
        max_rss_name="--max-rss-gib",
    )
    row["wall_s"] = time.perf_counter() - start
    if result is None:
        row["error"] = error
        harness.log(f"{label}: failed: {error}")
        return row
    row.update(result)
    summarise(row)
    harness.log(
        f"{label}: {row['median_s'] * 1e3:.1f} ms per step, peak "
        f"{row['peak_mb']:.0f} MiB over built, {row['wall_s']:.0f} s"
    )
    return row


def run(args):
    rows = []
    for name in implementations(args):
        failed_at = None
        for n in args.sizes:
            if failed_at is not None:
                rows.append(
                    dict(implementation=name, n=n, skipped=f"skipped (n={failed_at} failed)")
                )
                harness.log(f"{name} n={n}: {rows[-1]['skipped']}")
                continue
            if "error" in measure_row(name, n, args, rows):
                failed_at = n
    fits = growth(rows)
    if args.check_limit:
        for name, fit in fits.items():
            if fit["line_n"] is not None and fit["line_n"] >= 1:
                # The line's n at 4 GiB, rounded down to 2 significant digits.
                digits = 10 ** max(int(math.log10(fit["line_n"])) - 1, 0)
                fit["check_n"] = int(fit["line_n"] // digits * digits)
                row = measure_row(name, fit["check_n"], args, rows, check=True)
                fit["check_peak_mb"] = row.get("peak_mb")
                fit["check_error"] = row.get("error")
        # The checks count among the measured sizes (not in the fits).
        for name, fit in fits.items():
            measured_limits(fit, [r for r in rows if r["implementation"] == name])
    return rows, fits


def least_squares(xs, ys):
    """`(intercept, slope)` of the least-squares line through the points."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - slope * mx, slope


def measured_limits(entry, rows):
    """The largest measured `n` under 4 GiB and the smallest over it."""
    done = [r for r in rows if "peak_mb" in r]
    under = [r["n"] for r in done if r["peak_mb"] < LIMIT_MIB]
    entry["largest_measured_under"] = max(under) if under else None
    entry["smallest_measured_over"] = min(
        (r["n"] for r in done if r["peak_mb"] >= LIMIT_MIB), default=None
    )


def growth(rows):
    """Per implementation: the log-log slope, the line `a + b n` and the
    sizes under 4 GiB, from the rows of `--sizes` (not the checks)."""
    out = {}
    for name in dict.fromkeys(r["implementation"] for r in rows):
        done = sorted(
            (
                r
                for r in rows
                if r["implementation"] == name and "peak_mb" in r and not r.get("check")
            ),
            key=lambda r: r["n"],
        )
        fit = [r for r in done if r["peak_mb"] > 0][-3:]
        entry = {"fit_sizes": [r["n"] for r in fit], "slope": None, "line_n": None}
        measured_limits(entry, done)
        if len(fit) >= 2:
            xs = [r["n"] for r in fit]
            ys = [r["peak_mb"] for r in fit]
            entry["slope"] = least_squares([math.log(x) for x in xs], [math.log(y) for y in ys])[1]
            a, b = least_squares(xs, ys)
            entry["line_mb_per_1e5"] = b * 1e5
            entry["line_intercept_mb"] = a
            if b > 0:
                entry["line_n"] = (LIMIT_MIB - a) / b
                entry["line_kind"] = (
                    "interpolated" if entry["line_n"] <= max(xs) else "extrapolated"
                )
        out[name] = entry
    return out


def ratios(rows):
    """Ours / the authors' on torch at each `n` both measured."""
    by = {(r["implementation"], r["n"]): r for r in rows if "peak_mb" in r and not r.get("check")}
    out = []
    for (name, n), r in sorted(by.items(), key=lambda kv: kv[0][1]):
        theirs = by.get((AUTHORS, n))
        if name == "torch" and theirs is not None:
            out.append(
                {
                    "n": n,
                    "ours_mb": r["peak_mb"],
                    "authors_mb": theirs["peak_mb"],
                    "memory": r["peak_mb"] / theirs["peak_mb"],
                    "time": r["median_s"] / theirs["median_s"],
                }
            )
    return out


def ms(seconds):
    v = seconds * 1e3
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def n_text(n):
    return (
        f"{n:.0e}".replace("e+0", "e")
        if n >= 1000 and n % 10 ** int(math.log10(n)) == 0
        else f"{n:,}"
    )


def tables(rows, fits, compared, repeats):
    """The report's tables, as `(header, cells)`: the measurements, the
    growth fits and, with the authors' code, ours over theirs."""
    order = list(fits)
    measured = []
    for r in sorted(rows, key=lambda r: (order.index(r["implementation"]), r["n"])):
        n = n_text(r["n"]) + (" (4 GiB check)" if r.get("check") else "")
        head = [LABELS[r["implementation"]], n]
        if "peak_mb" not in r:
            measured.append(head + [r.get("skipped") or "failed: " + r["error"]])
            continue
        measured.append(
            head
            + [f"{ms(r['median_s'])} ({ms(r['best_s'])})", f"{r['peak_mb']:.0f}"]
            + [f"{r['mb_per_1e5']:.0f}", f"{r['peak_mb'] / r['input_mb']:.1f}"]
        )
    result = [
        (
            ["implementation", "n", f"ms per step, median (best) of {repeats}", "peak MiB"]
            + ["MiB per 1e5 vectors", "peak / inputs"],
            measured,
        )
    ]
    checked = any("check_n" in f for f in fits.values())
    growth = []
    for name, f in fits.items():
        sizes = ", ".join(n_text(n) for n in f["fit_sizes"])
        slope = f"{f['slope']:.3f} ({sizes})" if f["slope"] is not None else "-"
        line = (
            f"{f['line_intercept_mb']:.0f} + {f['line_mb_per_1e5']:.0f}"
            if "line_mb_per_1e5" in f
            else "-"
        )
        line_n = (
            f"{f['line_n']:.3g} ({f['line_kind']})"
            if f["line_n"] is not None and f["line_n"] > 0
            else "-"
        )
        cells = [LABELS[name], slope, line, line_n]
        if checked:
            if "check_n" not in f:
                cells.append("-")
            elif f["check_peak_mb"] is None:
                cells.append(f"{n_text(f['check_n'])}, failed: {f['check_error']}")
            else:
                side = "under" if f["check_peak_mb"] < LIMIT_MIB else "over"
                cells.append(f"{n_text(f['check_n'])}, {f['check_peak_mb']:.0f} ({side})")
        under, over = f["largest_measured_under"], f["smallest_measured_over"]
        if under is None:
            under = "none" if over is not None else "none measured"
        else:
            under = n_text(under) + (" (all measured fit)" if over is None else "")
        cells.append(under)
        growth.append(cells)
    result.append(
        (
            ["implementation", "log-log slope (n)", "line: MiB + MiB per 1e5 vectors"]
            + [f"n at {LIMIT_MIB} MiB (line)"]
            + (["check: n, peak MiB"] if checked else [])
            + [f"largest measured n under {LIMIT_MIB} MiB"],
            growth,
        )
    )
    if compared:
        result.append(
            (
                ["n", "ours MiB", "authors' MiB", "memory ours / authors", "time ours / authors"],
                [
                    [n_text(c["n"]), f"{c['ours_mb']:.0f}", f"{c['authors_mb']:.0f}"]
                    + [f"{c['memory']:.2f}", f"{c['time']:.2f}"]
                    for c in compared
                ],
            )
        )
    return result


def main():
    parser = harness.argument_parser(__doc__)
    parser.add_argument(
        "--sizes", default=",".join(map(str, SIZES)), help="numbers of input vectors n"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed steps per worker")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first (compiling)")
    parser.add_argument(
        "--authors-code",
        help="directory holding the authors' heinsen_routing.py (adds their torch row)",
    )
    parser.add_argument("--tf-jit", action="store_true", help="XLA on TensorFlow too")
    parser.add_argument(
        "--check-limit",
        action="store_true",
        help="also measure each implementation at the n where its line reaches 4 GiB",
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds a worker may take")
    parser.add_argument(
        "--max-rss-gib",
        type=float,
        default=16,
        help="kill a worker whose RSS (imports included) passes this",
    )
    parser.add_argument("--json", help="write all rows to this file")
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    args.backends = [b for b in args.backends.split(",") if b]
    unknown = set(args.backends) - set(harness.BACKENDS)
    if unknown:
        parser.error(f"unknown backend: {sorted(unknown)}")
    try:
        args.sizes = sorted({int(float(v)) for v in args.sizes.split(",") if v})
    except ValueError as e:
        parser.error(f"--sizes takes numbers: {e}")
    if not args.sizes or min(args.sizes) < 1 or args.repeats < 1 or args.warmup < 0:
        parser.error("--sizes must be >= 1, --repeats >= 1 and --warmup >= 0")
    authors_sha = None
    if args.authors_code:
        path = os.path.join(args.authors_code, "heinsen_routing.py")
        if not os.path.isfile(path):
            parser.error("--authors-code: no heinsen_routing.py in that directory")
        args.authors_code = os.path.abspath(args.authors_code)
        with open(path, "rb") as f:
            authors_sha = hashlib.sha256(f.read()).hexdigest()

    load = [os.getloadavg()[0]]
    start = time.perf_counter()
    rows, fits = run(args)
    wall = time.perf_counter() - start
    load.append(os.getloadavg()[0])
    compared = ratios(rows)
    versions = {}
    for r in rows:
        versions.update(r.get("versions", {}))
    title = (
        f"\nVectorRouting({OUTPUTS}, {OUTPUT_DIM}), {ITERATIONS} iterations: batch 1, n x "
        f"{INPUT_DIM} inputs; forward + gradients of sum(outputs ** 2) w.r.t. the inputs "
        f"and weights; {args.warmup} warm-up + {args.repeats} timed steps per worker; "
        f"peak RSS over imports and building (inputs included); "
        f"{', '.join(f'{k} {v}' for k, v in sorted(versions.items()))}"
        + (f"; authors' heinsen_routing.py sha256 {authors_sha[:12]}" if authors_sha else "")
        + f"; {harness.machine()}, load average {load[0]:.1f} -> {load[1]:.1f}"
        f"; {wall:.0f} s in all."
    )
    for index, (header, cells) in enumerate(tables(rows, fits, compared, args.repeats)):
        if index:
            print()
        harness.print_table(header, cells, title=None if index else title)
    if args.json:
        saved = dict(vars(args), authors_code=bool(args.authors_code), authors_sha256=authors_sha)
        harness.write_results(
            args.json,
            {
                "args": saved,
                "machine": harness.machine(),
                "versions": versions,
                "wall_s": wall,
                "load_average": load,
                "rows": rows,
                "growth": fits,
                "ours_over_authors": compared,
            },
        )


if __name__ == "__main__":
    main()
