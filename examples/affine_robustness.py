"""
Title: Affine robustness: capsules against a CNN on affNIST-style digits
Description: Sabour et al.'s affNIST protocol: train on translated MNIST only, compare a capsule network and a CNN of similar size on affine-transformed digits at the same clean accuracy.
Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules", NeurIPS 2017, section 5.2.

Both models see only MNIST training digits placed at random positions on a
40x40 canvas (translation only). After every epoch each is tested on two
sets made from the 10,000 MNIST test digits: the clean set (each digit at a
random position on the canvas) and the affine set (each digit rotated,
sheared, scaled and moved within affNIST's ranges, see `affine_data.py`).
Both sets are drawn from `--test-seed`, the same for every run and backend.

The paper compares the two at the same clean accuracy (CapsNet 79 % on
affNIST against 66 % for a CNN, both at 99.2-99.3 % on the translated
test set). Here each model trains until its validation accuracy (the last
`--validation-fraction` of the training split, translated the same way)
reaches `--target`, or for `--epochs` epochs, or for `--time-budget`
minutes; the report gives, for each model, the epoch it stopped at and its
clean and affine test accuracies there, with the per-epoch curves of both
(metrics.json, affine_robustness.png), so models can also be compared at any
other clean accuracy. The test sets select nothing.

Models: `--model efficient` (default; `EfficientCapsNet((40, 40, 1), 10)`
with its decoder, margin loss + 0.392 x reconstruction MSE) or `--model
capsnet` (Sabour et al.'s `CapsNet((40, 40, 1), 10)`); the CNN baseline is
three 5x5/3x3 conv + max-pool blocks with BatchNorm, a hidden dense layer
(`--cnn-units`) with dropout 0.5 and a softmax; its default size is close
to the capsule classifier's (without the decoder): the report gives both
counts. Both: Adam 5e-4, x 0.97 each epoch, batch 32.

    KERAS_BACKEND=tensorflow python examples/affine_robustness.py --time-budget 20

Writes metrics.json, one training_log_<model>.csv per model,
affine_robustness.png (affine against clean test accuracy, per epoch) and
affine_examples.png to --output-dir (default runs/affine_robustness/<backend>).
"""

import argparse
import contextlib
import os
import sys
import time

import affine_data
import atomic
import common
import data
import keras  # Before tensorflow, see common.py.
import tensorflow as tf

from keras_capsules.models import CapsNet, EfficientCapsNet

