"""Train-step images/s and peak RSS: our models vs pure-framework CapsNets.

usage: python benchmarks/train_step.py [--models capsnet,readme,efficient,matrix]
           [--batches 32,128] [--backends tensorflow,torch,jax]
           [--jit off,on,default] [--references torch,torch-compile,jax]
           [--implementations conv,matmul,...] [--backwards manual,autodiff]
           [--jax-xla-flags FLAGS]
           [--repeats 3] [--steps 5] [--warmup 2] [--json out.json]
           [--peak-tflops fp32=67,tf32=495]

`--backends` entries may carry their own jit setting: `torch:off,jax:on`
runs eager torch and jitted JAX only; `default` is `compile()`'s own
`jit_compile="auto"` (what a user gets; the table shows what it resolved
to). The default path on every backend:

    python benchmarks/train_step.py --models readme,capsnet,efficient \
        --backends tensorflow:default,torch:default,jax:default --references torch,jax

`--implementations` runs ours once per entry, every convolving layer's
`implementation=` set to it; `--backwards` likewise sets every router's
`backward=` (the routers with a hand-written backward pass: dynamic, EM,
self-attention, inverted dot-product); `--jax-xla-flags` adds, for each JAX
configuration of ours, one with `XLA_FLAGS` set to its value. A quick run:

    python benchmarks/train_step.py --models capsnet --batches 32 --repeats 3 --steps 3

Ours: `keras_capsules.models.CapsNet()` (8,215,568 parameters),
`readme` (the model of the README's usage section: `Conv2D` ->
`PrimaryCapsule` -> `Capsule(router="dynamic")` -> `Length`, `MarginLoss`,
no decoder), `EfficientCapsNet()` and `MatrixCapsNet((28, 28, 1), 10)`,
MNIST-sized, trained by Keras's own train step:
`model.compile(optimizer=Adam(), jit_compile=...)` then
`model.train_on_batch` on fixed in-memory batches. `--jit on` is XLA on
TensorFlow and JAX and `torch.compile` on torch; `off` is a `tf.function`
graph, eager torch and op-by-op JAX.

References (Sabour's CapsNet only, the same math, written by hand in
`pure_torch_capsnet.py` and `pure_jax_capsnet.py`, which never import
Keras): `torch` (eager, nn.Module + torch.optim.Adam), `torch-compile`
(its loss under `torch.compile`), `jax` (`jax.jit` of `value_and_grad` +
a hand-written Adam).

Each configuration runs in a worker process of its own
(benchmarks/harness.py: a backend cannot change in a process; peak RSS is
that process's `ru_maxrss`). For each
(model, batch) the workers start one after another, compile and warm up
(`--warmup` steps, not timed), then wait; the repetitions are interleaved
over them (worker order rotated each round), one worker running at a time,
each timing `--steps` steps. Reported: median and best (fastest round)
images/s over `--repeats` rounds, ours / faster reference (median and
best), peak RSS and its ratio to the reference of the same framework (for
TensorFlow: to the faster reference), and the compile + first-step time.
Machines here are shared and noisy: only same-run ratios mean much.

On a GPU (benchmarks/gpu.sh) the references run on it too (the pure JAX
one with a plain `lax.conv` there), each worker reports its peak device
memory, and `--peak-tflops` adds the fraction of the FLOP floor of the
CapsNet step (153.9 GFLOP per step at batch 128, 1.2023 GFLOP per image,
forward + backward of every layer; Adam and the elementwise work are
negligible) that the measured images/s reach.
"""

import json
import os
import resource
import sys
import time

import harness

BACKENDS = harness.BACKENDS
MODELS = ("capsnet", "readme", "efficient", "matrix")
REFERENCES = ("torch", "torch-compile", "jax")
CAPSNET_GFLOP_PER_IMAGE = 153.9 / 128


