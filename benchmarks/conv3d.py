"""3-D convolution, native vs slices + matmul, forward + backward (input and
kernel gradients), per backend.

usage: python benchmarks/conv3d.py [--backends tensorflow,torch,jax]
           [--batch 4] [--shapes primary,stride1] [--repeats 5]

Shapes: `primary`, the primary capsules of a 32^3 volume (5x5x5, stride 2,
1 -> 64 channels, as `PrimaryCapsule3D(8, 8, 5, strides=2)`); `stride1`, a
stride-1 3x3x3 convolution 14^3 x 16 -> 32 (a stem layer).
Implementations (`keras_capsules.conv.conv3d`): `conv` (native `ops.conv`)
and `matmul` (`kd * kh * kw` strided slices + one matmul). Each backend
runs in a worker process (benchmarks/harness.py); TensorFlow with and
without XLA, JAX jitted, torch eager. ms, median (min) of `--repeats` runs
after warm-up, the implementations interleaved. This is what
`keras_capsules.conv.resolve_implementation_3d` is based on.
"""

import json

import harness

IMPLEMENTATIONS = ("conv", "matmul")
# Input size, (kernel, stride, input channels, output channels).
SHAPES = {"primary": (32, (5, 2, 1, 64)), "stride1": (14, (3, 1, 16, 32))}


def worker(config):
    harness.worker_setup(config)
    import keras
    from _backend import grad_step, random_tensor

    from keras_capsules.conv import conv3d

    backend = config["backend"]
    size, (k, s, cin, cout) = SHAPES[config["shape"]]
    x = random_tensor((config["batch"], size, size, size, cin))
    kernel = random_tensor((k, k, k, cin, cout), seed=1) * 0.05
    modes = [True, False] if backend == "tensorflow" else [backend == "jax"]
    steps = {}
    for jit in modes:
        for impl in IMPLEMENTATIONS:

            def loss_fn(inp, kernel, impl=impl):
                y = conv3d(inp, kernel, (s, s, s), "valid", impl)
                return keras.ops.sum(y * y)

            steps[f"{impl}{'+xla' if jit else ''}"] = grad_step(loss_fn, jit=jit)
    harness.reply("RESULT", **harness.time_interleaved(steps, x, kernel, repeats=config["repeats"]))


def main():
    parser = harness.argument_parser(__doc__)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shapes", default="primary,stride1")
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    for shape in args.shapes.split(","):
        size, conv = SHAPES[shape]
        title = (
            f"{shape}: batch {args.batch}, {size}^3 x {conv[2]}, conv (kernel, stride, in, "
            f"out) {conv}; fwd+bwd ms median (min) of {args.repeats}"
        )
        config = dict(batch=args.batch, repeats=args.repeats, shape=shape)
        harness.print_timings(__file__, config, args.backends, title=title)


if __name__ == "__main__":
    main()
