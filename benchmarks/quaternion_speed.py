"""QuaternionCapsuleClassifier's training step against a same-size PointNet, and its parts.

usage: python benchmarks/quaternion_speed.py [--backends tensorflow,torch,jax]
           [--batch 32] [--points 256] [--classes 4] [--repeats 5]
           [--warmup 2] [--timeout 1800] [--closed-form] [--jit-compile]
           [--settings JSON] [--given-frames] [--json out.json]

`keras_capsules.models.QuaternionCapsuleClassifier` at its documented
settings (16 primary capsule types on 64 patches of 16 points, local
frames of 16 neighbours, 3 routing iterations; 2,632 parameters for 4
classes) and a PointNet of about the same size built from Keras layers
(per point `Dense(32) -> Dense(48)`, ReLU, max over the points,
`Dense(16) -> Dense(classes)`: 2,564 parameters for 4 classes), each
compiled with its defaults (the classifier's `compile()`; Adam and sparse
cross-entropy for the PointNet), train on `--batch` random clouds of
`--points` points with `train_on_batch`. Keras's default compilation: a
`tf.function` on TensorFlow, XLA on JAX, eager torch.

`--closed-form` routes with `QuaternionRouting(closed_form=True)` (means
and local frames by `keras_capsules.small_eigen` instead of `eigh`);
`--jit-compile` compiles both models with `jit_compile=True` (XLA on
TensorFlow too). `--settings '{"num_patches": 16, "primary_capsules": 8,
"iterations": 1}'` changes the classifier's settings (any of
`primary_capsules`, `num_patches`, `patch_size`, `frame_neighbors`, and the
router's `iterations`). `--given-frames` gives the classifier the batch's
local frames computed beforehand (its frames layer returns them), to time
the rest of its step, as when the frames are part of the data (the
`frames` part then times that stand-in).

Both models train in one worker process per backend (benchmarks/harness.py),
their steps alternating within each repeat (`harness.time_interleaved`), so
that the ratio is measured under the same load. The parts of the
classifier's forward pass are timed the same way, each compiled as a
training step is (`tf.function`, `jax.jit`, eager torch):

- `neighbours`: the frames' neighbour search alone (`point_cloud.nearest_neighbors`
  of every point: squared distances, `top_k`);
- `frames`: the local reference frames of every point (`LocalReferenceFrames`:
  neighbours, covariances, 3x3 eigenvectors, quaternions);
- `means`: one `quaternion.weighted_mean` at the patch routing's size
  (`batch * patches * primary_capsules` means of 16 quaternions: 4x4
  eigenproblems), forward, then forward and gradient;
- `routing`: the patch capsules' `QuaternionRouting` on their votes
  (3 iterations of means and angular distances);
- `forward`: the whole classifier.

Columns: median (best) of `--repeats`, in ms, and the process CPU time
(median) per call, which a busy machine inflates less than wall time.
"""

import json
import os

import harness

DOCS_SETTINGS = dict(primary_capsules=16, num_patches=64, patch_size=16, frame_neighbors=16)
LABELS = {"tensorflow": "TensorFlow, tf.function", "torch": "torch, eager", "jax": "JAX, jit"}


def compiled(fn, backend, xla=False):
    """`fn` compiled as Keras compiles a training step by default (with
    `xla`: XLA on TensorFlow too)."""
    if backend == "jax":
        import jax

        return jax.jit(fn)
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, jit_compile=xla)
    return fn


