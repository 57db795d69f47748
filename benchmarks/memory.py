"""Peak memory of a training step vs classes and children, per router and backend.

usage: python benchmarks/memory.py [--backends tensorflow,torch,jax]
           [--routers dynamic,em] [--classes 10,100,1000]
           [--children 1152,4608,18432] [--batch 8] [--max-gib 3]
           [--tf-jit] [--share-weights] [--router-args JSON]
           [--steps 2] [--json out.json]

The model is the digit-capsule layer alone: random child poses `(batch,
children, 8)` -> `Capsule(classes, 16, router=...)` -> a loss, trained by
Keras's own step (`model.compile(optimizer=Adam())`, `model.train_on_batch`:
forward, backward and the optimizer's update). `dynamic`:
`DynamicRouting(iterations=3)`, capsule lengths (`Length`) and
`MarginLoss`; `em`: `EMRouting(iterations=3)` fed `[poses, activations]`
(activations uniform in (0, 1)), its class activations and `SpreadLoss`.
Both layers have the same transforms `W: (children, classes, 8, 16)`
(`--share-weights`: one per class, `(classes, 8, 16)`) and the same votes
`(batch, children, classes, 16)`: the rows differ by the router only.
`--router-args '{"stop_gradient": true}'` passes keyword arguments to
every router's constructor (a router that lacks one fails its row).

Compilation: Keras's default `jit_compile="auto"`: XLA on JAX (and on
TensorFlow with a GPU), a `tf.function` graph without XLA on TensorFlow on
a CPU (`--tf-jit`: XLA there too), eager torch.

Each configuration runs in a fresh worker process (benchmarks/harness.py),
so that peaks do not mix. The worker imports the backend, builds the model
and the optimizer's variables, then runs `--steps` training steps; before
each step it returns the C heap's free pages (`malloc_trim`) and resets
the process's peak-RSS counter (`/proc/self/clear_refs`), so each step's
peak is its own. Columns, in MiB over the imports: `est.`, the estimate
below; `peak`, the worker's peak RSS; `(peak - 3 W) / votes`, what the
peak holds besides `W` and Adam's two slots, in vote-sized buffers (the
gradient of `W` is one of them at `--batch 8`, where `W` has as many
elements as the votes; compiled code and runtime buffers are a few tens
of MiB more, so small rows count high). Then the split of the peak:
`state`, the RSS after building the model and Adam's variables; `1st
step` (compilation included) and `step` (the largest of the later steps),
the peak of a step over `state`. The split depends on what the allocator
keeps (on JAX it moves by hundreds of MiB between runs); `peak` does not.
On a GPU each worker also reports the device's peak over the built state
(torch: `max_memory_allocated`, JAX: `peak_bytes_in_use`, TensorFlow:
`get_memory_info`); the votes then live on the device, so give a
`--max-gib` that fits the device (the estimate then stands for its peak).

The machine may be shared: before starting a worker the parent estimates
its peak (`est.`, over imports; see `VOTE_FACTORS`) and skips a
configuration whose estimate exceeds `--max-gib`; measured rows raise the
estimate of larger ones when they needed more than predicted. A worker
whose RSS (imports included) still passes `--max-gib` +
`--kill-margin-gib` is killed.
"""

import json
import os
import time

import harness

ROUTERS = ("dynamic", "em")
MIB = harness.MIB
GIB = 2**30
IN_DIM, OUT_DIM, ITERATIONS = 8, 16, 3

# The estimate of a worker's memory over its imports: FIXED_MIB (compiled
# code, the backend's own buffers) + STATE_COPIES * W (W, Adam's two slots,
# the gradient) + factor * votes. Factors: vote-sized buffers of a step
# besides the W gradient, measured at --batch 8 on the configurations with
# votes of 56-225 MiB and rounded up. The estimate only decides what to
# skip; rows with votes of at least CALIBRATION_MIB raise a factor they
# exceed.
FIXED_MIB = 192
VOTE_FACTORS = {
    ("tensorflow", "dynamic"): 8,
    ("tensorflow", "em"): 12,
    ("torch", "dynamic"): 6.5,
    ("torch", "em"): 12,
    ("jax", "dynamic"): 3,
    ("jax", "em"): 8,
    ("tensorflow+xla", "dynamic"): 3,
    ("tensorflow+xla", "em"): 8,  # --tf-jit
}
DEFAULT_VOTE_FACTOR = 12
CALIBRATION_MIB = 32
STATE_COPIES = 4  # W, its gradient, Adam's two slots