# ----------------------------------------------------------------- worker


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def keras_step(config, data):
    """Our model under Keras's train step; returns `step(i) -> loss`."""
    import keras

    model, loss = build_model(config["model"])
    if config.get("implementation") or config.get("backward"):
        # Every layer that convolves computes it this way, every router with
        # a hand-written backward differentiates that way (same weights).
        from keras_capsules.models.xla import xla_hinted_layers

        for layer in xla_hinted_layers(model):
            if config.get("implementation") and hasattr(layer, "implementation"):
                layer.implementation = config["implementation"]
            if config.get("backward") and hasattr(layer, "backward"):
                layer.backward = config["backward"]
    model.compile(optimizer=keras.optimizers.Adam(), loss=loss, jit_compile=config["jit"])
    config["resolved_jit"] = model.jit_compile
    if loss is not None:  # MarginLoss takes one-hot labels
        data = [(x, keras.ops.one_hot(y, 10)) for x, y in data]
    tensors = [(keras.ops.convert_to_tensor(x), keras.ops.convert_to_tensor(y)) for x, y in data]

    def step(i):
        x, y = tensors[i % len(tensors)]
        return model.train_on_batch(x, y)  # logs as floats: waits for the step

    return step, model.count_params()


def build_model(name):
    """One of `MODELS` for 28x28x1 images and 10 classes, and the loss to
    compile it with (`None`: the ready model's own)."""
    import keras

    import keras_capsules as kc
    from keras_capsules.models import CapsNet, EfficientCapsNet, MatrixCapsNet

    if name == "readme":  # the model of the README's usage section, as written there
        images = keras.Input((28, 28, 1))
        x = keras.layers.Conv2D(256, 9, activation="relu")(images)
        x = kc.PrimaryCapsule(32, 8, kernel_size=9, strides=2)(x)
        digits = kc.Capsule(10, 16, router="dynamic")(x)
        return keras.Model(images, kc.Length()(digits)), kc.MarginLoss()
    if name == "matrix":
        return MatrixCapsNet(input_shape=(28, 28, 1), num_classes=10), None
    return {"capsnet": CapsNet, "efficient": EfficientCapsNet}[name](), None


def torch_reference_step(config, data):
    import torch
    from capsnet_spec import count_params, init_weights
    from pure_torch_capsnet import PureTorchCapsNet, make_train_step, to_nchw

    weights = init_weights()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = PureTorchCapsNet(weights, primary=config.get("primary", "conv")).to(device)
    train = make_train_step(model, compile=config["jit"])
    tensors = [(to_nchw(x).to(device), torch.from_numpy(y).to(device)) for x, y in data]

    def step(i):
        return float(train(*tensors[i % len(tensors)]))

    return step, count_params(weights)


def jax_reference_step(config, data):
    import jax.numpy as jnp
    import pure_jax_capsnet as ref
    from capsnet_spec import count_params, init_weights

    weights = init_weights()
    state = {"params": ref.to_params(weights)}
    state["adam"] = ref.init_adam(state["params"])
    train = ref.make_train_step()
    tensors = [(jnp.asarray(x), jnp.asarray(y)) for x, y in data]

    def step(i):
        state["params"], state["adam"], loss = train(
            state["params"], state["adam"], *tensors[i % len(tensors)]
        )
        return float(loss)

    return step, count_params(weights)


def worker(config):
    """Builds one configuration, warms it up, then serves `run` requests on stdin."""
    if config.get("xla_flags"):  # before the backend starts
        os.environ["XLA_FLAGS"] = config["xla_flags"]
    # Only the framework measured is imported (peak RSS): no torch first.
    harness.worker_setup(config, torch_first=False)
    impl = config["impl"]
    if impl == "keras":
        import keras  # noqa: F401
    elif impl.startswith("torch"):
        import torch  # noqa: F401
    else:
        import jax  # noqa: F401
    from capsnet_spec import batches

    data = batches(config["batch"], count=2)
    baseline = harness.proc_status_mib("VmRSS")
    make = {
        "keras": keras_step,
        "torch": torch_reference_step,
        "torch-compile": torch_reference_step,
        "jax": jax_reference_step,
    }[impl]
    start = time.perf_counter()
    step, params = make(config, data)
    step(0)
    compile_s = time.perf_counter() - start
    for i in range(1, config["warmup"]):
        step(i)
    frameworks = sorted(m for m in ("tensorflow", "torch", "jax") if m in sys.modules)
    harness.reply(
        "READY",
        compile_s=compile_s,
        params=params,
        rss_baseline_mb=baseline,
        imported=frameworks,
        resolved_jit=config.get("resolved_jit"),
    )
    harness.serve(step, config["steps"])  # each step returns the loss as a float: synced
    harness.reply(
        "DONE",
        peak_rss_mb=peak_rss_mb(),
        rss_end_mb=harness.proc_status_mib("VmRSS"),
        **device_memory(config["backend"]),
    )
    os._exit(0)  # no interpreter teardown (torch.compile's worker pools can hang it)


