"""Capsule networks 1 to 8 routed layers deep, every router: accuracy,
starved capsules, routing entropy and gradient norms per layer.

usage: python benchmarks/depth.py [--mnist mnist.npz] [--depths 1,2,3,5,8]
           [--routers dynamic,em,...] [--train 6000] [--test 2000]
           [--epochs 2] [--batch 64] [--seed 0] [--residual] [--calibrate]
           [--json out.json] [--figure depth.png]

Runs on the current backend (`KERAS_BACKEND`). `--mnist` is an `.npz`
with `x_train, y_train, x_test, y_test` (Keras's `mnist.npz`); without it
the digits are generated (for tests; the numbers then mean nothing).

The network at depth `D`: `Conv2D(32, 9, relu)` -> `PrimaryCapsule(8
types of 8 dims, 9 x 9, stride 2)` (288 children) -> `D - 1` hidden
`Capsule(16, 8)` layers -> `Capsule(10, 16)` -> `Length`, every capsule
layer routed by the router under test (its defaults), trained with Adam
(1e-3) and the margin loss for `--epochs` on the first `--train` training
digits, the same budget at every depth. With `--residual` each hidden
layer's output is added to its input (same shape: 16 capsules of 8, the
first hidden layer excepted), the skip connection of DeepCaps. With
`--calibrate` the routed layers' transforms are rescaled before training
so that each layer's capsules start at length 0.5 on 256 training digits
(`keras_capsules.calibration.calibrate`).

Per run: test accuracy on the first `--test` test digits, and per routed
layer (`keras_capsules.diagnostics.capsule_statistics` on 256 test digits)
the starved fraction (parents below 0.01 for every digit), the
coefficient entropy (1: even), the mean activation, how much the last
routing iteration moved the coefficients (`coefficient_change`), and the norm of the
loss's gradient for the layer's weights on one batch of 64 (one step of
SGD at learning rate 1 from the trained weights, undone).
"""

import argparse
import json
import time

import keras
import numpy as np

import keras_capsules as kc

DEFAULT_ROUTERS = "dynamic,em,self_attention,inverted_dot_product,self_routing,heinsen"


def load_digits(path, train, test, seed):
    """`(x_train, y_train, x_test, y_test)`: MNIST from `path`, or
    generated digit-like images (a bar per class) without one."""
    if path:
        with np.load(path) as f:
            x, y, xt, yt = f["x_train"][:train], f["y_train"][:train], f["x_test"], f["y_test"]
        xt, yt = xt[:test], yt[:test]
        scale = np.float32(1 / 255)
        return x[..., None] * scale, y.astype("int32"), xt[..., None] * scale, yt.astype("int32")
    rng = np.random.default_rng(seed)

    def make(n):
        labels = rng.integers(0, 10, n).astype("int32")
        images = rng.uniform(0, 0.2, size=(n, 28, 28, 1)).astype("float32")
        for k, label in enumerate(labels):
            images[k, 2 + 2 * label : 5 + 2 * label, 4:24] += 0.8
        return images, labels

    return (*make(train), *make(test))


def build(depth, router, residual=False):
    images = keras.Input((28, 28, 1))
    x = keras.layers.Conv2D(32, 9, activation="relu")(images)
    x = kc.PrimaryCapsule(8, 8, 9, strides=2, name="primary")(x)
    for k in range(depth - 1):
        hidden = kc.Capsule(16, 8, router=kc.routing.get(router), name=f"hidden_{k + 1}")(x)
        x = keras.layers.Add(name=f"skip_{k + 1}")([x, hidden]) if residual and k else hidden
    classes = kc.Capsule(10, 16, router=kc.routing.get(router), name="classes")(x)
    return keras.Model(images, kc.Length()(classes))


def gradient_norms(model, x, y):
    """`{layer: |d loss / d weights|}` of every routed layer: one SGD step
    at learning rate 1 moves the weights by the gradient; then undone."""
    layers = [layer for layer in model.layers if isinstance(layer, kc.layers.Capsule)]
    before = {
        layer.name: [keras.ops.convert_to_numpy(w) for w in layer.trainable_weights]
        for layer in layers
    }
    optimizer = model.optimizer
    model.compile(optimizer=keras.optimizers.SGD(1.0), loss=kc.MarginLoss())
    model.train_on_batch(x, y)
    norms = {}
    for layer in layers:
        moved = [
            keras.ops.convert_to_numpy(w) - b
            for w, b in zip(layer.trainable_weights, before[layer.name])
        ]
        norms[layer.name] = float(np.sqrt(sum(np.sum(m.astype("float64") ** 2) for m in moved)))
        for w, b in zip(layer.trainable_weights, before[layer.name]):
            w.assign(b)
    model.compile(optimizer=optimizer, loss=kc.MarginLoss(), metrics=["accuracy"])
    return norms


