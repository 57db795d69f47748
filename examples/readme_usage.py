"""Trains the model of the README's "Usage" section, once per router.

The model is the README's code as printed (`Conv2D -> PrimaryCapsule ->
Capsule(router=NAME) -> Length`, `compile(optimizer="adam",
loss=MarginLoss())`, every layer with its defaults), trained for one epoch
on the first `--train-images` MNIST training images and evaluated on the
first `--test-images` test images. Prints a table and writes
`readme_usage.json`:

    python examples/readme_usage.py                      # every router
    python examples/readme_usage.py --routers dynamic,em --data-dir DIR
    python examples/readme_usage.py --threads 1   # torch on a busy CPU
"""

import argparse
import os
import sys
import time

import keras

import keras_capsules as kc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import atomic  # noqa: E402
import data  # noqa: E402
from common import (  # noqa: E402
    add_threads_argument,
    check_threads,
    set_threads,
    use_xla_cpu_convolutions,
)


def readme_model(router):
    """The README's "Usage" model with `router=router`."""
    images = keras.Input((28, 28, 1))
    x = keras.layers.Conv2D(256, 9, activation="relu")(images)
    x = kc.PrimaryCapsule(32, 8, kernel_size=9, strides=2)(x)  # 1152 capsules of 8D
    digits = kc.Capsule(10, 16, router=router)(x)  # routing by agreement
    lengths = kc.Length()(digits)  # class scores
    model = keras.Model(images, lengths)
    model.compile(optimizer="adam", loss=kc.MarginLoss(), metrics=["accuracy"])
    return model


class _Losses(keras.callbacks.Callback):
    """The first step's loss and the last epoch's mean."""

    def on_train_batch_end(self, batch, logs=None):
        if batch == 0:
            self.first = float(logs["loss"])
        self.last = float(logs["loss"])


def train_router(router, args):
    if args.seed is not None:
        keras.utils.set_random_seed(args.seed)
    train = data.mnist(
        f"train[:{args.train_images}]", args.batch_size, data_dir=args.data_dir, shuffle=True
    )
    test = data.mnist(f"test[:{args.test_images}]", args.batch_size, data_dir=args.data_dir)
    model = readme_model(router)
    losses = _Losses()
    start = time.perf_counter()
    model.fit(train, epochs=1, callbacks=[losses], verbose=0, shuffle=False)
    seconds = time.perf_counter() - start
    _, accuracy = model.evaluate(test, verbose=0)
    return {
        "router": router,
        "test_accuracy": float(accuracy),
        "first_loss": losses.first,
        "epoch_loss": losses.last,
        "train_seconds": seconds,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routers", default=",".join(kc.routing.names()))
    parser.add_argument("--train-images", type=int, default=4096)
    parser.add_argument("--test-images", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--data-dir",
        default=None,
        help="TFDS data dir (default: $TFDS_DATA_DIR or ~/tensorflow_datasets)",
    )
    parser.add_argument(
        "--output-dir", default=os.path.join("runs", "readme_usage", keras.backend.backend())
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="8 fake training and 8 fake test images (data.mock_data; no download)",
    )
    add_threads_argument(parser)
    args = parser.parse_args(argv)
    check_threads(parser, args)
    if argv is None:
        use_xla_cpu_convolutions()
    set_threads(args.threads)
    routers = args.routers.split(",")
    unknown = sorted(set(routers) - set(kc.routing.names()))
    if unknown:
        parser.error(f"unknown routers {unknown}; choose from {list(kc.routing.names())}")
    if args.smoke:
        args.train_images = args.test_images = args.batch_size = 8
        with data.mock_data(16):
            results = [train_router(r, args) for r in routers]
    else:
        results = [train_router(r, args) for r in routers]
    backend = keras.backend.backend()
    print(f"| router | {backend}: test accuracy | first-step loss | epoch loss | seconds |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for r in results:
        print(
            f"| `{r['router']}` | {100 * r['test_accuracy']:.1f} % | {r['first_loss']:.3f} "
            f"| {r['epoch_loss']:.3f} | {r['train_seconds']:.0f} |"
        )
    os.makedirs(args.output_dir, exist_ok=True)
    atomic.write_json(
        os.path.join(args.output_dir, "readme_usage.json"),
        {
            "backend": backend,
            "keras": keras.__version__,
            "results": results,
            **{k: getattr(args, k) for k in ("train_images", "test_images", "batch_size", "seed")},
        },
    )
    return results


if __name__ == "__main__":
    main()
