"""Native conv vs slices + matmul, forward+backward (input and kernel grads).

usage: python benchmarks/conv.py [--backends tensorflow,torch,jax] [--batch 16]

The primary-capsule conv of Sabour's CapsNet: 9x9, stride 2, 20x20x256 ->
6x6x256. Per backend, in a subprocess; TF both eager and with XLA.
Median (min) ms of repeated runs after warm-up.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def worker(backend, batch, repeats):
    os.environ["KERAS_BACKEND"] = backend
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    sys.path.insert(0, HERE)
    import keras
    from _backend import grad_step, random_tensor, time_fn

    from keras_capsules.conv import conv2d

    x = random_tensor((batch, 20, 20, 256))
    kernel = random_tensor((9, 9, 256, 256), seed=1) * 0.01
    modes = [True, False] if backend == "tensorflow" else [backend == "jax"]
    results = {}
    for jit in modes:
        for impl in ("conv", "matmul"):
            def loss_fn(inp, impl=impl):
                y = conv2d(inp, kernel, (2, 2), "valid", impl)
                return keras.ops.sum(y * y)

            key = f"{impl}{'+xla' if jit else ''}"
            results[key] = time_fn(grad_step(loss_fn, jit=jit), x, repeats=repeats)
    print("RESULT " + json.dumps(results))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backends", default="tensorflow,torch,jax")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.backend:
        return worker(args.backend, args.batch, args.repeats)
    print(f"conv 9x9 stride 2, ({args.batch}, 20, 20, 256) -> 256, fwd+bwd ms median (min)")
    for backend in args.backends.split(","):
        out = subprocess.run(
            [sys.executable, __file__, "--backend", backend, "--batch", str(args.batch),
             "--repeats", str(args.repeats)],
            capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
        lines = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
        if not lines:
            print(f"{backend} failed:\n{out.stderr[-2000:]}")
            continue
        for key, (median, best) in json.loads(lines[-1][7:]).items():
            print(f"{backend:<12}{key:<14}{median:>10.1f} ({best:.1f})")


if __name__ == "__main__":
    main()
