"""Routing forward+backward time per router and backend, ours vs pure.

usage: python benchmarks/routing.py [--backends tensorflow,torch,jax]
                                    [--routers dynamic,...] [--repeats 5]
                                    [--shape 128,1152,10,16]
                                    [--torch-compile] [--tf-graph]
                                    [--json out.json]

Each backend runs in a worker process of its own (benchmarks/harness.py:
a backend cannot change inside a process). For every router, the library's
router ("ours") is compared with a hand-written plain-framework implementation
of the same math ("pure",
benchmarks/pure_routing_{tf,torch,jax}.py) on the same votes and the same
(randomised) router weights: forward values must agree within 1e-4
(relative) and gradients within 1e-3, or the run fails. Then both are timed
interleaved in the same process: one step is the routing output and the
gradient of a scalar of it w.r.t. the votes, jitted with XLA on TF
(`tf.function(jit_compile=True)`) and JAX (`jax.jit`), eager on torch;
`--tf-graph`: a `tf.function` without XLA on TF, Keras's default on a CPU.
The routers get the matching XLA hint (`keras_capsules.models.set_xla`).
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
import sys

import harness
import numpy as np

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
        # The backend's own differentiation of the routers that default to a
        # hand-written backward pass (backward="manual"), to compare the two.
        "dynamic-autodiff": lambda: routing.DynamicRouting(iterations=3, backward="autodiff"),
        "self-attention-autodiff": lambda: routing.SelfAttentionRouting(backward="autodiff"),
        "inverted-dot-product-autodiff": lambda: routing.InvertedDotProductRouting(
            iterations=2, backward="autodiff"
        ),
        "em-autodiff": lambda: routing.EMRouting(iterations=3, backward="autodiff"),
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


def compiled_step(loss_fn, tf_graph):
    """`grad_step(loss_fn)`; with `tf_graph`, on TensorFlow a `tf.function`
    without XLA instead."""
    import keras
    from _backend import grad_step

    if tf_graph and keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.function(grad_step(loss_fn, jit=False))
    return grad_step(loss_fn)


def worker(args):
    harness.worker_setup(args)
    args = argparse.Namespace(**args)
    import keras
    from _backend import grad_step

    import keras_capsules
    from keras_capsules.models import set_xla

    print(f"{args.backend}: library {os.path.dirname(keras_capsules.__file__)}", file=sys.stderr)
    pure = importlib.import_module(PURE_MODULES[args.backend])
    to_numpy = keras.ops.convert_to_numpy
    shape = tuple(int(s) for s in args.shape.split(","))
    votes = keras.ops.convert_to_tensor(
        (VOTE_SCALE * np.random.default_rng(0).normal(size=shape)).astype("float32")
    )
    results = {}
    factories = routers()
    for name in args.routers.split(",") if args.routers else factories:
        router = factories[name]()
        router.build(shape)
        # The steps below run under XLA on TF and JAX (eager torch): the
        # routers' hint for the form of their hand-written backward passes.
        set_xla(router, keras.backend.backend() != "torch" and not args.tf_graph)
        weights = randomise_weights(router)
        kind = type(router).__name__
        if kind not in pure.ROUTERS:
            raise SystemExit(f"{pure.__name__} has no pure version of {kind}")
        pure_route = pure.ROUTERS[kind](router.get_config(), weights)

        def ours_loss(v, router=router):
            poses, activations = router(v)
            return keras.ops.sum(poses * poses) + keras.ops.sum(activations)

        steps = {
            "ours": compiled_step(ours_loss, args.tf_graph),
            "pure": compiled_step(lambda v, route=pure_route: pure.loss(route(v)), args.tf_graph),
        }
        if args.torch_compile and args.backend == "torch":
            import torch

            compiled = torch.compile(pure_route)
            steps["compiled"] = grad_step(lambda v, route=compiled: pure.loss(route(v)))

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
        results[name] = harness.time_interleaved(steps, votes, repeats=args.repeats)
        summary = ", ".join(
            f"{k} {t['median_ms']:.1f} ({t['min_ms']:.1f})" for k, t in results[name].items()
        )
        results[name]["max_relative_error"] = errors
        print(f"{args.backend} {name}: {summary}", file=sys.stderr, flush=True)
    harness.reply("RESULT", **results)


def main():
    parser = harness.argument_parser(__doc__)
    parser.add_argument("--routers", default="")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shape", default="128,1152,10,16")
    parser.add_argument("--torch-compile", action="store_true")
    parser.add_argument(
        "--tf-graph",
        action="store_true",
        help="TensorFlow: a tf.function without XLA (what Keras compiles on a CPU by default)",
    )
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    if args.repeats < 3:
        parser.error(f"--repeats must be at least 3. Received: --repeats={args.repeats}")
    if args.worker:
        return worker(json.loads(args.worker))

    # Busy-waiting OpenMP threads (torch's default) turn a shared, loaded
    # machine's noise into seconds per step; passive waiting keeps it sane.
    env = {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    table, failed = {}, []
    for backend in args.backends.split(","):
        config = dict(
            backend=backend,
            repeats=args.repeats,
            shape=args.shape,
            routers=args.routers,
            torch_compile=args.torch_compile,
            tf_graph=args.tf_graph,
        )
        # The worker's stderr passes through: its progress, or why it failed.
        results, error = harness.measure(os.path.abspath(__file__), config, env=env, stderr=None)
        if results is None:
            print(f"{backend} failed ({error})", file=sys.stderr)
            failed.append(backend)
            continue
        table[backend] = results

    header = ["router", "backend", "ours", "pure", "ratio", "min ratio", "cpu ratio"]
    if args.torch_compile:
        header.append("torch.compile(pure)")
    lines = []
    names = list(dict.fromkeys(n for rows in table.values() for n in rows))
    for name in names:
        for backend, rows in table.items():
            if name not in rows:
                continue
            r = rows[name]
            line = [
                name,
                backend,
                harness.timing_cell(r["ours"], ""),
                harness.timing_cell(r["pure"], ""),
            ]
            line.append(f"{r['ours']['median_ms'] / r['pure']['median_ms']:.2f}")
            line.append(f"{r['ours']['min_ms'] / r['pure']['min_ms']:.2f}")
            line.append(f"{r['ours']['median_cpu_ms'] / r['pure']['median_cpu_ms']:.2f}")
            if "compiled" in r:
                line.append(harness.timing_cell(r["compiled"], ""))
            lines.append(line)
    harness.print_table(
        header,
        lines,
        title=f"votes {args.shape}, forward+backward, ms median (min) of {args.repeats}, "
        "interleaved; ratio = ours / pure (medians); "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'PASSIVE')}; {harness.machine()}",
        align="ll" + "r" * (len(header) - 2),
    )
    if args.json:
        harness.write_results(
            args.json, {"shape": args.shape, "repeats": args.repeats, "results": table}
        )
    if failed:
        sys.exit(f"failed backends: {', '.join(failed)}")


if __name__ == "__main__":
    main()
