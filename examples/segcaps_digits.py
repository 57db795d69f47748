"""
Title: SegCaps on digits
Description: SegCaps R3 (or a U-Net baseline) segments one to three MNIST digits on a noisy canvas, trained with `model.fit`.
Reference: LaLonde & Bagci, "Capsules for Object Segmentation", arXiv:1804.04241, 2018.

Each image is a canvas (default 64x64) holding one to three real MNIST
digits at random places (they may overlap), with noise; the mask is the
digits' pixels. Canvases are made on the fly from TFDS `mnist`: training
ones from the training split (new placements each epoch), validation ones
from its last 10 %, test ones from the test split (the same every run).
No download beyond MNIST.

`--model segcaps` (default) trains `keras_capsules.models.SegCaps`, the
paper's R3 network (1.4 M parameters), with its loss: weighted binary
cross-entropy on the capsule lengths (foreground pixels weighted by
background / foreground pixels of the training data) plus the
reconstruction of the digits' pixels from their capsules. `--model unet`
trains a U-Net of the usual shape (`unet.py`) with the same weighted
cross-entropy, optimiser and metrics. Both report Dice and the
foreground's IoU.

    KERAS_BACKEND=tensorflow python examples/segcaps_digits.py --time-budget 20
    KERAS_BACKEND=tensorflow python examples/segcaps_digits.py --model unet --time-budget 20

Writes training_log.csv, metrics.json, model.keras, training curves and
segmentation.png (input, ground truth, prediction, reconstruction) to
--output-dir (default runs/segcaps_digits/<backend>).
"""

import data
import keras  # noqa: F401  (before tensorflow, see common.py)
import segmentation


def load_data(args, batch_size, drop_remainder=False):
    def canvases(split, training, order=None):
        return data.digit_canvases(
            split,
            batch_size,
            args.data_dir,
            canvas_size=args.image_size,
            training=training,
            # Training canvases follow --seed; validation and test ones are
            # the same in every run.
            seed=args.seed if training else 0,
            drop_remainder=drop_remainder,
            order=order,
        )

    return segmentation.load_splits(args, canvases)


def main(argv=None):
    return segmentation.main(
        "segcaps_digits",
        __doc__.split("\n")[2],
        load_data,
        channels=1,
        image_size=64,
        epochs=10,
        batch_size=16,
        argv=argv,
    )


if __name__ == "__main__":
    main()