def device_memory(backend):
    """Name and peak memory (MiB) of the accelerator this worker used, if any."""
    used = harness.device_bytes(backend)
    if used is None:
        return {"device": "cpu"}
    return {"device": harness.device_name(backend), "peak_device_mb": used[1] / harness.MIB}


def label(config):
    if config["impl"] == "keras":
        implementation = config.get("implementation")
        if config.get("backward"):
            implementation = ",".join(filter(None, (implementation, config["backward"])))
        flags = f" XLA_FLAGS={config['xla_flags']}" if config.get("xla_flags") else ""
        return (
            f"ours {config['backend']}" + (f" [{implementation}]" if implementation else "") + flags
        )
    return f"pure {config['impl']}"


def configurations(args, model, batch):
    configs = []
    common = dict(model=model, batch=batch, steps=args.steps, warmup=args.warmup)
    for backend, jits in args.backends:
        for jit in jits:
            for implementation in args.implementations:
                for backward in args.backwards:
                    configs.append(
                        dict(
                            common,
                            impl="keras",
                            backend=backend,
                            jit=jit,
                            implementation=implementation,
                            backward=backward,
                        )
                    )
                    if backend == "jax" and args.jax_xla_flags:
                        configs.append(dict(configs[-1], xla_flags=args.jax_xla_flags))
    if model in ("capsnet", "readme"):
        for ref in args.references:
            backend = "torch" if ref.startswith("torch") else "jax"
            configs.append(
                dict(
                    common,
                    impl=ref,
                    backend=backend,
                    jit=ref != "torch",
                    primary=args.torch_primary,
                )
            )
    return configs


def summarise(result, batch):
    """Images/s of each round: median (best) of the rounds."""
    rounds = sorted(batch * len(t) / sum(t) for t in result["times"])
    if not rounds:
        return None
    median, best = harness.median_best(rounds, higher_is_better=True)
    return {"median": median, "best": best, "rounds": rounds}


def over_budget(args):
    return args.budget and time.monotonic() - args.started > args.budget


def run_group(args, model, batch):
    """The workers of one (model, batch), their rounds interleaved: rows."""
    workers, ready = [], []
    for config in configurations(args, model, batch):
        if over_budget(args):
            harness.log(f"--budget spent: {label(config)} skipped")
            continue
        harness.log(f"{model} batch {batch}: starting {label(config)} jit={config['jit']}")
        workers.append(harness.Worker(os.path.abspath(__file__), config, timeout=args.timeout))
        ready.append(workers[-1].read("READY") or {})
        if workers[-1].error:
            harness.log(f"failed: {workers[-1].error}")

    def stop(r):
        if r and over_budget(args):
            harness.log(f"--budget spent: {r} rounds only")
            return True
        return False

    rounds = harness.run_rounds(workers, args.repeats, stop=stop, log=harness.log)
    rows = []
    for w, first, replies in zip(workers, ready, rounds):
        result = {
            **first,
            "times": [t["times"] for t in replies],
            "cpu_s": [t["cpu_s"] for t in replies],
            "losses": [t["last"] for t in replies],
        }
        result.update(w.close() or {})
        rows.append(
            {**w.config, **result, "error": w.error, "images_per_s": summarise(result, batch)}
        )
    add_ratios(rows)
    return rows