def gradient_of(fn, backend):
    """`x -> (sum(fn(x)), d sum(fn(x)) / dx)` on `backend`."""
    import keras

    if backend == "jax":
        import jax

        return jax.value_and_grad(lambda x: keras.ops.sum(fn(x)))
    if backend == "tensorflow":
        import tensorflow as tf

        def value_and_grad(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                value = tf.reduce_sum(fn(x))
            return value, tape.gradient(value, x)

        return value_and_grad
    import torch

    def value_and_grad(x):
        x = x.detach().requires_grad_(True)
        value = fn(x).sum()
        (grad,) = torch.autograd.grad(value, x)
        return value, grad

    return value_and_grad


def pointnet(num_classes, jit_compile="auto"):
    import keras

    model = keras.Sequential(
        [
            keras.Input((None, 3)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(48, activation="relu"),
            keras.layers.GlobalMaxPooling1D(),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(num_classes),
        ],
        name="pointnet",
    )
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=jit_compile,
    )
    return model


def worker(config):
    harness.worker_setup(config, torch_first=False)
    import keras
    import numpy as np
    from keras import ops

    import keras_capsules as kc

    backend = config["backend"]
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    batch, points_per_cloud = config["batch"], config["points"]
    points = rng.normal(size=(batch, points_per_cloud, 3)).astype("float32")
    labels = rng.integers(0, config["classes"], batch)
    settings = {**DOCS_SETTINGS, **config["settings"]}
    iterations = settings.pop("iterations", 3)
    router = kc.routing.QuaternionRouting(iterations, closed_form=config["closed_form"])
    model = kc.models.QuaternionCapsuleClassifier(config["classes"], router=router, **settings)
    if config["given_frames"]:
        centred = points - points.mean(axis=1, keepdims=True)
        given = ops.convert_to_tensor(ops.convert_to_numpy(model.frames(centred)))
        # The frames layer returns the batch's frames: the step without them.
        model.frames.call = lambda points, mask=None: given
    jit = True if config["jit_compile"] else "auto"
    model.compile(jit_compile=jit)
    baseline = pointnet(config["classes"], jit)

    def step(m):
        return lambda x: (m.train_on_batch(x, labels),)

    timings = {}
    timings.update(
        harness.time_interleaved(
            {"quaternion step": step(model), "pointnet step": step(baseline)},
            points,
            warmup=config["warmup"],
            repeats=config["repeats"],
        )
    )

    # The parts, at the sizes of one step.
    p, k, c = settings["num_patches"], settings["patch_size"], settings["primary_capsules"]
    means_q = rng.normal(size=(batch * p, c, k, 4))
    means_q /= np.linalg.norm(means_q, axis=-1, keepdims=True)
    means_q = ops.convert_to_tensor(means_q.astype("float32"))
    means_w = ops.convert_to_tensor(rng.uniform(0.1, 1, (batch * p, c, k)).astype("float32"))
    votes = ops.convert_to_tensor(ops.transpose(means_q, (0, 2, 1, 3)))
    router = model.patch_capsules.router
    x = ops.convert_to_tensor(points)

    def neighbours(x):
        return (kc.point_cloud.nearest_neighbors(x, x, settings["frame_neighbors"]),)

    def frames(x):
        return (model.frames(x),)

    def means(q):
        return (kc.quaternion.weighted_mean(q, means_w, closed_form=config["closed_form"]),)

    means_grad = gradient_of(
        lambda q: kc.quaternion.weighted_mean(q, means_w, closed_form=config["closed_form"]),
        backend,
    )

    def routing(v):
        return (router(v)[0],)

    def forward(x):
        return (model(x),)

    parts = {
        "neighbours": (compiled(neighbours, backend, config["jit_compile"]), x),
        "frames": (compiled(frames, backend, config["jit_compile"]), x),
        "means": (compiled(means, backend, config["jit_compile"]), means_q),
        "means + gradient": (compiled(means_grad, backend, config["jit_compile"]), means_q),
        "routing": (compiled(routing, backend, config["jit_compile"]), votes),
        "forward": (compiled(forward, backend, config["jit_compile"]), x),
    }
    for name, (fn, arg) in parts.items():
        timings.update(
            harness.time_interleaved(
                {name: fn}, arg, warmup=config["warmup"], repeats=config["repeats"]
            )
        )
    harness.reply(
        "RESULT",
        timings=timings,
        parameters=model.count_params(),
        pointnet_parameters=baseline.count_params(),
        load=os.getloadavg(),
        keras=keras.__version__,
    )
    os._exit(0)  # no interpreter teardown


def print_report(rows, args):
    sizes = next((r for r in rows if "parameters" in r), {})
    sizes = {
        k: f"{sizes[k]:,}" if k in sizes else "?" for k in ("parameters", "pointnet_parameters")
    }
    title = (
        f"QuaternionCapsuleClassifier ({sizes['parameters']} parameters) "
        f"against a PointNet ({sizes['pointnet_parameters']}), batch "
        f"{args.batch} of {args.points} points, settings {args.settings or 'defaults'}"
        f"{', frames given' if args.given_frames else ''}, {harness.machine()}; median (best) of "
        f"{args.repeats} in ms, CPU ms median:"
    )
    cells = []
    for row in rows:
        label = LABELS[row["backend"]]
        if args.jit_compile and row["backend"] == "tensorflow":
            label = "TensorFlow, XLA"
        if args.closed_form:
            label += ", closed form"
        if "error" in row:
            cells.append([label, f"failed: {row['error']}"])
            continue
        t = row["timings"]
        ratio = t["quaternion step"]["median_ms"] / t["pointnet step"]["median_ms"]
        for name, timing in t.items():
            cells.append(
                [label, name, harness.timing_cell(timing, ""), f"{timing['median_cpu_ms']:.1f}"]
            )
        load = ", ".join(f"{v:.1f}" for v in row["load"])
        cells.append([label, "step ratio (quaternion / PointNet)", f"{ratio:.1f}x", f"load {load}"])
    harness.print_table(["backend", "what", "ms", "CPU ms"], cells, title=title, align="llrr")


def main():
    parser = harness.argument_parser(__doc__)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--points", type=int, default=256)
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--closed-form", action="store_true")
    parser.add_argument("--jit-compile", action="store_true")
    parser.add_argument("--settings", default="", help="JSON: the classifier's settings")
    parser.add_argument("--given-frames", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    settings = json.loads(args.settings) if args.settings else {}
    unknown = set(settings) - set(DOCS_SETTINGS) - {"iterations"}
    if unknown:
        parser.error(
            f"--settings takes {sorted(DOCS_SETTINGS)} and iterations. Received: {unknown}"
        )
    rows = []
    for backend in args.backends.split(","):
        config = dict(
            backend=backend, batch=args.batch, points=args.points, classes=args.classes,
            repeats=args.repeats, warmup=args.warmup, closed_form=args.closed_form,
            jit_compile=args.jit_compile, settings=settings, given_frames=args.given_frames,
        )  # fmt: skip
        harness.log(f"{backend}: quaternion classifier and PointNet steps, parts")
        result, error = harness.measure(__file__, config, timeout=args.timeout)
        rows.append({**config, **result} if result else {**config, "error": error})
    print_report(rows, args)
    if args.json:
        harness.write_results(args.json, {"args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