# ----------------------------------------------------------------- sizes


def votes_bytes(config):
    return 4 * config["batch"] * config["children"] * config["classes"] * OUT_DIM


def kernel_bytes(config):
    children = 1 if config["share_weights"] else config["children"]
    return 4 * children * config["classes"] * IN_DIM * OUT_DIM


def estimate_bytes(config, factor):
    """Memory of a worker over its imports: model state plus the step."""
    return FIXED_MIB * MIB + STATE_COPIES * kernel_bytes(config) + factor * votes_bytes(config)


# ----------------------------------------------------------------- worker


def release_free_memory():
    """Returns the C heap's free pages to the system (glibc `malloc_trim`),
    so that RSS counts live buffers, not what building freed."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def reset_peak_rss():
    """Resets the process's peak RSS (`VmHWM`) to its current RSS; False
    where the kernel does not allow it (then peaks are cumulative)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def build_model(config):
    """The capsule layer, its loss, and one batch of random data."""
    import keras
    import numpy as np

    import keras_capsules as kc

    batch, children, classes = config["batch"], config["children"], config["classes"]
    rng = np.random.default_rng(0)
    poses_in = keras.Input((children, IN_DIM), batch_size=batch)
    poses = rng.normal(size=(batch, children, IN_DIM)).astype("float32")
    labels = np.eye(classes, dtype="float32")[rng.integers(0, classes, batch)]
    router_args = config["router_args"]
    if config["router"] == "dynamic":
        router = kc.DynamicRouting(iterations=ITERATIONS, **router_args)
        caps = kc.Capsule(classes, OUT_DIM, router=router, share_weights=config["share_weights"])
        outputs = kc.Length()(caps(poses_in))
        inputs, data, loss = poses_in, poses, kc.MarginLoss()
    else:
        router = kc.EMRouting(iterations=ITERATIONS, **router_args)
        caps = kc.Capsule(
            classes,
            OUT_DIM,
            router=router,
            share_weights=config["share_weights"],
            return_activations=True,
        )
        activations_in = keras.Input((children,), batch_size=batch)
        _, outputs = caps([poses_in, activations_in])
        activations = rng.uniform(size=(batch, children)).astype("float32")
        inputs, data, loss = [poses_in, activations_in], [poses, activations], kc.SpreadLoss()
    model = keras.Model(inputs, outputs)
    jit = True if config["backend"] == "tensorflow" and config["tf_jit"] else "auto"
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss, jit_compile=jit)
    model.optimizer.build(model.trainable_variables)
    convert = keras.ops.convert_to_tensor
    data = [convert(d) for d in data] if isinstance(data, list) else convert(data)
    return model, data, convert(labels)


def worker(config):
    # Only the backend measured is imported (RSS): no torch first.
    harness.worker_setup(config, torch_first=False)
    import keras

    backend = config["backend"]
    keras.ops.convert_to_numpy(keras.ops.ones(1))  # backend runtime up
    release_free_memory()
    imports_mb = harness.proc_status_mib("VmRSS")
    model, data, labels = build_model(config)
    release_free_memory()
    built_mb = harness.proc_status_mib("VmRSS")
    device = harness.device_bytes(backend)
    device_built = device[0] if device else None
    if backend == "torch" and device:
        import torch

        torch.cuda.reset_peak_memory_stats()
    elif backend == "tensorflow" and device:
        import tensorflow as tf

        tf.config.experimental.reset_memory_stats("GPU:0")
    steps = []
    for _ in range(config["steps"]):
        release_free_memory()
        resettable = reset_peak_rss()
        before = harness.proc_status_mib("VmRSS")
        start = time.perf_counter()
        loss = float(keras.ops.convert_to_numpy(model.train_on_batch(data, labels)))
        steps.append(
            {
                "s": time.perf_counter() - start,
                "rss_before_mb": before,
                "peak_rss_mb": harness.proc_status_mib("VmHWM"),
                "rss_after_mb": harness.proc_status_mib("VmRSS"),
                "loss": loss,
                "peak_reset": resettable,
            }
        )
    device = harness.device_bytes(backend)
    harness.reply(
        "RESULT",
        imports_mb=imports_mb,
        built_mb=built_mb,
        steps=steps,
        jit_compile=bool(model.jit_compile),
        params=model.count_params(),
        device=harness.device_name(backend),
        device_peak_over_built_mb=None if device is None else (device[1] - device_built) / MIB,
    )
    os._exit(0)  # no interpreter teardown


