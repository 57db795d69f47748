"""What the segmentation examples share: SegCaps or a U-Net, one loss,
one optimiser and the same metrics for both, and the figures.

`segcaps_digits.py` and `segcaps_pets.py` differ only in their data; each
calls `main` with its data loader.
"""

import common
import data
import keras  # noqa: F401  (before tensorflow, see common.py)
import unet

from keras_capsules.losses import WeightedBinaryCrossentropy
from keras_capsules.metrics import DiceCoefficient
from keras_capsules.models import SegCaps

MODELS = ("segcaps", "unet")
LEARNING_RATE = 1e-3
# The U-Net's channels per level: 1.9 M parameters, near SegCaps's 1.4 M.
UNET_FILTERS = (32, 64, 128, 256)
FIGURE_IMAGES = 6
# Training batches whose masks give the loss's foreground weight.
FOREGROUND_BATCHES = 20


def add_arguments(parser, image_size):
    parser.add_argument(
        "--model",
        choices=MODELS,
        default="segcaps",
        help="SegCaps R3, or the U-Net baseline trained the same way",
    )
    parser.add_argument(
        "--image-size", type=int, default=image_size, help="square images, divisible by 8"
    )
    parser.add_argument("--learning-rate", type=float, default=LEARNING_RATE)


def build_model(args, channels):
    shape = (args.image_size, args.image_size, channels)
    if args.model == "unet":
        return unet.unet(shape, filters=UNET_FILTERS)
    return SegCaps(shape, positive_weight=args.positive_weight)


def make_optimizer(args, steps_per_epoch):
    # The SegCaps authors' beta_1, for both models.
    return keras.optimizers.Adam(args.learning_rate, beta_1=0.99)


def segmentation_metrics():
    """Dice and the foreground's IoU, the metrics SegCaps compiles by default."""
    return [
        DiceCoefficient(name="dice"),
        keras.metrics.BinaryIoU(target_class_ids=(1,), threshold=0.5, name="iou"),
    ]


def figures(model, test, output_dir, args):
    import os

    import numpy as np
    from figures import plot_segmentation

    images, masks = next(iter(test.unbatch().batch(FIGURE_IMAGES)))
    plot_segmentation(
        model, np.asarray(images), np.asarray(masks), os.path.join(output_dir, "segmentation.png")
    )


def load_splits(args, make):
    """`(train, validation, test)` from `make(split, training, order)`, the
    validation split held out by `--validation-fraction` (`None` at 0),
    the training epochs those of `args.epoch_order`; sets
    `args.positive_weight` from the training masks (background over
    foreground pixels of the first batches of epoch 0, also in a resumed
    run) and records it in `metrics.json`."""
    train_split, validation_split = data.train_validation_splits(args.validation_fraction)
    order = data.epoch_order(args)
    train = make(train_split, True, order)
    first_epoch = make(train_split, True, order and order._replace(first_epoch=0, epochs=1))
    args.positive_weight = data.foreground_weight(first_epoch, max_batches=FOREGROUND_BATCHES)
    args.extra_metrics = {"positive_weight": args.positive_weight}
    validation = None if validation_split is None else make(validation_split, False)
    return train, validation, make("test", False)


def main(name, description, load_data, channels, image_size, epochs, batch_size, argv=None):
    """Trains SegCaps or the U-Net with `load_data(args, batch_size,
    drop_remainder)`, which also sets `args.positive_weight` (background
    over foreground pixels of the training data: the loss's weight of
    foreground pixels, as the SegCaps authors weigh them)."""
    return common.run(
        name,
        description,
        lambda args: build_model(args, channels),
        load_data,
        make_optimizer,
        figures=figures,
        epochs=epochs,
        batch_size=batch_size,
        routers=False,
        argv=argv,
        add_arguments=lambda parser: add_arguments(parser, image_size),
        metrics=segmentation_metrics,
        score="dice",
        make_loss=lambda args: WeightedBinaryCrossentropy(args.positive_weight),
    )
