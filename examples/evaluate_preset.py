"""
Title: Evaluate a pretrained capsule network on smallNORB
Description: The authors' released weights (a preset) on the TFDS smallNORB test set, with each paper's preprocessing.
Reference: Heinsen, "An Algorithm for Routing Capsules in All Domains", 2019; Mazzia, Salvetti & Chiaberge, "Efficient-CapsNet: capsule network with self-attention routing", Scientific Reports 11, 2021.

Loads a preset (`keras_capsules.models.from_preset`), downloading the
authors' weights file from their repository (or reading a local copy,
`--weights`), and measures its accuracy on the 24,300 test images of TFDS
`smallnorb`, prepared as the authors prepared them:

- `heinsen_smallnorb`: the full 96x96 stereo pair in [0, 1];
- `efficient_capsnet_smallnorb`: each image of the pair standardised, resized
  to 64x64, the centre 48x48 crop.

    python examples/evaluate_preset.py --preset heinsen_smallnorb
    python examples/evaluate_preset.py --preset efficient_capsnet_smallnorb \\
        --weights efficient_capsnet_SMALLNORB.h5

`--preset` also takes a `.keras` file of one of these models (a fine-tuned
preset). Writes metrics.json (accuracy, per-class accuracy, images/s) to
--output-dir (default runs/evaluate_<preset>/<backend>).
"""

import argparse
import contextlib
import os
import time

import atomic
import keras  # Before tensorflow, see common.py.
import numpy as np

from keras_capsules.models import EfficientCapsNet, HeinsenCapsNet, from_preset, list_presets

SMOKE_EXAMPLES, SMOKE_BATCH_SIZE = 8, 4


def smallnorb_test_batches(model, batch_size, data_dir):
    """The smallNORB test batches as the model's authors prepared them."""
    import data

    if isinstance(model, HeinsenCapsNet):
        recipe = "heinsen"
    elif isinstance(model, EfficientCapsNet) and model.architecture == "smallnorb":
        recipe = "efficient_capsnet"
    else:
        raise SystemExit(
            f"No smallNORB preprocessing is known for a {type(model).__name__}: --preset must be "
            f"one of {', '.join(sorted(list_presets()))} or a .keras file of one of their "
            "models."
        )
    return data.smallnorb("test", batch_size, training=False, data_dir=data_dir, recipe=recipe)


def evaluate(model, dataset, num_classes):
    """Accuracy and per-class accuracy of `argmax(scores)`; images/s."""
    correct, seen = np.zeros(num_classes), np.zeros(num_classes)
    start = time.perf_counter()
    for images, labels in dataset:
        scores = np.asarray(model.predict_on_batch(images.numpy()))
        labels = labels.numpy()
        np.add.at(seen, labels, 1)
        np.add.at(correct, labels, scores.argmax(-1) == labels)
    seconds = time.perf_counter() - start
    return {
        "test_accuracy": float(correct.sum() / seen.sum()),
        "test_examples": int(seen.sum()),
        "per_class_accuracy": (correct / np.maximum(seen, 1)).tolist(),
        "images_per_second": float(seen.sum() / seconds),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[2])
    parser.add_argument("--preset", required=True, help="a preset name or a .keras file")
    parser.add_argument("--weights", help="a local copy of the authors' weights file")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--data-dir", help="TFDS data dir (default: TFDS_DATA_DIR or ~)")
    parser.add_argument("--output-dir")
    parser.add_argument(
        "--smoke", action="store_true", help=f"{SMOKE_EXAMPLES} fake TFDS examples (no download)"
    )
    args = parser.parse_args(argv)
    name = os.path.splitext(os.path.basename(args.preset))[0]
    output_dir = args.output_dir or os.path.join(
        "runs", f"evaluate_{name}", keras.backend.backend()
    )
    os.makedirs(output_dir, exist_ok=True)

    model = from_preset(args.preset, weights=args.weights)
    mock = contextlib.nullcontext()
    if args.smoke:
        import data

        mock = data.mock_data(SMOKE_EXAMPLES)
        args.batch_size = SMOKE_BATCH_SIZE
    with mock:
        results = evaluate(
            model, smallnorb_test_batches(model, args.batch_size, args.data_dir), model.num_classes
        )
    metrics = {
        "preset": args.preset,
        "model": type(model).__name__,
        "backend": keras.backend.backend(),
        "parameters": int(model.count_params()),
        "smoke": args.smoke,
        **results,
    }
    atomic.write_json(os.path.join(output_dir, "metrics.json"), metrics)
    print(
        f"{args.preset}: test accuracy {metrics['test_accuracy']:.4f} on "
        f"{metrics['test_examples']} images; outputs in {output_dir}"
    )
    return metrics


if __name__ == "__main__":
    main()
