"""
Title: Capsules on MultiMNIST: overlapping digits
Description: CapsNet or Efficient-CapsNet recognising and reconstructing two overlapping MNIST digits.
Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules", NeurIPS 2017, section 6.

MultiMNIST (`data.multimnist`) is generated on the fly from MNIST: each
digit is overlaid on a random digit of another class, each shifted by up to
4 px each way on a 36x36 canvas (the paper's recipe). The model has one
class capsule per digit class; both digits must get the two longest
capsules (`keras_capsules.metrics.LabelSetAccuracy(2)`, reported as
"accuracy"; its error is the papers' MultiMNIST error). The ready models
do this with `labels_per_image=2`: the margin loss with both classes
present (Sabour et al. eq. 4 with two 1s in T), plus, for each of the two
digits, the mean squared error of the decoder's reconstruction of that
digit alone from the poses masked to its own capsule (weight 0.0005 x 36 x
36 each, the paper's summed-error weight). Sabour et al. report 5.2 % error for
CapsNet after far longer training on 60M generated pairs.

    KERAS_BACKEND=tensorflow python examples/multimnist_capsnet.py --model efficient --epochs 5

`--model capsnet` (Sabour et al., 36x36 input) or `efficient`
(Efficient-CapsNet, Mazzia et al. 2021). The test set is fixed (pairs and
shifts from a stateless RNG with seed 0), the training pairs change every
epoch. The validation pairs are made the same way as the test pairs from
the last 10 % of MNIST's training split (`--validation-fraction`), which
the training pairs do not use. Writes training_log.csv, metrics.json, model.keras, training curves,
and multimnist.png: each input, the reconstructions of the two predicted
capsules in red and green, and the predicted pair.
"""

import os

import atomic
import common
import data
import keras  # (before tensorflow, see common.py)
import numpy as np
from keras import ops

from keras_capsules.models import CapsNet, EfficientCapsNet

SIZE = data.MULTIMNIST_SIZE
RECONSTRUCTION_WEIGHT = 0.0005 * SIZE * SIZE  # per digit, on the mean squared error


MODELS = {"capsnet": CapsNet, "efficient": EfficientCapsNet}


def add_arguments(parser):
    parser.add_argument("--model", choices=sorted(MODELS), default="efficient")


def build_model(args):
    # Two labels per image: the margin loss with two 1s in T, each digit
    # reconstructed from its own capsule, LabelSetAccuracy(2) as "accuracy".
    return MODELS[args.model](
        (SIZE, SIZE, 1),
        10,
        router=args.router,
        labels_per_image=2,
        reconstruction_weight=RECONSTRUCTION_WEIGHT,
    )


def load_data(args, batch_size, drop_remainder=False):
    train_split, validation_split = data.train_validation_splits(args.validation_fraction)
    train = data.multimnist(
        train_split,
        batch_size,
        args.data_dir,
        drop_remainder=drop_remainder,
        order=data.epoch_order(args),
    )
    validation, test = (
        None
        if split is None
        else data.multimnist(
            split, batch_size, args.data_dir, seed=0, drop_remainder=drop_remainder
        )
        for split in (validation_split, "test")
    )
    return train, validation, test


def make_optimizer(args, steps_per_epoch):
    # Both papers' Adam rates, decayed to x0.1 over the run.
    rate = 1e-3 if args.model == "capsnet" else 5e-4
    total_steps = max(steps_per_epoch * args.epochs, 1)
    schedule = keras.optimizers.schedules.ExponentialDecay(rate, total_steps, 0.1)
    return keras.optimizers.Adam(schedule)


def plot_multimnist(model, images, labels, path):
    """Inputs (top), the two predicted capsules decoded in red and green
    (bottom), titled with the true and the predicted pair."""
    import matplotlib.pyplot as plt

    poses = ops.convert_to_numpy(model.encode(ops.convert_to_tensor(images), training=False))
    poses = poses.astype("float32")
    pairs = np.sort(np.argsort(-np.linalg.norm(poses, axis=-1), axis=-1)[:, :2], axis=-1)
    batch, classes = poses.shape[:2]
    colours = []
    for k in range(2):  # decode each predicted capsule alone
        keep = np.eye(classes, dtype="float32")[pairs[:, k]][..., None]
        colours.append(ops.convert_to_numpy(model.decode(poses * keep)).astype("float32"))
    red, green = (np.clip(c[..., 0], 0, 1) for c in colours)
    rgb = np.stack([red, green, np.zeros_like(red)], axis=-1)
    fig, axes = plt.subplots(2, batch, figsize=(1.5 * batch, 3.4), squeeze=False)
    for i in range(batch):
        axes[0, i].imshow(images[i, ..., 0], cmap="gray", vmin=0, vmax=1)
        axes[0, i].set_title(
            f"true {sorted(labels[i].tolist())}\npred {pairs[i].tolist()}", fontsize=8
        )
        axes[1, i].imshow(rgb[i])
        for ax in axes[:, i]:
            ax.set_xticks([])
            ax.set_yticks([])
    fig.suptitle("Input (top); the two predicted capsules decoded, red and green (bottom)")
    fig.tight_layout()
    atomic.save_figure(fig, path, dpi=100)
    plt.close(fig)


def figures(model, test, output_dir, args=None):
    images, targets = next(iter(test))
    images, labels = np.asarray(images)[:8], np.asarray(targets["labels"])[:8]
    if model.reconstruction:
        plot_multimnist(model, images, labels, os.path.join(output_dir, "multimnist.png"))


def main(argv=None):
    return common.run(
        "multimnist_capsnet",
        __doc__.split("\n")[2],
        build_model,
        load_data,
        make_optimizer,
        figures,
        epochs=10,
        batch_size=32,
        argv=argv,
        add_arguments=add_arguments,
        xla_on_cpu=True,
    )


if __name__ == "__main__":
    main()
