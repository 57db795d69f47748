"""Accuracy of shared-transform class capsules on a transformer's tokens, per router and backend.

usage: python benchmarks/shared_transforms.py [--backends tensorflow,torch,jax]
           [--routers dynamic,em,...] [--epochs 5] [--samples 2048] [--seed 1]
           [--json out.json]

The figures behind `Capsule(share_weights=True)`'s default transforms
(`Router.vote_stddev(..., coherent=True)`). The model: 32 x 32 images of
one of four strokes (16 x 2 pixels) in noise, cut into 64 patches of 4 x 4, embedded to
64 features (with learned positions), one transformer block
(`MultiHeadAttention`, 4 heads, post-norm, a 128-unit MLP), its
layer-normalised tokens made into one 16-D capsule each
(`SetPrimaryCapsule(1, 16)`), then `Capsule(4, 16, share_weights=True,
router=...)` -> `Length` -> `MarginLoss`, trained with `compile()`'s
defaults (Adam) for `--epochs` epochs of `--samples` images, batch 32.

Each router runs twice from the same seed: with the default transforms
("coherent": derived for children whose votes add up in one direction)
and with transforms derived for children of independent directions
("independent": `transform_initializer(router.vote_stddev(64, 4, 16))`,
the default before). Reported: the class capsules' mean (max) length at
initialisation on the test images and the test accuracy at the end
(chance: 25 %). Each backend runs in a worker process of its own.
"""

import json
import os
import subprocess
import sys

import numpy as np
from harness import argument_parser, log, machine, print_table, worker_setup, write_results

SIZE, PATCH, WIDTH, CLASSES = 32, 4, 64, 4


def strokes(count, seed):
    """Images of one of four strokes (horizontal, vertical, both diagonals;
    16 pixels long, 2 wide) at a random place in uniform noise, and their
    labels."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, count)
    images = rng.uniform(0.0, 0.2, (count, SIZE, SIZE)).astype("float32")
    offsets = np.arange(16)
    steps = {0: (0 * offsets, offsets), 1: (offsets, 0 * offsets), 2: (offsets, offsets)}
    steps[3] = (offsets, 15 - offsets)
    for n, label in enumerate(labels):
        top, left = rng.integers(0, SIZE - 16, 2)
        rows, cols = steps[label]
        images[n, top + rows, left + cols] = 1.0
        images[n, top + rows + (label != 1), left + cols + (label == 1)] = 1.0
    return images[..., None], labels


def build(router, init):
    import keras

    class AddPositions(keras.layers.Layer):
        """A learned embedding per token position, added to the tokens."""

        def build(self, input_shape):
            self.positions = self.add_weight(
                shape=tuple(input_shape[1:]), initializer="random_normal", name="positions"
            )

        def call(self, tokens):
            return tokens + self.positions

    import keras_capsules as kc

    tokens_per_side = SIZE // PATCH
    images = keras.Input((SIZE, SIZE, 1))
    x = keras.layers.Conv2D(WIDTH, PATCH, strides=PATCH)(images)
    x = keras.layers.Reshape((tokens_per_side**2, WIDTH))(x)
    x = AddPositions()(x)
    attended = keras.layers.MultiHeadAttention(4, WIDTH // 4)(x, x)
    x = keras.layers.LayerNormalization()(keras.layers.Add()([x, attended]))
    mlp = keras.layers.Dense(2 * WIDTH, activation="gelu")(x)
    x = keras.layers.LayerNormalization()(keras.layers.Add()([x, keras.layers.Dense(WIDTH)(mlp)]))
    capsules = kc.SetPrimaryCapsule(1, 16)(x)
    kwargs = {}
    if init == "independent":
        children = tokens_per_side**2
        std = kc.routing.get(router).vote_stddev(children, CLASSES, 16)
        kwargs["kernel_initializer"] = kc.initializers.transform_initializer(std)
    classes = kc.Capsule(CLASSES, 16, share_weights=True, router=router, **kwargs)(capsules)
    model = keras.Model(images, kc.Length()(classes))
    model.compile(loss=kc.MarginLoss(), metrics=["accuracy"])
    return model


def worker(config):
    worker_setup(config)
    import keras

    x, y = strokes(config["samples"], seed=0)
    x_test, y_test = strokes(512, seed=1)
    rows = []
    for router in config["routers"]:
        for init in ("independent", "coherent"):
            keras.utils.set_random_seed(config["seed"])
            model = build(router, init)
            lengths = model.predict(x_test, verbose=0)
            model.fit(x, y, batch_size=32, epochs=config["epochs"], verbose=0)
            accuracy = model.evaluate(x_test, y_test, verbose=0)[1]
            row = {
                "backend": config["backend"],
                "router": router,
                "init": init,
                "initial_length_mean": float(lengths.mean()),
                "initial_length_max": float(lengths.max()),
                "accuracy": float(accuracy),
            }
            print("ROW " + json.dumps(row), flush=True)
            rows.append(row)


def main():
    parser = argument_parser(__doc__)
    parser.add_argument(
        "--routers",
        default="dynamic,em,heinsen,inverted_dot_product,self_attention,self_routing,sparse_attention",
    )
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    rows = []
    for backend in args.backends.split(","):
        config = dict(
            backend=backend,
            routers=args.routers.split(","),
            epochs=args.epochs,
            samples=args.samples,
            seed=args.seed,
        )
        log(f"{backend}: {len(config['routers'])} routers")
        command = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(config)]
        with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as worker_process:
            for line in worker_process.stdout:
                if not line.startswith("ROW "):
                    continue
                row = json.loads(line[4:])
                rows.append(row)
                log(
                    f"{row['backend']} {row['router']} {row['init']}: {100 * row['accuracy']:.1f} %"
                )
    print_table(
        ["backend", "router", "init", "length at init, mean (max)", "accuracy"],
        [
            [
                row["backend"],
                row["router"],
                row["init"],
                f"{row['initial_length_mean']:.3f} ({row['initial_length_max']:.3f})",
                f"{100 * row['accuracy']:.1f} %",
            ]
            for row in rows
        ],
        title=f"{machine()}; {args.epochs} epochs of {args.samples} images, seed {args.seed}",
        align="lllrr",
    )
    if args.json:
        write_results(args.json, {"args": vars(args), "machine": machine(), "rows": rows})


if __name__ == "__main__":
    main()
