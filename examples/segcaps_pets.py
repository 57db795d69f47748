"""
Title: SegCaps on Oxford-IIIT Pets
Description: SegCaps R3 (or a U-Net baseline) segments pets from the background in TFDS `oxford_iiit_pet`, trained with `model.fit`.
Reference: LaLonde & Bagci, "Capsules for Object Segmentation", arXiv:1804.04241, 2018.

TFDS `oxford_iiit_pet` (downloaded on first use, about 800 MB): photos of
37 breeds of cats and dogs with trimaps; the mask is the pet (the trimap's
border pixels count as background). Images and masks are resized to
`--image-size` (default 64), images scaled to [0, 1], training images
flipped at random. The last 10 % of the training split validates, the test
split tests.

`--model segcaps` (default) trains `keras_capsules.models.SegCaps` with its
loss (weighted binary cross-entropy plus the reconstruction of the pet's
pixels); `--model unet` a U-Net (`unet.py`) with the same weighted
cross-entropy, optimiser and metrics (Dice, foreground IoU).

    KERAS_BACKEND=tensorflow python examples/segcaps_pets.py --image-size 64 --epochs 10

Writes training_log.csv, metrics.json, model.keras, training curves and
segmentation.png to --output-dir (default runs/segcaps_pets/<backend>).
"""

import data
import keras  # noqa: F401  (before tensorflow, see common.py)
import segmentation


def load_data(args, batch_size, drop_remainder=False):
    def pets(split, training, order=None):
        return data.oxford_pets_segmentation(
            split,
            batch_size,
            args.data_dir,
            image_size=args.image_size,
            training=training,
            drop_remainder=drop_remainder,
            order=order,
        )

    return segmentation.load_splits(args, pets)


def main(argv=None):
    return segmentation.main(
        "segcaps_pets",
        __doc__.split("\n")[2],
        load_data,
        channels=3,
        image_size=64,
        epochs=10,
        batch_size=16,
        argv=argv,
    )


if __name__ == "__main__":
    main()
