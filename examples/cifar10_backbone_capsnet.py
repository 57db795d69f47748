"""
Title: Capsules on a CNN backbone: CIFAR-10
Description: `CapsuleImageClassifier` puts primary and routed class capsules on a Keras backbone (ResNet50 by default), trained on RGB CIFAR-10.
Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules", NeurIPS 2017.

`keras_capsules.models.CapsuleImageClassifier` takes any Keras model that maps
images to a feature map; here a `keras.applications` network without its
classifier (`include_top=False`, random initial weights) or, with
`--backbone small`, a four-layer conv net. On the backbone's map: 32
primary capsule types of dimension 8 (a 1x1 conv), 10 class capsules of
dimension 16 routed by dynamic routing (or `--router`), margin loss, no
decoder (add one with `--reconstruction`). Data: CIFAR-10 from TFDS with
random flips and crops, resized to `--image-size` (default 64, where
ResNet50 gives a 2x2 map); the last 10 % of the training split
(`--validation-fraction`) validates each epoch, unflipped and uncropped. Optimiser: Adam (1e-3) decayed to 1e-4 over the
run.

    KERAS_BACKEND=jax python examples/cifar10_backbone_capsnet.py --backbone resnet50 --epochs 10

Writes training_log.csv, metrics.json, model.keras (backbone included) and
figures (training curves, routing coefficients; reconstructions with
`--reconstruction`) to --output-dir (default runs/cifar10_backbone_capsnet/<backend>).
"""

import common
import data
import figures
import keras  # (before tensorflow, see common.py)

from keras_capsules.models import CapsuleImageClassifier


def small_backbone(input_shape):
    """Four 3x3 conv + BatchNorm + ReLU layers, two of them strided (/4)."""
    layers = [keras.Input(input_shape)]
    for filters, strides in ((32, 1), (64, 2), (64, 1), (128, 2)):
        layers += [
            keras.layers.Conv2D(filters, 3, strides=strides, padding="same"),
            keras.layers.BatchNormalization(),
            keras.layers.ReLU(),
        ]
    return keras.Sequential(layers, name="small_backbone")


BACKBONES = {
    "small": small_backbone,
    "resnet50": lambda shape: keras.applications.ResNet50(
        include_top=False, weights=None, input_shape=shape
    ),
    "mobilenet_v3_small": lambda shape: keras.applications.MobileNetV3Small(
        include_top=False, weights=None, input_shape=shape, include_preprocessing=False
    ),
    "efficientnet_b0": lambda shape: keras.applications.EfficientNetB0(
        include_top=False, weights=None, input_shape=shape
    ),
}


def add_arguments(parser):
    parser.add_argument("--backbone", choices=sorted(BACKBONES), default="resnet50")
    parser.add_argument(
        "--image-size", type=int, default=64, help="images are resized to this square size"
    )
    parser.add_argument(
        "--reconstruction", action="store_true", help="add the reconstruction decoder and its loss"
    )


def build_model(args):
    shape = (args.image_size, args.image_size, 3)
    return CapsuleImageClassifier(
        BACKBONES[args.backbone](shape), 10, router=args.router, reconstruction=args.reconstruction
    )


def load_data(args, batch_size, drop_remainder=False):
    train_split, validation_split = data.train_validation_splits(args.validation_fraction)

    def load(split, training):
        return data.cifar10(
            split,
            batch_size,
            args.image_size,
            args.data_dir,
            drop_remainder=drop_remainder,
            training=training,
            order=data.epoch_order(args) if training else None,
        )

    validation = None if validation_split is None else load(validation_split, False)
    return load(train_split, True), validation, load("test", False)


def make_optimizer(args, steps_per_epoch):
    total_steps = max(steps_per_epoch * args.epochs, 1)
    schedule = keras.optimizers.schedules.ExponentialDecay(1e-3, total_steps, 0.1)
    return keras.optimizers.Adam(schedule)


def main(argv=None):
    return common.run(
        "cifar10_backbone_capsnet",
        __doc__.split("\n")[2],
        build_model,
        load_data,
        make_optimizer,
        figures.capsule_figures(child_types=32, class_names=data.CIFAR10_CLASSES),
        epochs=10,
        batch_size=64,
        argv=argv,
        add_arguments=add_arguments,
    )


if __name__ == "__main__":
    main()
