"""A small training run of `examples/common.py`, for tests/examples/test_resume.py.

usage: python -m tests.examples.resume_worker OUTPUT_DIR [common.run flags]

A tiny CapsuleImageClassifier on 32 generated images, batched by
`data.training_batches` with a random shift per example (stateless, from
the epoch's key), so the data order and augmentation matter: what the
examples do, without a TFDS dataset or the examples' figures.
"""

import os
import sys

if os.environ.get("KERAS_BACKEND") == "torch":
    import torch  # noqa: F401  (before tensorflow: see tests/conftest.py)

import keras
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import common  # noqa: E402
import data  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_capsules as kc  # noqa: E402


def build_model(args):
    backbone = keras.Sequential([keras.Input((6, 6, 3)), keras.layers.Conv2D(4, 3)])
    return kc.CapsuleImageClassifier(backbone, 3, primary_capsules=2, primary_dim=4, capsule_dim=4)


def shift(example, key):
    image, label = example
    return data.random_shift(image, key, max_shift=1), label


def load_data(args, batch_size, drop_remainder=False):
    rng = np.random.default_rng(0)
    images = rng.uniform(size=(32, 6, 6, 3)).astype("float32")
    labels = rng.integers(0, 3, 32)
    examples = tf.data.Dataset.from_tensor_slices((images, labels))
    train = data.training_batches(
        examples.take(24),
        batch_size,
        data.epoch_order(args),
        augment=shift,
        drop_remainder=drop_remainder,
    )
    validation = examples.skip(24).batch(batch_size, drop_remainder=drop_remainder)
    return train, validation, examples.batch(batch_size, drop_remainder=drop_remainder)


def main(output_dir, *flags):
    return common.run(
        "resume_worker",
        "a tiny resumable run",
        build_model,
        load_data,
        lambda args, steps: keras.optimizers.Adam(
            keras.optimizers.schedules.ExponentialDecay(0.01, steps, 0.5)
        ),
        routers=False,
        argv=["--output-dir", output_dir, "--batch-size", "4", *flags],
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
