"""Routing forward+backward time per router and backend, ours vs pure.

usage: python benchmarks/routing.py [--backends tensorflow,torch,jax]
                                    [--routers dynamic,...] [--repeats 5]
                                    [--shape 128,1152,10,16]
                                    [--torch-compile] [--json out.json]

Each backend runs in its own subprocess (a backend cannot change inside a
process). For every router, the library's router ("ours") is compared with
a hand-written plain-framework implementation of the same math ("pure",
benchmarks/pure_routing_{tf,torch,jax}.py) on the same votes and the same
(randomised) router weights: forward values must agree within 1e-4
(relative) and gradients within 1e-3, or the run fails. Then both are timed
interleaved in the same process: one step is the routing output and the
gradient of a scalar of it w.r.t. the votes, jitted with XLA on TF
(`tf.function(jit_compile=True)`) and JAX (`jax.jit`), eager on torch.
`--torch-compile` adds `torch.compile` of the pure torch router as a third
column (information only: ours runs eager). Prints ms per step, median
(min) of `--repeats` after warm-up, and the ratios ours / pure of the
median wall times, of the minimum wall times and, steadier on a shared
machine, of the median CPU times (all threads of the process). Votes are
0.1 * N(0, 1), seed 0. Workers run with OMP_WAIT_POLICY=PASSIVE unless it is
set: torch's busy-waiting OpenMP threads make timings on a loaded machine
erratic (seconds per step), for ours and pure alike.
"""

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
BACKENDS = ("tensorflow", "torch", "jax")
PURE_MODULES = {
    "tensorflow": "pure_routing_tf",
    "torch": "pure_routing_torch",
    "jax": "pure_routing_jax",
}
FORWARD_RTOL = 1e-4
GRADIENT_RTOL = 1e-3
# Votes are 0.1 * N(0, 1), the scale of real capsule votes: with N(0, 1), the
# attention routers' logits reach ~100 and their float32 gradients are noise
# (thousands of times off float64), so no gradient check could pass.
VOTE_SCALE = 0.1


def routers():
    """name -> router factory. Add new routers here (and a pure version of
    each new router class in every pure_routing_* module)."""
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


def check_close(what, ours, pure, rtol):
    """Fails loudly unless `ours` is within `rtol` of `pure`, relative to
    the largest magnitude of `pure` (elementwise relative errors are
    meaningless where values cancel to ~0)."""
    ours, pure = np.asarray(ours, np.float64), np.asarray(pure, np.float64)
    if ours.shape != pure.shape:
        raise SystemExit(f"MISMATCH {what}: shapes {ours.shape} vs {pure.shape}")
    scale = max(float(np.max(np.abs(pure))), 1e-12)
    error = float(np.max(np.abs(ours - pure))) / scale
    if not np.all(np.isfinite(ours)) or not error <= rtol:
        raise SystemExit(f"MISMATCH {what}: max |ours - pure| / max |pure| = {error:.3g} > {rtol}")
    return error


def randomise_weights(router, seed=1):
    """Moves every router weight off its initial value, so the check above
    also covers priors, kernels and betas (zeros at initialisation)."""
    rng = np.random.default_rng(seed)
    for w in router.weights:
        w.assign(np.asarray(w.numpy() + 0.1 * rng.normal(size=w.shape), "float32"))
    return {w.name: np.asarray(w.numpy()) for w in router.weights}


def time_interleaved(fns, x, warmup=2, repeats=5):
    """{name: (median ms, min ms, median CPU ms of this process)}; the
    functions alternate within each repeat (order reversed every other
    repeat) so load drifts hit all. CPU time (all threads) is less
    sensitive than wall time to other processes on a shared machine."""
    from _backend import block

    for fn in fns.values():
        for _ in range(warmup):
            block(fn(x)[0])
    times = {name: [] for name in fns}
    cpu_times = {name: [] for name in fns}
    names = list(fns)
    for rep in range(repeats):
        for name in names if rep % 2 == 0 else names[::-1]:
            start, cpu_start = time.perf_counter(), time.process_time()
            block(fns[name](x)[0])
            times[name].append((time.perf_counter() - start) * 1e3)
            cpu_times[name].append((time.process_time() - cpu_start) * 1e3)
    return {
        n: (statistics.median(t), min(t), statistics.median(cpu_times[n]))
        for n, t in times.items()
    }