def add_ratios(rows):
    refs = [r for r in rows if r["impl"] != "keras" and r["images_per_s"]]
    fastest = max(refs, key=lambda r: r["images_per_s"]["median"], default=None)
    for row in rows:
        speed = row["images_per_s"]
        if row["impl"] != "keras" or not speed or fastest is None:
            continue
        ref = fastest["images_per_s"]
        row["vs_fastest_ref"] = {
            "ref": fastest["impl"],
            "median": speed["median"] / ref["median"],
            "best": speed["best"] / ref["best"],
        }
        rss_ref = same_framework_reference(row, refs) or fastest
        if row.get("peak_rss_mb") and rss_ref.get("peak_rss_mb"):
            row["rss_vs_ref"] = {
                "ref": rss_ref["impl"],
                "ratio": row["peak_rss_mb"] / rss_ref["peak_rss_mb"],
                "over_imports": rss_over_imports(row) / rss_over_imports(rss_ref),
            }


def rss_over_imports(row):
    return row["peak_rss_mb"] - row["rss_baseline_mb"]


def cpu_per_step(row):
    """Median over rounds of process CPU seconds per step (all threads)."""
    per_step = sorted(c / len(t) for c, t in zip(row["cpu_s"], row["times"]))
    return per_step[len(per_step) // 2] if per_step else float("nan")


def print_flop_floor(rows, peaks):
    """Fraction of each peak reached by the CapsNet rows (median images/s)."""
    names = list(peaks)
    header = ["batch", "impl", "compile", "img/s median"]
    for k in names:
        header += [f"floor img/s at {k}", f"fraction of {k}"]
    header.append("device memory MiB")
    lines = []
    for r in rows:
        if r["model"] != "capsnet" or r["error"] or not r["images_per_s"]:
            continue
        speed = r["images_per_s"]["median"]
        cells = [r["batch"], label(r), jit_label(r), f"{speed:.1f}"]
        for k in names:
            floor = peaks[k] * 1e3 / CAPSNET_GFLOP_PER_IMAGE
            cells += [f"{floor:,.0f}", f"{speed / floor:.2%}"]
        lines.append(cells + [f"{r.get('peak_device_mb', float('nan')):.0f}"])
    harness.print_table(
        header,
        lines,
        align="rllr" + "r" * (len(header) - 4),
        title=f"\nCapsNet FLOP floor: {CAPSNET_GFLOP_PER_IMAGE:.4f} GFLOP per image (153.9 "
        "per step of 128); peaks assumed: "
        + ", ".join(f"{k} {v:g} TFLOP/s" for k, v in peaks.items()),
    )


def same_framework_reference(row, refs):
    """torch -> pure torch (torch.compile'd if jit, when run), jax -> pure jax."""
    jit = row.get("resolved_jit", row["jit"])
    wanted = {"torch": ["torch-compile", "torch"] if jit else ["torch"], "jax": ["jax"]}.get(
        row["backend"], []
    )
    for name in wanted:
        for ref in refs:
            if ref["impl"] == name:
                return ref
    return None


def jit_label(row):
    if row["jit"] == "auto":  # compile() defaults: what Keras chose
        return "default: " + jit_label({**row, "jit": row.get("resolved_jit")})
    if not row["jit"]:
        return "tf.function" if row["backend"] == "tensorflow" else "eager"
    return {"tensorflow": "XLA", "torch": "torch.compile", "jax": "jax.jit"}[row["backend"]]


TABLE = (
    ["model", "batch", "impl", "compile", "img/s median", "img/s best"]
    + ["ours/ref median (best)", "CPU s/step", "peak RSS MiB (over imports)"]
    + ["RSS / ref (over imports)", "compile+1st step s"]
)
TABLE_ALIGN = "lrllrrlrrlr"


def table_rows(rows):
    """The cells of the report's table (`TABLE`), a list per row."""
    lines = []
    for r in rows:
        jit = jit_label(r)
        name = label(r)
        if r["error"]:
            lines.append([r["model"], r["batch"], name, jit, f"failed: {r['error']}"])
            continue
        s = r["images_per_s"]
        ratio = r.get("vs_fastest_ref")
        ratio = f"{ratio['median']:.2f} ({ratio['best']:.2f}) vs {ratio['ref']}" if ratio else ""
        rss = r.get("rss_vs_ref")
        rss = f"{rss['ratio']:.2f} ({rss['over_imports']:.2f}) vs {rss['ref']}" if rss else ""
        peak = r.get("peak_rss_mb", float("nan"))
        lines.append(
            [r["model"], r["batch"], name, jit, f"{s['median']:.1f}", f"{s['best']:.1f}", ratio]
            + [f"{cpu_per_step(r):.2f}", f"{peak:.0f} ({peak - r['rss_baseline_mb']:.0f})", rss]
            + [f"{r['compile_s']:.1f}"]
        )
    return lines


def parse_jit(text):
    return [{"off": False, "on": True, "default": "auto"}[j] for j in text.split(",")]


def load_average():
    try:
        return os.getloadavg()
    except OSError:
        return None


def main():
    parser = harness.argument_parser(__doc__, backends=False)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batches", default="32,128")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument(
        "--jit",
        default="off,on",
        help="off, on, default (compile()'s own jit_compile='auto'), or a list of them",
    )
    parser.add_argument(
        "--implementations",
        default="",
        help="comma list: run ours once per entry with every convolving "
        "layer's implementation= set to it (default: the models' own)",
    )
    parser.add_argument(
        "--backwards",
        default="",
        help="comma list: run ours once per entry with every router's "
        "backward= set to it (manual, autodiff; default: the routers' own)",
    )
    parser.add_argument(
        "--references",
        default=",".join(REFERENCES),
        help="pure CapsNets to run beside ours ('none' for none)",
    )
    parser.add_argument(
        "--torch-primary",
        default="conv",
        choices=("conv", "matmul"),
        help="primary-capsule conv of the pure torch CapsNet",
    )
    parser.add_argument(
        "--jax-xla-flags",
        default="",
        help="also run each JAX configuration of ours with XLA_FLAGS set to this",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per round")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps, compile included")
    parser.add_argument(
        "--timeout",
        type=float,
        default=1200,
        help="seconds a worker may take to compile, or to run one round",
    )
    parser.add_argument(
        "--peak-tflops",
        default="",
        help="NAME=TFLOP/s,...: add the CapsNet rows' fraction of each peak",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=0,
        help="seconds after which no worker starts and no round begins "
        "(at least one round still runs for the workers started)",
    )
    parser.add_argument("--json", help="write all rows (every round) to this file")
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    try:
        jit = parse_jit(args.jit)
        args.backends = [
            (b.split(":")[0], parse_jit(b.split(":")[1]) if ":" in b else jit)
            for b in args.backends.split(",")
            if b
        ]
    except KeyError as e:
        parser.error(f"--jit and backend suffixes take off, on and default. Received: {e}")
    args.references = [r for r in args.references.split(",") if r and r != "none"]
    args.implementations = args.implementations.split(",")
    args.backwards = args.backwards.split(",")
    if set(args.backwards) - {"", "manual", "autodiff"}:
        parser.error(f"--backwards takes manual and autodiff. Received: {args.backwards}")
    unknown = {b for b, _ in args.backends} - set(BACKENDS) or set(args.references) - set(
        REFERENCES
    )
    if unknown:
        parser.error(f"unknown backend or reference: {sorted(unknown)}")
    args.peak_tflops = dict(
        (k, float(v)) for k, v in (p.split("=") for p in args.peak_tflops.split(",") if p)
    )

    start_load = load_average()
    start = time.perf_counter()
    args.started = time.monotonic()
    rows = []
    for model in args.models.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            rows += run_group(args, model, batch)
    end_load = load_average()
    harness.print_table(
        TABLE,
        table_rows(rows),
        align=TABLE_ALIGN,
        title=f"\nTrain step, {args.repeats} rounds x {args.steps} steps after {args.warmup} "
        f"warm-up steps; {harness.machine()}; "
        f"load average {start_load[0]:.1f} at start, {end_load[0]:.1f} at end; "
        f"{time.perf_counter() - start:.0f} s in all; devices: "
        f"{', '.join(sorted({str(r.get('device', '?')) for r in rows}))}.",
    )
    if args.peak_tflops:
        print_flop_floor(rows, args.peak_tflops)
    if args.json:
        harness.write_results(
            args.json, {"args": vars(args), "load_average": [start_load, end_load], "rows": rows}
        )


if __name__ == "__main__":
    main()
