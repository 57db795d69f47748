"""
Title: Capsules on MultiMNIST: overlapping digits
Description: CapsNet or Efficient-CapsNet recognising and reconstructing two overlapping MNIST digits.
Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules", NeurIPS 2017, section 6.

MultiMNIST (`data.multimnist`) is generated on the fly from MNIST: each
digit is overlaid on a random digit of another class, each shifted by up to
4 px each way on a 36x36 canvas (the paper's recipe). The model has one
class capsule per digit class; both digits must get the two longest
capsules (`TopTwoAccuracy`, reported as "accuracy"; its error is the
papers' MultiMNIST error). Loss: the margin loss with both classes present
(Sabour et al. eq. 4 with two 1s in T), plus, for each of the two digits, the
mean squared error of the decoder's reconstruction of that digit alone
from the poses masked to its own capsule (weight 0.0005 x 36 x 36 each,
the paper's summed-error weight). Sabour et al. report 5.2 % error for
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

import keras  # (before tensorflow, see common.py)
import numpy as np
from keras import ops

import common
import data
from keras_capsules.models import CapsNet, EfficientCapsNet

SIZE = data.MULTIMNIST_SIZE
RECONSTRUCTION_WEIGHT = 0.0005 * SIZE * SIZE  # per digit, on the mean squared error


@keras.saving.register_keras_serializable(package="multimnist")
class TopTwoAccuracy(keras.metrics.MeanMetricWrapper):
    """1 when the two longest capsules are exactly the two labelled classes.

    y_true: `(batch, num_classes)` with two 1s; y_pred: class scores.
    """

    def __init__(self, name="accuracy", dtype=None):
        super().__init__(fn=top_two_correct, name=name, dtype=dtype)

    def get_config(self):
        return {"name": self.name, "dtype": self.dtype}


def top_two_correct(y_true, y_pred):
    scores = ops.cast(y_pred, "float32")
    second = ops.top_k(scores, 2)[0][:, 1:]
    predicted = ops.cast(scores >= second, "float32")  # the two longest
    return ops.cast(ops.all(predicted == ops.cast(y_true, "float32"), axis=-1), "float32")


class MultiDigit:
    """Two labelled digits per image, each reconstructed from its own capsule.

    Mixed into a `CapsuleClassifier` (CapsNet, EfficientCapsNet). `call`
    returns the class-capsule poses `(batch, num_classes, dim)`, which this
    loss needs; the class scores are their lengths, `model.scores(poses)`.
    Targets `y` are `data.multimnist`'s dict: `labels (batch, 2)` and the
    digits alone `digits (batch, 2, H, W, C)`.
    """

    def call(self, images, training=None):
        return self.encode(images, training=training)

    def _two_hot(self, labels):
        return ops.sum(ops.one_hot(ops.cast(labels, "int32"), self.num_classes), axis=1)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        labels = y["labels"]
        losses = [ops.cast(self.margin_loss(
            self._two_hot(labels), self.scores(y_pred), sample_weight), "float32")]
        if self.reconstruction:
            for k in range(2):  # the two digits: a fixed 2, not a batch loop
                mask = ops.one_hot(ops.cast(labels[:, k], "int32"), self.num_classes)
                decoded = ops.cast(self.decoder(self.mask([y_pred, mask])), "float32")
                batch = ops.shape(decoded)[0]
                target = ops.cast(y["digits"][:, k], "float32")
                losses.append(self.reconstruction_weight * self.reconstruction_loss(
                    ops.reshape(target, (batch, -1)), ops.reshape(decoded, (batch, -1)),
                    sample_weight))
        losses += [ops.cast(self._aggregate_additional_loss(l), "float32") for l in self.losses]
        return ops.sum(ops.stack(losses))

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        return super().compute_metrics(
            x, self._two_hot(y["labels"]), self.scores(y_pred), sample_weight)


@keras.saving.register_keras_serializable(package="multimnist")
class MultiMNISTCapsNet(MultiDigit, CapsNet):
    pass


@keras.saving.register_keras_serializable(package="multimnist")
class MultiMNISTEfficientCapsNet(MultiDigit, EfficientCapsNet):
    pass


MODELS = {"capsnet": MultiMNISTCapsNet, "efficient": MultiMNISTEfficientCapsNet}


def add_arguments(parser):
    parser.add_argument("--model", choices=sorted(MODELS), default="efficient")


def build_model(args):
    return MODELS[args.model]((SIZE, SIZE, 1), 10, router=args.router,
                              reconstruction_weight=RECONSTRUCTION_WEIGHT)


def load_data(args, batch_size, drop_remainder=False):
    train_split, validation_split = data.train_validation_splits(args.validation_fraction)
    train = data.multimnist(train_split, batch_size, args.data_dir,
                            drop_remainder=drop_remainder)
    validation, test = (
        None if split is None else data.multimnist(split, batch_size, args.data_dir, seed=0,
                                                   drop_remainder=drop_remainder)
        for split in (validation_split, "test"))
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

    poses = ops.convert_to_numpy(model(ops.convert_to_tensor(images), training=False))
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
        axes[0, i].set_title(f"true {sorted(labels[i].tolist())}\npred {pairs[i].tolist()}",
                             fontsize=8)
        axes[1, i].imshow(rgb[i])
        for ax in axes[:, i]:
            ax.set_xticks([])
            ax.set_yticks([])
    fig.suptitle("Input (top); the two predicted capsules decoded, red and green (bottom)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def figures(model, test, output_dir, args=None):
    images, targets = next(iter(test))
    images, labels = np.asarray(images)[:8], np.asarray(targets["labels"])[:8]
    if model.reconstruction:
        plot_multimnist(model, images, labels, os.path.join(output_dir, "multimnist.png"))


def main(argv=None):
    return common.run(
        "multimnist_capsnet", __doc__.split("\n")[2], build_model, load_data, make_optimizer,
        figures, epochs=10, batch_size=32, argv=argv, add_arguments=add_arguments,
        xla_on_cpu=True, metrics=[TopTwoAccuracy()],
    )


if __name__ == "__main__":
    main()
