"""
Title: Efficient-CapsNet on smallNORB
Description: Efficient-CapsNet with self-attention routing on stereo smallNORB, trained with `model.fit`.
Reference: Mazzia, Salvetti & Chiaberge, "Efficient-CapsNet: capsule network with self-attention routing", Scientific Reports 11, 2021.

smallNORB (TFDS `smallnorb`): 5 toy categories photographed by a stereo
camera pair; both images become the 2 channels of the input. Following
Hinton et al. (2018), images are resized to 48x48, randomly cropped to
32x32 with random brightness and contrast for training (centre crop for
testing, and for the validation data: the last 10 % of the training split,
`--validation-fraction`) and standardised per image. The model is
`keras_capsules.models.EfficientCapsNet((32, 32, 2), 5)` with a linear
decoder output (the inputs are standardised, not in [0, 1]). Optimiser:
Adam (5e-4), learning rate x 0.97 each epoch, batch 16.

    KERAS_BACKEND=jax python examples/smallnorb_efficient_capsnet.py --epochs 100

Writes training_log.csv, metrics.json, model.keras and figures to
--output-dir (default runs/smallnorb_efficient_capsnet).
"""

import common
import data
import figures
import keras  # noqa: F401  (before tensorflow, see common.py)

from keras_capsules.models import EfficientCapsNet


def build_model(args):
    return EfficientCapsNet(
        (32, 32, 2),
        len(data.SMALLNORB_CLASSES),
        router=args.router,
        decoder_activation="linear",
    )


load_data = data.smallnorb_splits


def make_optimizer(args, steps_per_epoch):
    schedule = keras.optimizers.schedules.ExponentialDecay(
        5e-4, steps_per_epoch, 0.97, staircase=True
    )
    return keras.optimizers.Adam(schedule)


def main(argv=None):
    return common.run(
        "smallnorb_efficient_capsnet",
        __doc__.split("\n")[2],
        build_model,
        load_data,
        make_optimizer,
        figures.capsule_figures(class_names=data.SMALLNORB_CLASSES),
        epochs=100,
        batch_size=16,
        argv=argv,
        xla_on_cpu=True,  # measured faster on TF CPU for this model (common.py)
    )


if __name__ == "__main__":
    main()
