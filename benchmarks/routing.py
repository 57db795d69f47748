"""Routing forward+backward time per router and backend.

usage: python benchmarks/routing.py [--backends tensorflow,torch,jax]
                                    [--routers dynamic,...] [--repeats 10]
                                    [--shape 128,1152,10,16]

Each backend runs in its own subprocess (a backend cannot change inside a
process). Each measurement is the median (and minimum) of `--repeats` runs
after warm-up, of one jitted step (XLA on TF and JAX, eager on torch) that
computes the routing output and the gradient of a scalar of it w.r.t. the
votes. Prints a table: router x backend, ms per forward+backward.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BACKENDS = ("tensorflow", "torch", "jax")


def routers():
    """name -> router factory. Add new routers here."""
    from keras_capsules import routing

    return {
        "dynamic": lambda: routing.DynamicRouting(iterations=3),
        "dynamic-stopgrad": lambda: routing.DynamicRouting(iterations=3, stop_gradient=True),
        "self-attention": lambda: routing.SelfAttentionRouting(),
        "sparse-attention": lambda: routing.SparseAttentionRouting(),
        "sparse-attention-top3": lambda: routing.SparseAttentionRouting(top_k=3),
        "inverted-dot-product": lambda: routing.InvertedDotProductRouting(iterations=2),
        "self-routing": lambda: routing.SelfRouting(),
        "em": lambda: routing.EMRouting(iterations=3),
    }


def worker(args):
    os.environ["KERAS_BACKEND"] = args.backend
    try:
        import torch  # noqa: F401  (before tensorflow)
    except ImportError:
        pass
    sys.path.insert(0, HERE)
    import keras
    from _backend import grad_step, random_tensor, time_fn

    shape = tuple(int(s) for s in args.shape.split(","))
    votes = random_tensor(shape)
    results = {}
    factories = routers()
    for name in args.routers.split(",") if args.routers else factories:
        router = factories[name]()
        router.build(shape)

        def loss_fn(v, router=router):
            poses, activations = router(v)
            return keras.ops.sum(poses * poses) + keras.ops.sum(activations)

        median, best = time_fn(grad_step(loss_fn), votes, repeats=args.repeats)
        results[name] = {"median_ms": median, "min_ms": best}
    print("RESULT " + json.dumps(results))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--routers", default="")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--shape", default="128,1152,10,16")
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.backend:
        return worker(args)

    table = {}
    for backend in args.backends.split(","):
        cmd = [sys.executable, __file__, "--backend", backend, "--repeats",
               str(args.repeats), "--shape", args.shape, "--routers", args.routers]
        env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        lines = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
        if out.returncode or not lines:
            print(f"{backend} failed:\n{out.stderr[-3000:]}", file=sys.stderr)
            continue
        table[backend] = json.loads(lines[-1][len("RESULT "):])

    backends = list(table)
    names = sorted({n for r in table.values() for n in r}, key=lambda n: n)
    print(f"votes {args.shape}, forward+backward, ms median (min) of {args.repeats}")
    print(f"{'router':<24}" + "".join(f"{b:>22}" for b in backends))
    for name in names:
        cells = []
        for b in backends:
            r = table[b].get(name)
            cells.append(f"{r['median_ms']:>12.1f} ({r['min_ms']:.1f})" if r else f"{'-':>22}")
        print(f"{name:<24}" + "".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    main()