# ----------------------------------------------------------------- parent


def run_worker(config, args):
    return harness.measure(
        os.path.abspath(__file__),
        config,
        timeout=args.timeout,
        max_rss_mb=(args.max_gib + args.kill_margin_gib) * 1024,
        max_rss_name="--max-gib + --kill-margin-gib",
    )


def summarise(row):
    """Per-step peaks over `built`, the peak over imports and what it
    holds besides W and Adam's slots, in votes."""
    steps = row["steps"]
    over = [s["peak_rss_mb"] - row["built_mb"] for s in steps]
    row["first_step_mb"] = over[0]
    row["step_mb"] = max(over[1:]) if len(over) > 1 else over[0]
    # What the estimate predicts: the worker's peak over its imports.
    row["measured_bytes"] = (row["built_mb"] - row["imports_mb"] + max(over)) * MIB
    # Vote-sized buffers besides W and Adam's two slots.
    row["copies"] = (row["measured_bytes"] - 3 * row["kernel_bytes"]) / row["votes_bytes"]


def configurations(args):
    for backend in args.backends:
        for router in args.routers:
            configs = [
                dict(
                    backend=backend,
                    router=router,
                    classes=k,
                    children=n,
                    batch=args.batch,
                    steps=args.steps,
                    tf_jit=args.tf_jit,
                    share_weights=args.share_weights,
                    router_args=args.router_args,
                )
                for k in args.classes
                for n in args.children
            ]
            # Smallest first: their measurements raise the factor for the larger.
            yield backend, router, sorted(configs, key=votes_bytes)


def run(args):
    rows = []
    for backend, router, configs in configurations(args):
        compiled = "tensorflow+xla" if backend == "tensorflow" and args.tf_jit else backend
        factor = VOTE_FACTORS.get((compiled, router), DEFAULT_VOTE_FACTOR)
        for config in configs:
            row = dict(config, votes_bytes=votes_bytes(config), kernel_bytes=kernel_bytes(config))
            row["estimate_bytes"] = estimate_bytes(config, factor)
            row["vote_factor"] = factor
            rows.append(row)
            name = f"{backend} {router} classes={config['classes']} children={config['children']}"
            if row["estimate_bytes"] > args.max_gib * GIB:
                row["skipped"] = (
                    f"skipped (est. {row['estimate_bytes'] / GIB:.1f} GiB > "
                    f"--max-gib {args.max_gib:g})"
                )
                harness.log(f"{name}: {row['skipped']}")
                continue
            harness.log(f"{name}: est. {row['estimate_bytes'] / GIB:.2f} GiB")
            start = time.perf_counter()
            result, error = run_worker(config, args)
            row["wall_s"] = time.perf_counter() - start
            row["error"] = error
            if result is None:
                harness.log(f"{name}: failed: {error}")
                continue
            row.update(result)
            summarise(row)
            # Raise the factor if this row needed more than predicted.
            if row["votes_bytes"] >= CALIBRATION_MIB * MIB:
                factor = max(
                    factor, (row["measured_bytes"] - estimate_bytes(config, 0)) / row["votes_bytes"]
                )
            harness.log(
                f"{name}: peak {row['measured_bytes'] / MIB:.0f} MiB over imports "
                f"({row['copies']:.1f} votes besides W and Adam), {row['wall_s']:.0f} s"
            )
    return rows


def compile_label(row):
    if row["backend"] == "torch":
        return "eager"
    if "jit_compile" in row:
        xla = row["jit_compile"]
    else:
        xla = row["backend"] == "jax" or row["tf_jit"]
    return "XLA" if xla else "tf.function"