def run(depth, router, data, args):
    x, y, xt, yt = data
    keras.utils.set_random_seed(args.seed)
    model = build(depth, router, args.residual)
    if args.calibrate:
        kc.calibration.calibrate(model, x[:256])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=kc.MarginLoss(), metrics=["accuracy"])
    start = time.perf_counter()
    history = model.fit(
        x, np.eye(10)[y], batch_size=args.batch, epochs=args.epochs, verbose=0
    ).history
    seconds = time.perf_counter() - start
    accuracy = model.evaluate(xt, np.eye(10)[yt], batch_size=256, verbose=0)[1]
    stats = kc.diagnostics.capsule_statistics(
        model, xt[:256], yt[:256], batch_size=64, iteration_change=True
    )
    norms = gradient_norms(model, xt[:64], np.eye(10)[yt[:64]])
    layers = {
        name: {
            "starved_fraction": row["starved_fraction"],
            "coefficient_entropy": row["coefficient_entropy"],
            "activation_mean": row["activation_mean"],
            "coefficient_change": row["coefficient_change"],
            "gradient_norm": norms.get(name, float("nan")),
        }
        for name, row in stats.items()
    }
    return {
        "depth": depth, "router": router, "residual": args.residual,
        "calibrate": args.calibrate,
        "test_accuracy": float(accuracy), "final_loss": float(history["loss"][-1]),
        "first_loss": float(history["loss"][0]), "train_seconds": seconds, "layers": layers,
    }  # fmt: skip


def table(rows):
    lines = [
        "| router | depth | test accuracy | starved (worst layer) | entropy (mean) "
        "| activation (last hidden) | gradient norm (first / last layer) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        layers = list(r["layers"].values())
        hidden = layers[-2]["activation_mean"] if len(layers) > 1 else float("nan")
        lines.append(
            f"| {r['router']} | {r['depth']} | {100 * r['test_accuracy']:.1f} % "
            f"| {max(v['starved_fraction'] for v in layers):.2f} "
            f"| {np.mean([v['coefficient_entropy'] for v in layers]):.2f} | {hidden:.3f} "
            f"| {layers[0]['gradient_norm']:.2e} / {layers[-1]['gradient_norm']:.2e} |"
        )
    return "\n".join(lines)


def figure(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for router in dict.fromkeys(r["router"] for r in rows):
        mine = sorted((r for r in rows if r["router"] == router), key=lambda r: r["depth"])
        depths = [r["depth"] for r in mine]
        axes[0].plot(depths, [100 * r["test_accuracy"] for r in mine], marker="o", label=router)
        worst = [max(v["starved_fraction"] for v in r["layers"].values()) for r in mine]
        axes[1].plot(depths, worst, marker="o", label=router)
        entropy = [np.mean([v["coefficient_entropy"] for v in r["layers"].values()]) for r in mine]
        axes[2].plot(depths, entropy, marker="o", label=router)
    for ax, title in zip(axes, ("test accuracy (%)", "starved fraction, worst layer",
                                "coefficient entropy, mean")):  # fmt: skip
        ax.set_xlabel("routed capsule layers")
        ax.set_title(title)
    axes[0].legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mnist", default=None)
    parser.add_argument("--depths", default="1,2,3,5,8")
    parser.add_argument("--routers", default=DEFAULT_ROUTERS)
    parser.add_argument("--train", type=int, default=6000)
    parser.add_argument("--test", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--residual", action="store_true")
    parser.add_argument("--calibrate", action="store_true")
    parser.add_argument("--json", default=None)
    parser.add_argument("--figure", default=None)
    args = parser.parse_args(argv)
    depths = [int(d) for d in args.depths.split(",")]
    if min(depths) < 1:
        parser.error(f"--depths must be >= 1. Received: --depths {args.depths}")
    data = load_digits(args.mnist, args.train, args.test, args.seed)
    rows = []
    for router in args.routers.split(","):
        for depth in depths:
            rows.append(run(depth, router, data, args))
            r = rows[-1]
            print(f"{router} depth {depth}: {100 * r['test_accuracy']:.1f} % in "
                  f"{r['train_seconds']:.0f} s", flush=True)  # fmt: skip
            if args.json:  # after every run: a long study keeps what it has
                with open(args.json, "w") as f:
                    json.dump({"args": vars(args), "backend": keras.backend.backend(),
                               "rows": rows}, f, indent=1)  # fmt: skip
    print(table(rows))
    if args.figure:
        figure(rows, args.figure)
    return rows


if __name__ == "__main__":
    main()