SHAPE = (affine_data.CANVAS, affine_data.CANVAS, 1)
CAPSULE_MODELS = {"efficient": EfficientCapsNet, "capsnet": CapsNet}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[2])
    parser.add_argument("--model", choices=sorted(CAPSULE_MODELS), default="efficient")
    parser.add_argument("--epochs", type=int, default=30, help="at most this many epochs")
    parser.add_argument(
        "--target",
        type=float,
        default=0.99,
        help="stop each model at the first epoch whose validation accuracy reaches this",
    )
    parser.add_argument(
        "--time-budget",
        type=float,
        default=None,
        metavar="MINUTES",
        help="stop each model's training after the step that passes this wall time",
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--cnn-units", type=int, default=80, help="the CNN's hidden units")
    parser.add_argument("--validation-fraction", type=float, default=0.1, metavar="F")
    parser.add_argument("--steps-per-epoch", type=int, default=None)
    parser.add_argument("--test-seed", type=int, default=0, help="draws the two test sets")
    parser.add_argument(
        "--seed", type=int, default=0, help="keras.utils.set_random_seed (default: 0)"
    )
    parser.add_argument("--jit-compile", choices=("auto", "true", "false"), default="auto")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--output-dir", default=None)
    parser.add_argument("--smoke", action="store_true", help="2 steps on fake TFDS data")
    args = parser.parse_args(argv)
    if not 0 < args.target <= 1:
        parser.error(f"--target must be in (0, 1]. Received: --target {args.target}")
    if not 0 < args.validation_fraction < 1:
        parser.error(
            "--validation-fraction must be in (0, 1): the target is checked on it. "
            f"Received: --validation-fraction {args.validation_fraction}"
        )
    if args.smoke:
        args.epochs, args.batch_size, args.steps_per_epoch = 1, common.SMOKE_BATCH_SIZE, 2
    return args


def baseline_cnn(units, num_classes=10):
    """Conv-BN-ReLU-max-pool x 3, then a dense layer with dropout: a plain CNN."""
    layers = [keras.Input(SHAPE)]
    for filters, kernel in ((32, 5), (64, 3), (64, 3)):
        layers += [
            keras.layers.Conv2D(filters, kernel, padding="same", use_bias=False),
            keras.layers.BatchNormalization(),
            keras.layers.ReLU(),
            keras.layers.MaxPooling2D(),
        ]
    layers += [
        keras.layers.Flatten(),
        keras.layers.Dense(units, activation="relu"),
        keras.layers.Dropout(0.5),
        keras.layers.Dense(num_classes, activation="softmax"),
    ]
    return keras.Sequential(layers, name="cnn")


def load_sets(args):
    """(training batches, {validation, clean, affine}: (images, labels))."""
    train_split, validation_split = data.train_validation_splits(args.validation_fraction)
    limit = common.SMOKE_EXAMPLES if args.smoke else None

    def digits(split):
        return affine_data.digits_and_labels(data.load_split("mnist", split, args.data_dir), limit)

    train = data.mnist(train_split, args.batch_size, data_dir=args.data_dir, shuffle=True).map(
        lambda x, y: (affine_data.random_translation(x), y), data.AUTOTUNE
    )
    validation_digits, validation_labels = digits(validation_split)
    test_digits, test_labels = digits("test")
    seed = args.test_seed
    sets = {
        # A different draw from the test sets' (seed + 1).
        "validation": (
            affine_data.translated_test_set(validation_digits, seed + 1),
            validation_labels,
        ),
        "clean": (affine_data.translated_test_set(test_digits, seed), test_labels),
        "affine": (affine_data.affine_test_set(test_digits, seed), test_labels),
    }
    return train, sets


def batches(images_and_labels, batch_size):
    return tf.data.Dataset.from_tensor_slices(images_and_labels).batch(batch_size)


class TestEachEpoch(keras.callbacks.Callback):
    """After each epoch: the clean and affine test accuracies into the logs
    (`clean_accuracy`, `affine_accuracy`), then stop once the validation
    accuracy reaches `target`."""

    def __init__(self, tests, target, steps=None):
        super().__init__()
        self.tests, self.target, self.steps = tests, target, steps
        self.curve, self.stopped_at = [], None

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        row = {"epoch": epoch + 1, "validation_accuracy": float(logs["val_accuracy"])}
        for name, dataset in self.tests.items():
            result = self.model.evaluate(dataset, steps=self.steps, verbose=0, return_dict=True)
            logs[f"{name}_accuracy"] = row[f"{name}_accuracy"] = float(result["accuracy"])
        self.curve.append(row)
        if self.stopped_at is None and row["validation_accuracy"] >= self.target:
            self.stopped_at = epoch + 1
            self.model.stop_training = True


def train(name, model, loss, args, train_batches, sets, output_dir):
    steps = args.steps_per_epoch or common.steps_in(train_batches) or 1
    schedule = keras.optimizers.schedules.ExponentialDecay(5e-4, steps, 0.97, staircase=True)
    model.compile(
        optimizer=keras.optimizers.Adam(schedule),
        metrics=["accuracy"] if loss is not None else "auto",
        jit_compile=common.resolve_jit_compile(args.jit_compile),
        **({} if loss is None else {"loss": loss}),
    )
    test_steps = common.SMOKE_STEPS if args.smoke else None
    tests = TestEachEpoch(
        {key: batches(sets[key], args.batch_size) for key in ("clean", "affine")},
        args.target,
        test_steps,
    )
    throughput = common.Throughput(args.batch_size, warmup=1 if args.smoke else 3)
    callbacks = [
        tests,
        common.TrainingLog(os.path.join(output_dir, f"training_log_{name}.csv")),
        throughput,
    ]
    if args.time_budget is not None:
        callbacks.append(common.TimeBudget(args.time_budget))
    start = time.perf_counter()
    model.fit(
        train_batches,
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        validation_data=batches(sets["validation"], args.batch_size),
        validation_steps=test_steps,
        callbacks=callbacks,
        verbose=2 if args.smoke else "auto",
        shuffle=False,  # The batches come shuffled.
    )
    last = tests.curve[-1]
    return {
        "parameters": int(model.count_params()),
        "epochs_trained": last["epoch"],
        "reached_target": tests.stopped_at is not None,
        "validation_accuracy": last["validation_accuracy"],
        "clean_test_accuracy": last["clean_accuracy"],
        "affine_test_accuracy": last["affine_accuracy"],
        "curve": tests.curve,
        "train_seconds": time.perf_counter() - start,
        "images_per_second": throughput.images_per_second,
    }


def classifier_parameters(args):
    """The capsule model's parameters without its decoder."""
    return int(CAPSULE_MODELS[args.model](SHAPE, 10, reconstruction=False).count_params())


def plot(results, sets, output_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4))
    for name, result in results.items():
        clean = [100 * row["clean_accuracy"] for row in result["curve"]]
        affine = [100 * row["affine_accuracy"] for row in result["curve"]]
        ax.plot(clean, affine, "o-", label=name)
    ax.set(xlabel="clean (translated) test accuracy, %", ylabel="affine test accuracy, %")
    ax.set_title("each point: one epoch")
    ax.legend()
    fig.tight_layout()
    atomic.save_figure(fig, os.path.join(output_dir, "affine_robustness.png"), dpi=100)
    plt.close(fig)
    fig, axes = plt.subplots(2, 8, figsize=(8, 2.3))
    for row, key in enumerate(("clean", "affine")):
        for col in range(8):
            axes[row, col].imshow(sets[key][0][col % len(sets[key][0]), ..., 0], cmap="gray")
            axes[row, col].axis("off")
        axes[row, 0].set_title(key, fontsize=8, loc="left")
    atomic.save_figure(fig, os.path.join(output_dir, "affine_examples.png"), dpi=100)
    plt.close(fig)


