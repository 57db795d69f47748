"""Native conv vs slices + matmul vs hybrid, forward + backward (input and
kernel gradients), per backend.

usage: python benchmarks/conv.py [--backends tensorflow,torch,jax]
           [--batch 16] [--shapes primary,efficient]

Shapes: `primary`, the primary-capsule conv of Sabour's CapsNet (9x9,
stride 2, 20x20x256 -> 6x6x256); `efficient`, Efficient-CapsNet's stem
(5x5 1->32, 3x3 32->64, 3x3 64->64, 3x3 stride 2 64->128 on 28x28, valid),
summed. Implementations (`keras_capsules.conv.conv2d`): `conv` (native),
`matmul` (strided slices + one matmul), `hybrid` (native forward and input
gradient, kernel gradient as a matmul on the patches). Each backend runs in
a subprocess; TensorFlow both with and without XLA, JAX jitted, torch eager.
Median (min) ms of repeated runs after warm-up. This is what
`keras_capsules.conv.resolve_implementation` is based on.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
IMPLEMENTATIONS = ("conv", "matmul", "hybrid")
# (kernel, strides, input channels, output channels) of each conv, and its input size.
SHAPES = {
    "primary": (20, [(9, 2, 256, 256)]),
    "efficient": (28, [(5, 1, 1, 32), (3, 1, 32, 64), (3, 1, 64, 64), (3, 2, 64, 128)]),
}


def worker(backend, batch, repeats, shape):
    os.environ["KERAS_BACKEND"] = backend
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    sys.path.insert(0, HERE)
    import keras
    from _backend import grad_step, random_tensor, time_fn

    from keras_capsules.conv import conv2d

    size, convs = SHAPES[shape]
    x = random_tensor((batch, size, size, convs[0][2]))
    kernels = [random_tensor((k, k, cin, cout), seed=i + 1) * 0.05
               for i, (k, _, cin, cout) in enumerate(convs)]
    modes = [True, False] if backend == "tensorflow" else [backend == "jax"]
    results = {}
    for jit in modes:
        for impl in IMPLEMENTATIONS:
            def loss_fn(inp, *kernels, impl=impl):
                # The convs chained as in the network; the input and every
                # kernel get a gradient.
                y = inp
                for kernel, (_, s, _, _) in zip(kernels, convs):
                    y = conv2d(y, kernel, (s, s), "valid", impl)
                return keras.ops.sum(y * y)

            key = f"{impl}{'+xla' if jit else ''}"
            results[key] = time_fn(grad_step(loss_fn, jit=jit), x, *kernels, repeats=repeats)
    print("RESULT " + json.dumps(results))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backends", default="tensorflow,torch,jax")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shapes", default="primary,efficient")
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.backend:
        return worker(args.backend, args.batch, args.repeats, args.shapes)
    for shape in args.shapes.split(","):
        size, convs = SHAPES[shape]
        print(f"{shape}: batch {args.batch}, {size}x{size}x{convs[0][2]}, convs "
              f"(kernel, stride, in, out) {convs}; fwd+bwd ms median (min)")
        for backend in args.backends.split(","):
            out = subprocess.run(
                [sys.executable, __file__, "--backend", backend, "--batch", str(args.batch),
                 "--repeats", str(args.repeats), "--shapes", shape],
                capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
            lines = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
            if not lines:
                print(f"{backend} failed:\n{out.stderr[-2000:]}")
                continue
            for key, (median, best) in json.loads(lines[-1][7:]).items():
                print(f"  {backend:<12}{key:<14}{median:>10.1f} ({best:.1f})")


if __name__ == "__main__":
    main()
