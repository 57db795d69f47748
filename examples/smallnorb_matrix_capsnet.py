"""
Title: Matrix capsules with EM routing on smallNORB
Description: Hinton et al.'s matrix-capsule network with EM routing on stereo smallNORB, trained with `model.fit`.
Reference: Hinton, Sabour & Frosst, "Matrix capsules with EM routing", ICLR 2018.

smallNORB (TFDS `smallnorb`): 5 toy categories photographed by a stereo
camera pair; both images become the 2 channels of the input, resized to
48x48, randomly cropped to 32x32 with random brightness and contrast for
training (centre crop for testing) and standardised per image (the paper's
preparation). The last 10 % of the training split (`--validation-fraction`)
validates each epoch, centre-cropped. The model is `keras_capsules.models.MatrixCapsNet` with the
paper's A = B = C = D = 32 (317,194 parameters): a 5x5 stride-2 ReLU conv,
primary matrix capsules, two convolutional capsule layers and class
capsules with coordinate addition, all routed by EM routing (3 iterations).

Loss: the model's own spread loss; its margin rises linearly from 0.2 to
0.9 over the first half of the training steps, then stays at 0.9
(`SpreadLossMarginScheduler`). The paper says "linearly" without the
length; the authors' later OpenReview answer used a sigmoid ramp centred
at step 200K of batch 64, which this example does not copy.

Optimiser: Adam, learning rate 3e-3 decayed x 0.96 every 20,000 steps
(continuously), the values the authors gave on OpenReview (the paper names
no optimiser). They trained with batch 64; the default here is 32 because
a batch of 64 needs about 14 GB of memory on CPU; `--batch-size 64`
restores theirs. `--capsules A B C D` and `--iterations` change the sizes
(the tests use tiny ones); `--router` replaces EM routing in all three
capsule layers by another router of the library.

    KERAS_BACKEND=jax python examples/smallnorb_matrix_capsnet.py --epochs 50

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

Writes training_log.csv (with the margin per epoch), metrics.json,
model.keras and training curves to --output-dir (default
runs/smallnorb_matrix_capsnet/<backend>).
"""

import common
import data
import keras  # noqa: F401  (before tensorflow, see common.py)

from keras_capsules.callbacks import SpreadLossMarginScheduler
from keras_capsules.models import MatrixCapsNet


def add_arguments(parser):
    data.add_smallnorb_arguments(parser)
    parser.add_argument(
        "--capsules",
        type=int,
        nargs=4,
        default=[32, 32, 32, 32],
        metavar=("A", "B", "C", "D"),
        help="conv channels A and capsule types B, C, D (paper: 32 32 32 32)",
    )
    parser.add_argument(
        "--iterations", type=int, default=3, help="EM routing iterations (unused with --router)"
    )


def build_model(args):
    conv_filters, primary_capsules, conv_capsules1, conv_capsules2 = args.capsules
    return MatrixCapsNet(
        (32, 32, 2),
        len(data.SMALLNORB_CLASSES),
        conv_filters=conv_filters,
        primary_capsules=primary_capsules,
        conv_capsules1=conv_capsules1,
        conv_capsules2=conv_capsules2,
        router=args.router or {"class_name": "em", "config": {"iterations": args.iterations}},
    )


load_data = data.smallnorb_splits


def make_optimizer(args, steps_per_epoch):
    schedule = keras.optimizers.schedules.ExponentialDecay(3e-3, 20_000, 0.96)
    return keras.optimizers.Adam(schedule)


def margin_schedule(model, args, steps_per_epoch):
    steps = max(1, args.epochs * steps_per_epoch // 2)
    return [SpreadLossMarginScheduler(model.spread_loss, start=0.2, end=0.9, steps=steps)]


def main(argv=None):
    return common.run(
        "smallnorb_matrix_capsnet",
        __doc__.split("\n")[2],
        build_model,
        load_data,
        make_optimizer,
        epochs=50,
        batch_size=32,
        argv=argv,
        add_arguments=add_arguments,
        callbacks=margin_schedule,
    )


if __name__ == "__main__":
    main()
