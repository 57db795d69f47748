"""ConvMatrixCapsule forward+backward time per backend.

usage: python benchmarks/conv_capsule.py [--backends tensorflow,torch,jax]
                                         [--batch 32] [--grid 14] [--types 32]
                                         [--repeats 5]

Default: the paper's first convolutional capsule layer on smallNORB, 32 ->
32 capsule types, 3x3 kernel, stride 2, on a 14x14 grid of 4x4 poses,
batch 32, EM routing with 3 iterations. Each backend runs in a worker
process of its own (benchmarks/harness.py); each number is the median (and
minimum) of `--repeats` runs after warm-up, of one jitted step (XLA on TF
and JAX, eager on torch) that computes the layer and the gradient of a
scalar of it w.r.t. the poses.
"""

import json
import os

import harness


def worker(config):
    harness.worker_setup(config)
    import keras
    from _backend import grad_step, random_tensor

    from keras_capsules.layers import ConvMatrixCapsule

    grid = (config["batch"], config["grid"], config["grid"], config["types"])
    poses = random_tensor((*grid, 16))
    activations = keras.ops.sigmoid(random_tensor(grid, seed=1))
    layer = ConvMatrixCapsule(config["types"], 3, strides=2)
    layer([poses, activations])

    def loss_fn(p):
        parent_poses, parent_activations = layer([p, activations])
        return keras.ops.sum(parent_poses * parent_poses) + keras.ops.sum(parent_activations)

    timing = harness.time_interleaved(
        {"step": grad_step(loss_fn)}, poses, warmup=1, repeats=config["repeats"]
    )["step"]
    harness.reply("RESULT", median_ms=timing["median_ms"], min_ms=timing["min_ms"])


def main():
    parser = harness.argument_parser(__doc__)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--grid", type=int, default=14)
    parser.add_argument("--types", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))

    title = (
        f"ConvMatrixCapsule {args.types}->{args.types} types, 3x3, stride 2, "
        f"{args.grid}x{args.grid} grid, batch {args.batch}, EM 3 iterations: "
        f"forward+backward, ms median (min) of {args.repeats}; {harness.machine()}"
    )
    rows = []
    for backend in args.backends.split(","):
        config = dict(
            backend=backend,
            batch=args.batch,
            grid=args.grid,
            types=args.types,
            repeats=args.repeats,
        )
        r, error = harness.measure(os.path.abspath(__file__), config)
        rows.append([backend, f"failed: {error}" if r is None else harness.timing_cell(r)])
    harness.print_table(["backend", "ms median (min)"], rows, title=title)


if __name__ == "__main__":
    main()