def worker(args):
    os.environ["KERAS_BACKEND"] = args.backend
    try:
        import torch  # noqa: F401  (before tensorflow)
    except ImportError:
        pass
    # This checkout's library (not whichever one is installed), then _backend.
    sys.path[:0] = [os.path.dirname(HERE), HERE]
    import keras
    from _backend import grad_step

    import keras_capsules

    print(f"{args.backend}: library {os.path.dirname(keras_capsules.__file__)}", file=sys.stderr)
    pure = importlib.import_module(PURE_MODULES[args.backend])
    to_numpy = keras.ops.convert_to_numpy
    shape = tuple(int(s) for s in args.shape.split(","))
    votes = keras.ops.convert_to_tensor(
        (VOTE_SCALE * np.random.default_rng(0).normal(size=shape)).astype("float32"))
    results = {}
    factories = routers()
    for name in args.routers.split(",") if args.routers else factories:
        router = factories[name]()
        router.build(shape)
        weights = randomise_weights(router)
        kind = type(router).__name__
        if kind not in pure.ROUTERS:
            raise SystemExit(f"{pure.__name__} has no pure version of {kind}")
        pure_route = pure.ROUTERS[kind](router.get_config(), weights)

        def ours_loss(v, router=router):
            poses, activations = router(v)
            return keras.ops.sum(poses * poses) + keras.ops.sum(activations)

        steps = {
            "ours": grad_step(ours_loss),
            "pure": grad_step(lambda v: pure.loss(pure_route(v))),
        }
        if args.torch_compile and args.backend == "torch":
            import torch

            compiled = torch.compile(pure_route)
            steps["compiled"] = grad_step(lambda v: pure.loss(compiled(v)))

        errors = {}
        outputs = zip(("poses", "activations"), router(votes), pure_route(votes))
        for out, ours_out, pure_out in outputs:
            errors[out] = check_close(
                f"{name} {out}", to_numpy(ours_out), to_numpy(pure_out), FORWARD_RTOL
            )
        ours_grad = to_numpy(steps["ours"](votes)[1])
        for other in list(steps)[1:]:
            errors[f"{other} gradient"] = check_close(
                f"{name} {other} gradient",
                ours_grad,
                to_numpy(steps[other](votes)[1]),
                GRADIENT_RTOL,
            )
        timings = time_interleaved(steps, votes, repeats=args.repeats)
        results[name] = {
            k: {"median_ms": m, "min_ms": b, "median_cpu_ms": c} for k, (m, b, c) in timings.items()
        }
        results[name]["max_relative_error"] = errors
        summary = ", ".join(f"{k} {m:.1f} ({b:.1f})" for k, (m, b, _) in timings.items())
        print(f"{args.backend} {name}: {summary}", file=sys.stderr, flush=True)
    print("RESULT " + json.dumps(results))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--routers", default="")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shape", default="128,1152,10,16")
    parser.add_argument("--torch-compile", action="store_true")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeats < 3:
        parser.error(f"--repeats must be at least 3. Received: --repeats={args.repeats}")
    if args.backend:
        return worker(args)

    table, failed = {}, []
    for backend in args.backends.split(","):
        cmd = [sys.executable, __file__, "--backend", backend, "--repeats",
               str(args.repeats), "--shape", args.shape, "--routers", args.routers]
        if args.torch_compile:
            cmd.append("--torch-compile")
        env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
        # Busy-waiting OpenMP threads (torch's default) turn a shared, loaded
        # machine's noise into seconds per step; passive waiting keeps it sane.
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True)
        lines = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
        if out.returncode or not lines:
            print(f"{backend} failed (exit {out.returncode})", file=sys.stderr)
            failed.append(backend)
            continue
        table[backend] = json.loads(lines[-1][len("RESULT "):])

    print(f"votes {args.shape}, forward+backward, ms median (min) of {args.repeats}, "
          "interleaved; ratio = ours / pure (medians); "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'PASSIVE')}")
    header = f"{'router':<22} {'backend':<11}{'ours':>18}{'pure':>18}"
    header += f"{'ratio':>7}{'min ratio':>10}{'cpu ratio':>10}"
    if args.torch_compile:
        header += f"{'torch.compile(pure)':>22}"
    print(header)
    names = list(dict.fromkeys(n for rows in table.values() for n in rows))
    for name in names:
        for backend, rows in table.items():
            if name not in rows:
                continue
            r = rows[name]
            cells = [f"{r[k]['median_ms']:.1f} ({r[k]['min_ms']:.1f})" for k in ("ours", "pure")]
            line = f"{name:<22} {backend:<11}{cells[0]:>18}{cells[1]:>18}"
            line += f"{r['ours']['median_ms'] / r['pure']['median_ms']:>7.2f}"
            line += f"{r['ours']['min_ms'] / r['pure']['min_ms']:>10.2f}"
            line += f"{r['ours']['median_cpu_ms'] / r['pure']['median_cpu_ms']:>10.2f}"
            if "compiled" in r:
                line += f"{r['compiled']['median_ms']:>14.1f} ({r['compiled']['min_ms']:.1f})"
            print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": args.shape, "repeats": args.repeats, "results": table}, f, indent=1)
    if failed:
        sys.exit(f"failed backends: {', '.join(failed)}")


if __name__ == "__main__":
    main()
