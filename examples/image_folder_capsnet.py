"""
Title: Capsules on your own images
Description: Efficient-CapsNet or CapsNet trained on a folder of class sub-folders of images.
Reference: Mazzia, Salvetti & Chiaberge, "Efficient-CapsNet: capsule network with self-attention routing", Scientific Reports 11, 2021.

DIR holds one sub-folder per class (`DIR/cat/*.png`, `DIR/dog/*.jpg`, ...;
any number of classes, any image size, colour or grey), read with
`keras.utils.image_dataset_from_directory` and resized to `--image-size`.
Pixels are scaled to [0, 1]. Unless `--test-dir` gives a separate folder,
`--test-fraction` (20 %) of the images is held out as the test set, the
same images whatever `--seed` (the split has its own fixed seed). Of the
other images (all of DIR with `--test-dir`), `--validation-fraction`
(10 %) validates each epoch, fixed the same way. Nothing is selected on
the test set: it is only evaluated.

    KERAS_BACKEND=torch python examples/image_folder_capsnet.py DIR --image-size 64 64 --epochs 20

`--model efficient` (default) or `capsnet`, with their reconstruction
decoders; `--color-mode grayscale` reads one channel. Writes
training_log.csv, metrics.json (with the class names and the number of
training, validation and test images), model.keras and the
capsule figures (training curves, reconstructions, perturbations, routing)
to --output-dir (default runs/image_folder_capsnet/<backend>).
"""

import common
import data
import figures
import keras  # (before tensorflow, see common.py)

from keras_capsules.models import CapsNet, EfficientCapsNet

SPLIT_SEED = 1337  # the train/test split, independent of --seed


def add_arguments(parser):
    parser.add_argument("directory", help="folder of class sub-folders of images")
    parser.add_argument(
        "--test-dir", default=None, help="separate test folder with the same class sub-folders"
    )
    parser.add_argument(
        "--test-fraction",
        type=float,
        default=0.2,
        help="share of DIR held out as the test set without --test-dir",
    )
    parser.add_argument(
        "--image-size", type=int, nargs=2, default=(64, 64), metavar=("HEIGHT", "WIDTH")
    )
    parser.add_argument("--color-mode", choices=("rgb", "grayscale"), default="rgb")
    parser.add_argument("--model", choices=("efficient", "capsnet"), default="efficient")


def _read(directory, args, **kwargs):
    """Unbatched `(image, label)` examples of a folder, listed in the order of `SPLIT_SEED`.

    With `validation_split=v, subset="both"`: the first `len - int(v * len)`
    files of that order (shuffled each epoch) and the others (in order).
    """
    return keras.utils.image_dataset_from_directory(
        directory,
        labels="inferred",
        label_mode="int",
        color_mode=args.color_mode,
        batch_size=None,
        image_size=tuple(args.image_size),
        seed=SPLIT_SEED,
        **kwargs,
    )


def split_images(args):
    """(train, validation or None, test) unbatched examples.

    The test images: `--test-dir`, or the last `--test-fraction` of DIR in
    the fixed `SPLIT_SEED` order. The validation images: the last
    `--validation-fraction` of the rest of DIR in that order, just before
    the test images; the training images are the others.
    """
    if args.test_dir:
        train, test = _read(args.directory, args), _read(args.test_dir, args, shuffle=False)
        if test.class_names != train.class_names:
            raise SystemExit(
                f"--test-dir classes {test.class_names} differ from "
                f"{args.directory}'s {train.class_names}"
            )
        held_out_test = []
    else:
        train, test = _read(
            args.directory, args, validation_split=args.test_fraction, subset="both"
        )
        held_out_test = test.file_paths
    args.class_names = train.class_names
    images = len(train.file_paths)  # not in the test set
    validation_images = round(args.validation_fraction * images)
    if args.validation_fraction and not 0 < validation_images < images:
        raise SystemExit(
            f"--validation-fraction {args.validation_fraction} of the {images} "
            f"training images of {args.directory} leaves no validation or "
            "training image: change it, or pass 0 for no validation."
        )
    validation = None
    if validation_images:
        # The same order split once more, further from its end: the images
        # after the training ones are the validation images, then the test
        # images (when they come from DIR).
        total = images + len(held_out_test)
        held_out = validation_images + len(held_out_test)
        train, rest = _read(
            args.directory,
            args,
            validation_split=(held_out + 0.5) / total,
            subset="both",
            verbose=False,
        )
        if rest.file_paths[validation_images:] != held_out_test:
            raise RuntimeError(f"the validation split moved the test images of {args.directory}")
        validation = rest.take(validation_images)
        validation.file_paths = rest.file_paths[:validation_images]
        validation.class_names = args.class_names
    print(
        f"{len(train.file_paths)} training, {validation_images} validation and "
        f"{len(test.file_paths)} test images"
    )
    args.extra_metrics = {  # into metrics.json
        "class_names": list(args.class_names),
        "train_images": len(train.file_paths),
        "validation_images": validation_images,
        "test_images": len(test.file_paths),
    }
    return train, validation, test


def load_data(args, batch_size, drop_remainder=False):
    train, validation, test = split_images(args)

    def finish(ds, training):
        ds = ds.map(lambda x, y: (x / 255.0, y))
        if training:  # new order each epoch (the file listing was shuffled once)
            return data.training_batches(
                ds, batch_size, data.epoch_order(args), drop_remainder=drop_remainder
            )
        return ds.batch(batch_size, drop_remainder=drop_remainder).prefetch(-1)

    return (
        finish(train, True),
        None if validation is None else finish(validation, False),
        finish(test, False),
    )


def build_model(args):
    channels = 1 if args.color_mode == "grayscale" else 3
    model = EfficientCapsNet if args.model == "efficient" else CapsNet
    return model((*args.image_size, channels), len(args.class_names), router=args.router)


def make_optimizer(args, steps_per_epoch):
    rate = 5e-4 if args.model == "efficient" else 1e-3
    total_steps = max(steps_per_epoch * args.epochs, 1)
    schedule = keras.optimizers.schedules.ExponentialDecay(rate, total_steps, 0.1)
    return keras.optimizers.Adam(schedule)


def main(argv=None):
    return common.run(
        "image_folder_capsnet",
        __doc__.split("\n")[2],
        build_model,
        load_data,
        make_optimizer,
        figures.capsule_figures(),
        epochs=20,
        batch_size=32,
        argv=argv,
        add_arguments=add_arguments,
    )


if __name__ == "__main__":
    main()
