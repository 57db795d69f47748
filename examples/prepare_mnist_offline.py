"""
Title: Prepare TFDS MNIST offline from a local mnist.npz
Description: Builds the TFDS `mnist` dataset from a NumPy archive, with no download.

For machines without internet access. `NPZ` holds `x_train (60000, 28,
28) uint8`, `y_train (60000,)`, `x_test (10000, 28, 28)`, `y_test
(10000,)`: the layout of Keras's own copy, which
`keras.datasets.mnist.load_data()` saves to `~/.keras/datasets/mnist.npz`
on a machine with internet access. The script writes the same prepared
dataset (`mnist/3.0.1`, splits `train` and `test`) that `tfds.load("mnist")`
builds after a download, so afterwards

    TFDS_DATA_DIR=DIR python examples/mnist_efficient_capsnet.py

reads it unchanged (or pass `--data-dir DIR`).

    python examples/prepare_mnist_offline.py ~/.keras/datasets/mnist.npz DIR
"""

import argparse
import os

import numpy as np

SPLITS = {"train": ("x_train", "y_train"), "test": ("x_test", "y_test")}


def read_npz(path):
    """`{split: (images (n, 28, 28, 1) uint8, labels (n,) int64)}`, checked."""
    arrays = np.load(path)
    splits = {}
    for split, (x_key, y_key) in SPLITS.items():
        images, labels = arrays[x_key], arrays[y_key]
        if images.shape[1:] != (28, 28) or labels.shape != images.shape[:1]:
            raise ValueError(
                f"{path}: expected {x_key} of shape (n, 28, 28) and {y_key} of "
                f"shape (n,). Received: {x_key}.shape={images.shape}, "
                f"{y_key}.shape={labels.shape}"
            )
        splits[split] = (images.astype(np.uint8)[..., None], labels.astype(np.int64))
    return splits


def prepare(npz_path, data_dir):
    """Writes TFDS `mnist` into `data_dir`; returns the builder's splits."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow_datasets as tfds
    from tensorflow_datasets.image_classification import mnist

    splits = read_npz(npz_path)

    class LocalMNIST(mnist.MNIST, skip_registration=True):
        """TFDS's MNIST builder, reading the arrays instead of downloading."""

        name = "mnist"

        def _split_generators(self, dl_manager):
            return {split: self._examples(*arrays) for split, arrays in splits.items()}

        def _examples(self, images, labels):
            for i, (image, label) in enumerate(zip(images, labels)):
                yield i, {"image": image, "label": label}

    builder = LocalMNIST(data_dir=data_dir)
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(try_download_gcs=False)
    )
    return builder.info.splits


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[2])
    parser.add_argument("npz", help="mnist.npz with x_train, y_train, x_test, y_test")
    parser.add_argument("data_dir", help="TFDS data dir to write (TFDS_DATA_DIR)")
    args = parser.parse_args(argv)
    splits = prepare(args.npz, os.path.abspath(args.data_dir))
    print(
        f"mnist prepared in {os.path.abspath(args.data_dir)}: "
        + ", ".join(f"{name} {split.num_examples}" for name, split in splits.items())
    )


if __name__ == "__main__":
    main()
