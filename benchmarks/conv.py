"""Native conv vs slices + matmul vs hybrid, forward + backward (input and
kernel gradients), per backend.

usage: python benchmarks/conv.py [--backends tensorflow,torch,jax]
           [--batch 16] [--shapes primary,efficient] [--repeats 5]

Shapes: `primary`, the primary-capsule conv of Sabour's CapsNet (9x9,
stride 2, 20x20x256 -> 6x6x256); `efficient`, Efficient-CapsNet's stem
(5x5 1->32, 3x3 32->64, 3x3 64->64, 3x3 stride 2 64->128 on 28x28, valid),
summed, or each alone (`efficient-conv1` .. `efficient-conv4`). Set
`XLA_FLAGS` to compare XLA settings (e.g. jaxlib's YNNPACK convolutions:
`XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=-individual_convolution`).
Implementations (`keras_capsules.conv.conv2d`): `conv` (native),
`matmul` (strided slices + one matmul), `hybrid` (native forward and input
gradient, kernel gradient as a matmul on the patches), `space_to_depth`
(one stride-1 conv of stride-sized blocks). Each backend runs in
a worker process (benchmarks/harness.py); TensorFlow both with and without
XLA, JAX jitted, torch eager. ms, median (min) of `--repeats` runs after
warm-up, the implementations interleaved. This is what
`keras_capsules.conv.resolve_implementation` is based on.
"""

import json

import harness

IMPLEMENTATIONS = ("conv", "matmul", "hybrid", "space_to_depth")
# (kernel, strides, input channels, output channels) of each conv, and its input size.
SHAPES = {
    "primary": (20, [(9, 2, 256, 256)]),
    "efficient": (28, [(5, 1, 1, 32), (3, 1, 32, 64), (3, 1, 64, 64), (3, 2, 64, 128)]),
}
# Each stem conv alone: efficient-conv1 .. efficient-conv4.
for _i, (_size, _conv) in enumerate(zip((28, 24, 22, 20), SHAPES["efficient"][1])):
    SHAPES[f"efficient-conv{_i + 1}"] = (_size, [_conv])


def worker(config):
    harness.worker_setup(config)
    import keras
    from _backend import grad_step, random_tensor

    from keras_capsules.conv import conv2d

    backend = config["backend"]
    size, convs = SHAPES[config["shape"]]
    x = random_tensor((config["batch"], size, size, convs[0][2]))
    kernels = [
        random_tensor((k, k, cin, cout), seed=i + 1) * 0.05
        for i, (k, _, cin, cout) in enumerate(convs)
    ]
    modes = [True, False] if backend == "tensorflow" else [backend == "jax"]
    steps = {}
    for jit in modes:
        for impl in IMPLEMENTATIONS:

            def loss_fn(inp, *kernels, impl=impl):
                # The convs chained as in the network; the input and every
                # kernel get a gradient.
                y = inp
                for kernel, (_, s, _, _) in zip(kernels, convs):
                    y = conv2d(y, kernel, (s, s), "valid", impl)
                return keras.ops.sum(y * y)

            steps[f"{impl}{'+xla' if jit else ''}"] = grad_step(loss_fn, jit=jit)
    harness.reply(
        "RESULT", **harness.time_interleaved(steps, x, *kernels, repeats=config["repeats"])
    )


def main():
    parser = harness.argument_parser(__doc__)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shapes", default="primary,efficient")
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    for shape in args.shapes.split(","):
        size, convs = SHAPES[shape]
        title = (
            f"{shape}: batch {args.batch}, {size}x{size}x{convs[0][2]}, convs "
            f"(kernel, stride, in, out) {convs}; fwd+bwd ms median (min) of {args.repeats}"
        )
        config = dict(batch=args.batch, repeats=args.repeats, shape=shape)
        harness.print_timings(__file__, config, args.backends, title=title)


if __name__ == "__main__":
    main()
