"""
Title: Heinsen routing on smallNORB
Description: Heinsen's smallNORB classifier (two Heinsen routings) on the full 96x96 stereo pairs, trained with `model.fit`.
Reference: Heinsen, "An Algorithm for Routing Capsules in All Domains", arXiv:1911.00792, 2019.

smallNORB (TFDS `smallnorb`): 5 toy categories photographed by a stereo
camera pair; both 96x96 images become the 2 channels of the input, in
[0, 1]. The model is `keras_capsules.models.HeinsenCapsNet()`, the author's
`SmallNORBClassifier(n_objs=5, n_parts=64, d_chns=64)`. The recipe follows
the author's notebook (`smallNORB_training.ipynb`, commit cd3420d) as
closely as Keras allows:

- batch 20, 50 epochs; training images randomly cropped to 96x96 after 16
  pixels of edge padding, then mixup with `Beta(0.2, 0.2)` inside each
  batch (soft labels); test images unchanged;
- loss: softmax cross-entropy on the scores (the model's default);
- learning rate: warm-up over the first 10 % of the steps to 5e-4, then a
  cosine decay to 1e-5 (the author's one-cycle schedule);
- optimiser: Adam (Keras has no RAdam, the author's): the warm-up does for
  Adam what RAdam's rectification does in its first steps.

`--parts` and `--channels` change the sizes (the tests use small ones).
The author's notebook trains on the whole training split and reports the
test split (99.1 % accuracy in the paper); `--validation-fraction 0` does
the same here (the default holds out 10 % for validation).

    KERAS_BACKEND=jax python examples/smallnorb_heinsen_capsnet.py --validation-fraction 0

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

Writes training_log.csv, metrics.json, model.keras and training curves to
--output-dir (default runs/smallnorb_heinsen_capsnet/<backend>).
"""

import common
import data
import keras  # noqa: F401  (before tensorflow, see common.py)

from keras_capsules.models import HeinsenCapsNet

PEAK_LEARNING_RATE, FINAL_LEARNING_RATE, WARMUP_FRACTION = 5e-4, 1e-5, 0.1


def add_arguments(parser):
    data.add_smallnorb_arguments(parser)
    parser.add_argument(
        "--parts", type=int, default=64, help="part capsules per position (author: 64)"
    )
    parser.add_argument(
        "--channels", type=int, default=64, help="channels of the convolutions (author: 64)"
    )


def build_model(args):
    return HeinsenCapsNet(
        (96, 96, 2), len(data.SMALLNORB_CLASSES), num_parts=args.parts, channels=args.channels
    )


def load_data(args, batch_size, drop_remainder=False):
    return data.smallnorb_splits(args, batch_size, drop_remainder, recipe="heinsen")


def make_optimizer(args, steps_per_epoch):
    steps = max(1, args.epochs * steps_per_epoch)
    warmup = int(WARMUP_FRACTION * steps)
    schedule = keras.optimizers.schedules.CosineDecay(
        FINAL_LEARNING_RATE,
        decay_steps=steps - warmup,
        alpha=FINAL_LEARNING_RATE / PEAK_LEARNING_RATE,
        warmup_target=PEAK_LEARNING_RATE,
        warmup_steps=warmup,
    )
    return keras.optimizers.Adam(schedule)


def main(argv=None):
    return common.run(
        "smallnorb_heinsen_capsnet",
        __doc__.split("\n")[2],
        build_model,
        load_data,
        make_optimizer,
        epochs=50,
        batch_size=20,
        routers=False,
        argv=argv,
        add_arguments=add_arguments,
    )


if __name__ == "__main__":
    main()
