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
    python examples/vit_capsules.py --smoke   # fake data: a check, in seconds

TFDS downloads the dataset on the first run. Without internet access:
MNIST from Keras's mnist.npz (`python examples/prepare_mnist_offline.py
mnist.npz DIR`), another TFDS dataset from its original files
(`python examples/prepare_tfds_offline.py NAME DIR FILE...`), then
`TFDS_DATA_DIR=DIR`.

Writes metrics.json (held-out accuracy, parameters, training seconds per
model) to --output-dir (default runs/vit_capsules/<backend>).
"""

import comparison
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


def converter(args):
    """The function that turns uint8 images into the backbone's inputs."""
    if args.preset:
        import keras_hub

        convert = keras_hub.layers.ImageConverter.from_preset(args.preset)

        def preset_inputs(images):
            images = tf.cast(images, "float32")
            if images.shape[-1] == 1:
                images = tf.repeat(images, 3, axis=-1)
            return convert(images)

        return preset_inputs
    return lambda images: tf.cast(images, "float32") / 255.0


def vit_backbone(args, image_shape):
    import keras_hub

    if args.preset:
        return keras_hub.models.Backbone.from_preset(args.preset)
    return keras_hub.models.ViTBackbone(
        image_shape=image_shape,
        patch_size=args.patch_size,
        num_layers=args.layers,
        num_heads=max(1, args.dim // 32),
        hidden_dim=args.dim,
        mlp_dim=2 * args.dim,
    )


def build(name, backbone, num_classes):
    import keras_hub

    if name == "vit_pooled":
        return keras_hub.models.ViTImageClassifier(backbone, num_classes, preprocessor=None)
    return kc.models.CapsuleSequenceClassifier(backbone, num_classes, hidden_states="last")


def main(argv=None):
    parser = comparison.argument_parser(__doc__, epochs=1, batch_size=64)
    parser.add_argument("--dataset", default="mnist", help="TFDS image dataset")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--train", type=int, default=0, help="training images (0: all)")
    parser.add_argument("--test", type=int, default=0, help="held-out images (0: all)")
    comparison.add_pretrained_arguments(parser, "keras-hub ViT preset")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--patch-size", type=int, default=7)
    parser.add_argument("--data-dir", help="TFDS data dir (default: $TFDS_DATA_DIR)")
    comparison.add_smoke_argument(parser, train=16, test=8, layers=1, dim=16, batch_size=8)
    args = comparison.parse_args(parser, argv)
    learning_rate = comparison.learning_rate(args)

    with comparison.smoke_data(args):
        images, labels, num_classes = images_and_labels(
            args.dataset, "train", args.train, args.data_dir
        )
        test_images, test_labels, _ = images_and_labels(
            args.dataset, "test", args.test, args.data_dir
        )
    if not args.preset and images.shape[1] % args.patch_size:
        parser.error(
            f"--patch-size must divide the image size {images.shape[1]}. "
            f"Received: --patch-size {args.patch_size}"
        )
    convert = converter(args)

    def model(name):
        def build_and_compile():
            backbone = vit_backbone(args, images.shape[1:])
            backbone.trainable = not args.freeze_backbone
            model = build(name, backbone, num_classes)
            model.compile(
                optimizer=keras.optimizers.Adam(learning_rate),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
            )
            return model

        return build_and_compile

    def converted(x, y):
        return convert(x), y

    def train():
        batches = (
            tf.data.Dataset.from_tensor_slices((images, labels))
            .shuffle(len(labels), seed=args.seed)
            .batch(args.batch_size)
            .map(converted)
        )
        return comparison.Data(batches, count=len(labels))

    def test():
        batches = (
            tf.data.Dataset.from_tensor_slices((test_images, test_labels)).batch(256).map(converted)
        )
        return comparison.Data(batches, count=len(test_labels))

    return comparison.compare(
        {name: model(name) for name in args.models},
        train=train,
        test=test,
        budget=comparison.Budget.from_args(args),
        output_dir=comparison.output_dir(args, "vit_capsules"),
        seed=args.seed,  # the same backbone weights
        results={
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
        },
    )


if __name__ == "__main__":
    main()
