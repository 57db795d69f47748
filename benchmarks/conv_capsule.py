"""ConvMatrixCapsule forward+backward time per backend.

usage: python benchmarks/conv_capsule.py [--backends tensorflow,torch,jax]
                                         [--batch 32] [--grid 14] [--types 32]
                                         [--repeats 5]

Default: the paper's first convolutional capsule layer on smallNORB, 32 ->
32 capsule types, 3x3 kernel, stride 2, on a 14x14 grid of 4x4 poses,
batch 32, EM routing with 3 iterations. Each backend runs in its own
subprocess; each number is the median (and minimum) of `--repeats` runs
after warm-up, of one jitted step (XLA on TF and JAX, eager on torch) that
computes the layer and the gradient of a scalar of it w.r.t. the poses.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BACKENDS = ("tensorflow", "torch", "jax")


def worker(args):
    os.environ["KERAS_BACKEND"] = args.backend
    try:
        import torch  # noqa: F401  (before tensorflow)
    except ImportError:
        pass
    sys.path.insert(0, HERE)
    import keras
    from _backend import grad_step, random_tensor, time_fn

    from keras_capsules.layers import ConvMatrixCapsule

    grid = (args.batch, args.grid, args.grid, args.types)
    poses = random_tensor((*grid, 16))
    activations = keras.ops.sigmoid(random_tensor(grid, seed=1))
    layer = ConvMatrixCapsule(args.types, 3, strides=2)
    layer([poses, activations])

    def loss_fn(p):
        parent_poses, parent_activations = layer([p, activations])
        return keras.ops.sum(parent_poses * parent_poses) + keras.ops.sum(parent_activations)

    median, best = time_fn(grad_step(loss_fn), poses, warmup=1, repeats=args.repeats)
    print("RESULT " + json.dumps({"median_ms": median, "min_ms": best}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--grid", type=int, default=14)
    parser.add_argument("--types", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.backend:
        return worker(args)

    print(f"ConvMatrixCapsule {args.types}->{args.types} types, 3x3, stride 2, "
          f"{args.grid}x{args.grid} grid, batch {args.batch}, EM 3 iterations: "
          f"forward+backward, ms median (min) of {args.repeats}")
    for backend in args.backends.split(","):
        cmd = [sys.executable, __file__, "--backend", backend, "--batch", str(args.batch),
               "--grid", str(args.grid), "--types", str(args.types),
               "--repeats", str(args.repeats)]
        env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        lines = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
        if out.returncode or not lines:
            print(f"{backend} failed:\n{out.stderr[-3000:]}", file=sys.stderr)
            continue
        r = json.loads(lines[-1][len("RESULT "):])
        print(f"{backend:<12}{r['median_ms']:>12.1f} ({r['min_ms']:.1f})")


if __name__ == "__main__":
    main()