def table(rows):
    """`(header, cells, align)` of the report's table."""
    gpu = any(r.get("device_peak_over_built_mb") is not None for r in rows)
    header = ["backend", "compile", "router", "classes", "children", "votes MiB", "W MiB"]
    header += ["est. MiB", "peak MiB", "(peak - 3 W) / votes", "state MiB", "1st step MiB"]
    header += ["step MiB"] + (["device step MiB"] if gpu else [])
    cells = []
    for r in rows:
        head = [
            r["backend"],
            compile_label(r),
            r["router"],
            r["classes"],
            r["children"],
            f"{r['votes_bytes'] / MIB:.0f}",
            f"{r['kernel_bytes'] / MIB:.0f}",
            f"{r['estimate_bytes'] / MIB:.0f}",
        ]
        if r.get("skipped") or r.get("error"):
            cells.append(head + [r.get("skipped") or "failed: " + r["error"]])
            continue
        line = head + [
            f"{r['measured_bytes'] / MIB:.0f}",
            f"{r['copies']:.1f}",
            f"{r['built_mb'] - r['imports_mb']:.0f}",
            f"{r['first_step_mb']:.0f}",
            f"{r['step_mb']:.0f}",
        ]
        if gpu:
            device = r.get("device_peak_over_built_mb")
            line.append(f"{device:.0f}" if device is not None else "")
        cells.append(line)
    return header, cells, "lll" + "r" * (len(header) - 3)


def int_list(text):
    return [int(v) for v in text.split(",") if v]


def main():
    parser = harness.argument_parser(__doc__)
    parser.add_argument("--routers", default=",".join(ROUTERS))
    parser.add_argument("--classes", default="10,100,1000")
    parser.add_argument("--children", default="1152,4608,18432")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument(
        "--max-gib",
        type=float,
        default=3.0,
        help="skip configurations estimated above this (GiB over imports)",
    )
    parser.add_argument(
        "--kill-margin-gib",
        type=float,
        default=1.5,
        help="kill a worker whose RSS passes --max-gib plus this",
    )
    parser.add_argument("--tf-jit", action="store_true", help="XLA on TensorFlow on a CPU too")
    parser.add_argument(
        "--share-weights",
        action="store_true",
        help="one transform per class, shared by all children",
    )
    parser.add_argument(
        "--router-args", default="{}", help="JSON keyword arguments for every router's constructor"
    )
    parser.add_argument(
        "--steps", type=int, default=2, help="training steps per worker (the first compiles)"
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds a worker may take")
    parser.add_argument("--json", help="write all rows to this file")
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    args.backends = [b for b in args.backends.split(",") if b]
    args.routers = [r for r in args.routers.split(",") if r]
    unknown = set(args.backends) - set(harness.BACKENDS) or set(args.routers) - set(ROUTERS)
    if unknown:
        parser.error(f"unknown backend or router: {sorted(unknown)}")
    try:
        args.classes, args.children = int_list(args.classes), int_list(args.children)
        args.router_args = json.loads(args.router_args)
    except ValueError as e:
        parser.error(f"--classes and --children take integers, --router-args JSON: {e}")
    if not isinstance(args.router_args, dict):
        parser.error(f"--router-args must be a JSON object. Received: {args.router_args!r}")
    if args.batch < 1 or args.steps < 1:
        parser.error(f"--batch and --steps must be >= 1. Received: {args.batch}, {args.steps}")

    start = time.perf_counter()
    rows = run(args)
    wall = time.perf_counter() - start
    header, cells, align = table(rows)
    harness.print_table(
        header,
        cells,
        align=align,
        title=f"\nTraining-step memory, batch {args.batch}, {ITERATIONS} routing iterations, "
        f"{'W shared by children' if args.share_weights else 'one W per child and class'}"
        f"{', router args ' + json.dumps(args.router_args) if args.router_args else ''}; "
        f"{args.steps} steps per worker; "
        f"{harness.machine()}; "
        f"{wall:.0f} s in all; devices: "
        f"{', '.join(sorted({r['device'] for r in rows if r.get('device')})) or 'none'}.",
    )
    if args.json:
        harness.write_results(args.json, {"args": vars(args), "wall_s": wall, "rows": rows})


if __name__ == "__main__":
    main()
