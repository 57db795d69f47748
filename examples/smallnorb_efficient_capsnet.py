"""
Title: Efficient-CapsNet on smallNORB
Description: Mazzia et al.'s smallNORB Efficient-CapsNet with self-attention routing, trained with `model.fit` on their recipe.
Reference: Mazzia, Salvetti & Chiaberge, "Efficient-CapsNet: capsule network with self-attention routing", Scientific Reports 11, 2021.

smallNORB (TFDS `smallnorb`): 5 toy categories photographed by a stereo
camera pair; both images become the 2 channels of the input. The authors'
published recipe (EscVM/Efficient-CapsNet, `config.json` and
`utils/pre_process_smallnorb.py`): each 96x96 channel standardised per
image, resized to 64x64, then a random 48x48 crop with random brightness
(max_delta 2.0) and contrast (0.5-1.5) for training, the centre crop for
testing (and for the validation data: the last 10 % of the training split,
`--validation-fraction`). The model is their smallNORB architecture,
`keras_capsules.models.EfficientCapsNet(architecture="smallnorb")` (48x48x2,
5 classes, instance normalization, their generator as the decoder, sigmoid
output as theirs); loss: margin loss + 0.392 x the reconstruction's mean
squared error. Optimiser: Adam (5e-4), learning rate x 0.97 each epoch,
batch 16, 150 epochs.

    KERAS_BACKEND=jax python examples/smallnorb_efficient_capsnet.py

On TensorFlow on CPU this architecture trains faster without XLA (0.26 s
against 0.46-0.51 s per step of 16 on 2 cores), so `--jit-compile auto`
leaves XLA off there (`EfficientCapsNet.xla_on_cpu`).

Their released weights load into the same model:
`model.load_authors_weights("efficient_capsnet_SMALLNORB.h5")`.

`--split azimuth` or `--split elevation`: Hinton et al. (2018)'s
novel-viewpoint experiments: train on the images of some viewpoints only,
report the test accuracy on those familiar viewpoints (test_accuracy) and
on the novel ones (test_novel_viewpoints_accuracy) separately.

TFDS downloads smallNORB (about 250 MB) on the first run. Without
internet access, bring its six original files from a machine that has
them (`python examples/prepare_tfds_offline.py smallnorb --list` prints
their URLs) and build the dataset from them:
`python examples/prepare_tfds_offline.py smallnorb DIR FILE...`, then
`TFDS_DATA_DIR=DIR`. `--smoke` runs the script on random examples, with no
data.

Writes training_log.csv, metrics.json, model.keras and figures to
--output-dir (default runs/smallnorb_efficient_capsnet/<backend>).
"""

import common
import data
import figures
import keras  # noqa: F401  (before tensorflow, see common.py)

from keras_capsules.models import EfficientCapsNet


def build_model(args):
    return EfficientCapsNet(
        num_classes=len(data.SMALLNORB_CLASSES), router=args.router, architecture="smallnorb"
    )


def load_data(args, batch_size, drop_remainder=False):
    return data.smallnorb_splits(args, batch_size, drop_remainder, recipe="efficient_capsnet")


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
        epochs=150,
        batch_size=16,
        argv=argv,
        add_arguments=data.add_smallnorb_arguments,
    )


if __name__ == "__main__":
    main()
