"""
Title: Image classification on a ViT: a capsule head against the class-token head
Description: MNIST (or any TFDS image dataset); one ViT backbone with keras-hub's usual head and with capsules.
Reference: Heinsen, "An Algorithm for Routing Vectors in Sequences", arXiv:2211.11754, 2022.

Two models train in the same run, at the same budget (epochs, batch size,
Adam at one learning rate), from the same initial backbone weights:

- `vit_pooled`: keras-hub's usual head
  (`keras_hub.models.ViTImageClassifier`: the class token -> Dense);
- `vit_capsules`: `keras_capsules.models.CapsuleSequenceClassifier` on the
  same backbone: every patch token and the class token of the last layer
  routed to part capsules, then to one capsule per class.

Without `--preset` the ViT is small (`--layers`, hidden size `--dim`,
patches of `--patch-size`), built from its config for the dataset's image
shape and trained from scratch, pixels scaled to [0, 1]. With `--preset` (a
keras-hub ViT preset such as `vit_base_patch16_224_imagenet`, downloaded
by keras-hub) both start from the pretrained backbone, images are resized
and converted by the preset's image converter (grey images repeated to
three channels), and `--freeze-backbone` trains the heads only.

    KERAS_BACKEND=jax python examples/vit_capsules.py --epochs 1

Writes metrics.json (held-out accuracy, parameters, training seconds per
model) to --output-dir (default runs/vit_capsules/<backend>).
"""

import argparse
import os
import time

import atomic
import data
import keras
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

import keras_capsules as kc

MODELS = ("vit_pooled", "vit_capsules")


def images_and_labels(name, split, count, data_dir=None):
    """The first `count` images (uint8) and labels of a TFDS split, and the
    number of classes."""
    ds = data.load_split(name, split, data_dir=data_dir)
    if count:
        ds = ds.take(count)
    images, labels = [], []
    for example in tfds.as_numpy(ds):
        images.append(example["image"])
        labels.append(int(example["label"]))
    num_classes = tfds.builder(name, data_dir=data_dir).info.features["label"].num_classes
    return np.stack(images), np.array(labels, "int32"), num_classes


def backbone_and_converter(args, image_shape):
    """The ViT backbone, and the function that turns uint8 images into its inputs."""
    import keras_hub

    if args.preset:
        converter = keras_hub.layers.ImageConverter.from_preset(args.preset)

        def convert(images):
            images = tf.cast(images, "float32")
            if images.shape[-1] == 1:
                images = tf.repeat(images, 3, axis=-1)
            return converter(images)

        return keras_hub.models.Backbone.from_preset(args.preset), convert
    backbone = keras_hub.models.ViTBackbone(
        image_shape=image_shape,
        patch_size=args.patch_size,
        num_layers=args.layers,
        num_heads=max(1, args.dim // 32),
        hidden_dim=args.dim,
        mlp_dim=2 * args.dim,
    )
    return backbone, lambda images: tf.cast(images, "float32") / 255.0


def build(name, backbone, num_classes):
    import keras_hub

    if name == "vit_pooled":
        return keras_hub.models.ViTImageClassifier(backbone, num_classes, preprocessor=None)
    return kc.models.CapsuleSequenceClassifier(backbone, num_classes, hidden_states="last")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--dataset", default="mnist", help="TFDS image dataset")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--train", type=int, default=0, help="training images (0: all)")
    parser.add_argument("--test", type=int, default=0, help="held-out images (0: all)")
    parser.add_argument("--preset", help="keras-hub ViT preset")
    parser.add_argument("--freeze-backbone", action="store_true")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--patch-size", type=int, default=7)
    parser.add_argument(
        "--learning-rate",
        type=float,
        help="Adam's, for every model (default: 5e-5 fine-tuning a preset, else 1e-3)",
    )
    parser.add_argument("--data-dir", help="TFDS data dir (default: $TFDS_DATA_DIR)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir")
    args = parser.parse_args(argv)
    learning_rate = args.learning_rate or (
        5e-5 if args.preset and not args.freeze_backbone else 1e-3
    )
    output_dir = args.output_dir or os.path.join("runs", "vit_capsules", keras.backend.backend())

    images, labels, num_classes = images_and_labels(
        args.dataset, "train", args.train, args.data_dir
    )
    test_images, test_labels, _ = images_and_labels(args.dataset, "test", args.test, args.data_dir)
    if not args.preset and images.shape[1] % args.patch_size:
        parser.error(
            f"--patch-size must divide the image size {images.shape[1]}. "
            f"Received: --patch-size {args.patch_size}"
        )
    results = {
        "backend": keras.backend.backend(),
        "dataset": args.dataset,
        "train": len(images),
        "test": len(test_images),
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "learning_rate": learning_rate,
        "backbone": args.preset
        or f"ViTBackbone({args.layers} layers, {args.dim}, patches {args.patch_size})",
        "frozen_backbone": args.freeze_backbone,
        "seed": args.seed,
    }
    for name in args.models:
        keras.utils.set_random_seed(args.seed)  # the same backbone weights
        backbone, convert = backbone_and_converter(args, images.shape[1:])
        backbone.trainable = not args.freeze_backbone
        model = build(name, backbone, num_classes)
        model.compile(
            optimizer=keras.optimizers.Adam(learning_rate),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        )
        train = (
            tf.data.Dataset.from_tensor_slices((images, labels))
            .shuffle(len(labels), seed=args.seed)
            .batch(args.batch_size)
            .map(lambda x, y, convert=convert: (convert(x), y))
        )
        test = (
            tf.data.Dataset.from_tensor_slices((test_images, test_labels))
            .batch(256)
            .map(lambda x, y, convert=convert: (convert(x), y))
        )
        start = time.perf_counter()
        model.fit(train, epochs=args.epochs, shuffle=False, verbose=0)
        seconds = time.perf_counter() - start
        _, accuracy = model.evaluate(test, verbose=0)
        results[name] = row = {
            "accuracy": float(accuracy),
            "parameters": model.count_params(),
            "train_seconds": round(seconds, 1),
        }
        print(
            f"{name:13s} {row['parameters']:9d} parameters  held-out accuracy "
            f"{100 * row['accuracy']:.2f} %  ({row['train_seconds']} s)",
            flush=True,
        )
    os.makedirs(output_dir, exist_ok=True)
    atomic.write_json(os.path.join(output_dir, "metrics.json"), results)
    return results


if __name__ == "__main__":
    main()