def main(argv=None):
    if argv is None:
        common.use_xla_cpu_convolutions()
    args = parse_args(argv)
    output_dir = args.output_dir or os.path.join(
        "runs", "affine_robustness", keras.backend.backend()
    )
    os.makedirs(output_dir, exist_ok=True)
    if args.seed is not None:
        keras.utils.set_random_seed(args.seed)
    mock = data.mock_data(common.SMOKE_EXAMPLES) if args.smoke else contextlib.nullcontext()
    with mock:
        train_batches, sets = load_sets(args)
    capsules = CAPSULE_MODELS[args.model](SHAPE, 10)
    results = {
        args.model: train(args.model, capsules, None, args, train_batches, sets, output_dir),
        "cnn": train(
            "cnn",
            baseline_cnn(args.cnn_units),
            "sparse_categorical_crossentropy",
            args,
            train_batches,
            sets,
            output_dir,
        ),
    }
    results[args.model]["parameters_without_decoder"] = classifier_parameters(args)
    metrics = {
        "example": "affine_robustness",
        "backend": keras.backend.backend(),
        "models": results,
        "target_validation_accuracy": args.target,
        "max_epochs": args.epochs,
        "time_budget_minutes": args.time_budget,
        "batch_size": args.batch_size,
        "test_seed": args.test_seed,
        "seed": args.seed,
        "affnist_ranges": affine_data.AFFNIST_RANGES,
        "test_images": int(len(sets["clean"][1])),
        "smoke": args.smoke,
        "command": " ".join(
            [os.path.basename(sys.argv[0])] + list(sys.argv[1:] if argv is None else argv)
        ),
    }
    atomic.write_json(os.path.join(output_dir, "metrics.json"), metrics)
    plot(results, sets, output_dir)
    for name, result in results.items():
        print(
            f"{name}: epoch {result['epochs_trained']}, clean "
            f"{100 * result['clean_test_accuracy']:.2f} %, affine "
            f"{100 * result['affine_test_accuracy']:.2f} % ({result['parameters']:,} parameters)"
        )
    return metrics


if __name__ == "__main__":
    main()
