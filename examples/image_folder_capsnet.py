"""
Title: Capsules on your own images
Description: Efficient-CapsNet or CapsNet trained on a folder of class sub-folders of images.
Reference: Mazzia, Salvetti & Chiaberge, "Efficient-CapsNet: capsule network with self-attention routing", Scientific Reports 11, 2021.

DIR holds one sub-folder per class (`DIR/cat/*.png`, `DIR/dog/*.jpg`, ...;
any number of classes, any image size, colour or grey), read with
`keras.utils.image_dataset_from_directory` and resized to `--image-size`.
Pixels are scaled to [0, 1]. Unless `--test-dir` gives a separate folder,
`--test-fraction` (20 %) of the images is held out as the test set, the
same images whatever `--seed` (the split has its own fixed seed). Nothing
is selected on the test set: it is only evaluated.

    KERAS_BACKEND=torch python examples/image_folder_capsnet.py DIR --image-size 64 64 --epochs 20

`--model efficient` (default) or `capsnet`, with their reconstruction
decoders; `--color-mode grayscale` reads one channel. Writes
training_log.csv, metrics.json (with the class names), model.keras and the
capsule figures (training curves, reconstructions, perturbations, routing)
to --output-dir (default runs/image_folder_capsnet).
"""

import keras  # (before tensorflow, see common.py)

import common
import figures
from keras_capsules.models import CapsNet, EfficientCapsNet

SPLIT_SEED = 1337  # the train/test split, independent of --seed


def add_arguments(parser):
    parser.add_argument("directory", help="folder of class sub-folders of images")
    parser.add_argument("--test-dir", default=None,
                        help="separate test folder with the same class sub-folders")
    parser.add_argument("--test-fraction", type=float, default=0.2,
                        help="share of DIR held out as the test set without --test-dir")
    parser.add_argument("--image-size", type=int, nargs=2, default=(64, 64),
                        metavar=("HEIGHT", "WIDTH"))
    parser.add_argument("--color-mode", choices=("rgb", "grayscale"), default="rgb")
    parser.add_argument("--model", choices=("efficient", "capsnet"), default="efficient")


def _read(directory, args, batch_size, **kwargs):
    return keras.utils.image_dataset_from_directory(
        directory, labels="inferred", label_mode="int", color_mode=args.color_mode,
        batch_size=None, image_size=tuple(args.image_size), seed=SPLIT_SEED, **kwargs)


def load_data(args, batch_size, drop_remainder=False):
    if args.test_dir:
        train, test = _read(args.directory, args, batch_size), _read(args.test_dir, args,
                                                                     batch_size, shuffle=False)
    else:
        train, test = _read(args.directory, args, batch_size, validation_split=args.test_fraction,
                            subset="both")
    args.class_names = train.class_names
    args.extra_metrics = {"class_names": list(train.class_names)}  # into metrics.json
    if args.test_dir and test.class_names != train.class_names:
        raise SystemExit(f"--test-dir classes {test.class_names} differ from "
                         f"{args.directory}'s {train.class_names}")

    def finish(ds, training):
        ds = ds.map(lambda x, y: (x / 255.0, y))
        if training:  # new order each epoch (the file listing was shuffled once)
            ds = ds.shuffle(10_000, reshuffle_each_iteration=True)
        return ds.batch(batch_size, drop_remainder=drop_remainder).prefetch(-1)

    return finish(train, True), finish(test, False)


def build_model(args):
    channels = 1 if args.color_mode == "grayscale" else 3
    model = EfficientCapsNet if args.model == "efficient" else CapsNet
    return model((*args.image_size, channels), len(args.class_names),
                 router=args.router)


def make_optimizer(args, steps_per_epoch):
    rate = 5e-4 if args.model == "efficient" else 1e-3
    total_steps = max(steps_per_epoch * args.epochs, 1)
    schedule = keras.optimizers.schedules.ExponentialDecay(rate, total_steps, 0.1)
    return keras.optimizers.Adam(schedule)


def main(argv=None):
    return common.run(
        "image_folder_capsnet", __doc__.split("\n")[2], build_model, load_data, make_optimizer,
        figures.capsule_figures(), epochs=20, batch_size=32, argv=argv,
        add_arguments=add_arguments,
    )


if __name__ == "__main__":
    main()
