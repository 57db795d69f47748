"""tf.data input pipelines for the examples (MNIST, smallNORB, CIFAR-10, Oxford-IIIT
Pets from TFDS; MultiMNIST and digit segmentation made from MNIST).

`model.fit` consumes these `tf.data.Dataset`s of `(image, label)` batches on
TensorFlow, PyTorch and JAX. Kept out of `keras_capsules`, which imports no
TensorFlow. `train_validation_splits` holds a share of a training split out
as validation data; `mock_data` is the fake TFDS of the `--smoke` runs.
"""

import contextlib
import functools
import glob
import logging
import math
import os
import socket
import types
import typing
import urllib.parse
import weakref

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

AUTOTUNE = tf.data.AUTOTUNE


class DatasetUnavailableError(RuntimeError):
    """The dataset is neither prepared in the data dir nor obtainable now.

    `reason` tells the causes apart: `"missing_module"` (a package TFDS
    needs is not installed), `"network"` (the download failed to connect)
    or `"not_prepared"` (not in the data dir and not downloaded).
    """

    def __init__(self, message, reason):
        super().__init__(message)
        self.reason = reason


# Import names whose pip package is called otherwise.
_PIP_NAMES = {
    "importlib_resources": "importlib-resources",
    "tree": "dm-tree",
    "array_record": "array-record",
    "google": "protobuf",
}


def _causes(error):
    while error is not None:
        yield error
        error = error.__cause__ or error.__context__


def _is_network_error(error):
    import requests  # a dependency of tensorflow-datasets

    return isinstance(
        error,
        (
            requests.exceptions.ConnectionError,
            requests.exceptions.Timeout,
            ConnectionError,
            TimeoutError,
            socket.gaierror,
        ),
    )


# What a machine without internet access can do for each dataset the
# examples read: its own preparation, else bringing the original files.
_OFFLINE = {
    "mnist": (
        "build it from Keras's mnist.npz, brought from a machine with internet "
        "access (`keras.datasets.mnist.load_data()` saves it to "
        "~/.keras/datasets/mnist.npz): `python examples/prepare_mnist_offline.py "
        "mnist.npz DIR`"
    ),
}


def offline_advice(name):
    """How to prepare TFDS dataset `name`, with and without internet access."""
    without = _OFFLINE.get(
        name.split(":")[0],
        "bring its original files from a machine that has it (`python "
        f"examples/prepare_tfds_offline.py {name} --list` prints their URLs) and "
        f"build it from them: `python examples/prepare_tfds_offline.py {name} DIR "
        "FILE...`",
    )
    return (
        f"To prepare it: with internet access, `tfds build {name} --data_dir DIR` "
        f"(then copy DIR to this machine if it is another one); without, {without}. "
        "Then set TFDS_DATA_DIR=DIR (or pass --data-dir DIR). To try a script "
        "without the data, run it with --smoke (a few random examples in the "
        "dataset's format)."
    )


def _unavailable(name, split, data_dir, error):
    where = data_dir or "~/tensorflow_datasets (set TFDS_DATA_DIR or --data-dir)"
    causes = list(_causes(error))
    missing = next((e for e in causes if isinstance(e, ImportError)), None)
    offline = offline_advice(name)
    if missing is not None:
        module = (missing.name or "").split(".")[0] or str(missing)
        package = _PIP_NAMES.get(module, module.replace("_", "-"))
        return DatasetUnavailableError(
            f"TFDS dataset {name!r} cannot be loaded: the Python module {module!r} that "
            f"tensorflow-datasets needs is not installed ({type(missing).__name__}: "
            f"{missing}). Install it with `pip install {package}` (or, in a checkout of "
            'keras-capsules, `pip install -e ".[tfds]"`).',
            "missing_module",
        )
    if any(_is_network_error(e) for e in causes):
        return DatasetUnavailableError(
            f"TFDS dataset {name!r} (split {split!r}) is not prepared in {where} and "
            f"cannot be downloaded: no network connection ({type(error).__name__}: "
            f"{error}). {offline}",
            "network",
        )
    return DatasetUnavailableError(
        f"TFDS dataset {name!r} (split {split!r}) is not prepared in {where} and "
        f"could not be downloaded ({type(error).__name__}: {error}). {offline}",
        "not_prepared",
    )


# Seconds to wait for a dataset's download server before giving up: TFDS
# itself retries a refused connection with back-off for minutes.
CONNECT_TIMEOUT = 3.0
# TFDS's mock (`tfds.testing.mock_data`, the --smoke runs) replaces this
# method with one that downloads nothing.
_DOWNLOAD_AND_PREPARE = vars(tfds.core.DatasetBuilder)["download_and_prepare"]


def _prepared(name, data_dir):
    """Whether some version of `name` is prepared in `data_dir` (or the
    default data dir). True for a remote data dir (`gs://...`): TFDS looks."""
    data_dir = data_dir or tfds.core.constants.get_default_data_dir()
    if "://" in str(data_dir):
        return True
    path = os.path.join(os.path.expanduser(data_dir), *name.split(":")[0].split("/"))
    # name/version/ or, with a default config, name/config/version/
    return any(glob.glob(os.path.join(path, *"*" * depth, "dataset_info.json")) for depth in (1, 2))


def _server(name):
    """The scheme and host TFDS downloads `name` from."""
    try:
        urls = list(tfds.builder_cls(name.split("/")[0].split(":")[0]).url_infos or ())
    except Exception:  # an unknown name: TFDS's own error follows
        urls = []
    parts = urllib.parse.urlsplit(urls[-1] if urls else "https://storage.googleapis.com")
    return f"{parts.scheme}://{parts.netloc}/"


def connection_error(name, timeout=CONNECT_TIMEOUT):
    """The error of one request, without retries, to the server of dataset
    `name` (`None` when it answers within `timeout` seconds, whatever its
    HTTP status). Honours the proxy variables, as TFDS does."""
    import requests  # a dependency of tensorflow-datasets

    url = _server(name)
    try:
        requests.head(url, timeout=timeout, allow_redirects=False)
    except requests.exceptions.RequestException as error:
        return ConnectionError(f"{url} cannot be reached (timeout {timeout:g} s): {error}")
    return None


def load_split(name, split, data_dir=None, download=True, read_whole=True):
    """`tfds.load(name, split=split)` as a dict dataset, with a clear error.

    A dataset that is not prepared in the data dir is downloaded (with
    `download`) only when its server answers within `CONNECT_TIMEOUT`
    seconds: without a network the `DatasetUnavailableError` comes in
    seconds, not after TFDS's minutes of retries, and says how to prepare
    the dataset offline.

    `read_whole=False`: for data that is read only in part each epoch
    (`--steps-per-epoch`). TFDS caches small datasets in memory as they are
    first read, and tf.data warns of a cache that is left unfinished; a
    split that is read in part is not cached.
    """
    data_dir = data_dir or os.environ.get("TFDS_DATA_DIR")
    read_config = None if read_whole else tfds.ReadConfig(try_autocache=False)
    mocked = vars(tfds.core.DatasetBuilder)["download_and_prepare"] is not _DOWNLOAD_AND_PREPARE
    if download and not mocked and not _prepared(name, data_dir):
        error = connection_error(name)
        if error is not None:
            raise _unavailable(name, split, data_dir, error) from error
    try:
        return tfds.load(
            name, split=split, data_dir=data_dir, download=download, read_config=read_config
        )
    except Exception as error:  # TFDS raises many types (network, not found).
        raise _unavailable(name, split, data_dir, error) from error


def train_validation_splits(fraction, split="train"):
    """TFDS split strings of a training split and of its validation share.

    The last `fraction` of `split` is the validation data, the rest trains:
    `train_validation_splits(0.1)` is `("train[:90%]", "train[90%:]")`.
    Both slices end at the same boundary, so TFDS gives them disjoint
    examples that together make up the whole split (it rounds the
    boundary to the closest example). `fraction=0`: `(split, None)`, no
    validation.
    """
    if not 0 <= fraction < 1:
        raise ValueError(f"fraction must be in [0, 1). Received: fraction={fraction}")
    if fraction == 0:
        return split, None
    boundary = f"{100 * (1 - fraction):.10g}%"
    return f"{split}[:{boundary}]", f"{split}[{boundary}:]"


class _EverySplit(dict):
    """Split infos that give every split name `num_examples` examples."""

    def __init__(self, num_examples):
        super().__init__()
        self.num_examples = num_examples

    def __contains__(self, name):
        return True

    def __getitem__(self, name):
        return types.SimpleNamespace(
            num_examples=self.num_examples, shard_lengths=[self.num_examples]
        )


def _slices(ds, split, num_examples):
    """The examples of `split` (`"train[:90%]"`, ...) in `ds`, one split of `num_examples`."""
    parts = []
    for part in tfds.core.ReadInstruction.from_spec(split).to_absolute(_EverySplit(num_examples)):
        start, stop = part.from_ or 0, num_examples if part.to is None else part.to
        parts.append(ds.skip(start).take(stop - start))
    return functools.reduce(lambda a, b: a.concatenate(b), parts)


def _fake_feature(feature, count, rng):
    """`count` random values of one TFDS feature, as its decoded tensors."""
    if isinstance(feature, tfds.features.FeaturesDict):
        return {key: _fake_feature(value, count, rng) for key, value in feature.items()}
    shape = (count, *(8 if size is None else size for size in feature.shape))
    dtype = tf.as_dtype(feature.tf_dtype)
    if isinstance(feature, tfds.features.ClassLabel):
        return rng.integers(0, feature.num_classes, shape).astype(dtype.as_numpy_dtype)
    if dtype == tf.string:
        return np.full(shape, b"fake", object)
    if dtype == tf.bool:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.is_integer:
        high = 256 if dtype == tf.uint8 else 10
        return rng.integers(0, high, shape).astype(dtype.as_numpy_dtype)
    return rng.uniform(size=shape).astype(dtype.as_numpy_dtype)


@contextlib.contextmanager
def mock_data(num_examples, seed=0):
    """`tfds.testing.mock_data` in which split slices select their own examples.

    TFDS's mock gives the same `num_examples` fake examples for every split
    string, so `"train[:90%]"` and `"train[90%:]"` would be the same
    examples. Here every split has `num_examples` random examples of the
    dataset's features, and a slice reads its part of them, the part
    TFDS's own split arithmetic gives
    (`tfds.core.ReadInstruction.from_spec(split).to_absolute(...)`, as when
    it reads a prepared dataset), so a mocked training slice and its
    validation slice are disjoint as they are on real data. The fake
    examples are the same in every split: `"test"` repeats `"train"`.
    """

    def sliced(builder, split, **kwargs):
        examples = _fake_feature(builder.info.features, num_examples, np.random.default_rng(seed))
        ds = tf.data.Dataset.from_tensor_slices(examples)
        return _slices(ds, split, num_examples)

    # The builders' code gives the features: no metadata files to look for.
    with (
        tfds.testing.mock_data(
            num_examples=num_examples,
            as_dataset_fn=sliced,
            policy=tfds.testing.MockPolicy.USE_CODE,
        ),
        _quiet_mock_data_dir(),
    ):
        yield


class _MockDataDirFilter(logging.Filter):
    """Drops TFDS's warning that a version folder has no metadata when the
    folder does not exist: the mock's made-up data dir, looked up on every
    load."""

    def filter(self, record):
        if record.msg != "Variant folder %s has no %s" or not record.args:
            return True
        return os.path.exists(str(record.args[0]))


@contextlib.contextmanager
def _quiet_mock_data_dir():
    logger, quiet = logging.getLogger("absl"), _MockDataDirFilter()  # TFDS logs through absl
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


class EpochOrder(typing.NamedTuple):
    """Which training epochs a loader yields, and the seed they come from.

    Epoch `e`'s order and random augmentation are a function of `(seed,
    e)` alone (stateless random ops), not of the process's random state:
    a run resumed at epoch `e` sees the same batches as one that never
    stopped. `epochs`: how many epochs from `first_epoch`, in sequence;
    `steps_per_epoch`: the first batches of each (default: all).
    """

    seed: int
    first_epoch: int = 0
    epochs: int = 1
    steps_per_epoch: int | None = None


def epoch_order(args):
    """The `EpochOrder` that `common.run` puts on `args` (`None` without it:
    epoch 0 of a fresh seed)."""
    return getattr(args, "epoch_order", None)


def reads_whole_epochs(training, order):
    """Whether a loader reads its whole split (not only `steps_per_epoch`
    batches of the training epochs of `order`)."""
    return not training or order is None or order.steps_per_epoch is None


def fresh_seed():
    """A seed from TensorFlow's global random state (which
    `keras.utils.set_random_seed` sets): a different one in each unseeded run."""
    return int(tf.random.uniform((), 0, 2**31 - 1, tf.int64))


def epoch_key(seed, epoch):
    """The stateless key `(2,) int64` of one training epoch."""
    return tf.stack([tf.cast(seed, tf.int64), tf.cast(epoch, tf.int64)])


def stream(key, k):
    """Independent stateless key number `k` of `key`."""
    return tf.random.experimental.stateless_fold_in(key, k)


def _shuffled(ds, buffer_size, key):
    """`ds.shuffle(buffer_size, reshuffle_each_iteration=False)` in the order
    of the stateless `key` (a tensor: the epoch's).

    The shuffle op itself, as `Dataset.shuffle` builds it: that method's
    seed handling compares a tensor seed with 0 in Python when the global
    seed is 0, which fails inside `flat_map`.
    """
    seeds = tf.random.stateless_uniform((2,), key, 0, 2**31 - 1, tf.int64)
    spec = ds.element_spec
    components = tf.nest.flatten(spec)
    variant = tf.raw_ops.ShuffleDataset(
        input_dataset=tf.data.experimental.to_variant(ds),
        buffer_size=tf.constant(buffer_size, tf.int64),
        seed=seeds[0],
        seed2=seeds[1],
        reshuffle_each_iteration=False,
        output_types=[c.dtype for c in components],
        output_shapes=[c.shape for c in components],
    )
    return tf.data.experimental.from_variant(variant, spec)


def training_batches(
    ds,
    batch_size,
    order=None,
    augment=None,
    batch_augment=None,
    shuffle_buffer=10_000,
    drop_remainder=False,
):
    """Shuffled, augmented training batches of the epochs of `order`.

    ds: the examples, in a fixed order. Each epoch shuffles them
    (`shuffle_buffer`), maps `augment(example, key)` over them with a
    stateless key per example, batches them and maps `batch_augment(batch,
    key)` over the batches, every key a function of the epoch's
    `epoch_key` and the position: an epoch is the same whether a run
    reaches it or resumes at it, and whatever the order in which parallel
    map calls run. `order`: an `EpochOrder` (default: epoch 0 of
    `fresh_seed()`). The epochs follow each other in one dataset whose
    cardinality is known (`epochs x batches per epoch`; counted once when
    a filter hides it).
    """
    order = order or EpochOrder(fresh_seed())

    def epoch(e):
        key = epoch_key(order.seed, e)
        batches = _shuffled(ds, shuffle_buffer, stream(key, 0))
        if augment is not None:
            example_key = stream(key, 1)
            batches = batches.enumerate().map(
                lambda i, example: augment(example, stream(example_key, i)), AUTOTUNE
            )
        batches = batches.batch(batch_size, drop_remainder=drop_remainder)
        if batch_augment is not None:
            batch_key = stream(key, 2)
            batches = batches.enumerate().map(
                lambda i, batch: batch_augment(batch, stream(batch_key, i)), AUTOTUNE
            )
        if order.steps_per_epoch is not None:
            batches = batches.take(order.steps_per_epoch)
        return batches

    first = epoch(tf.constant(order.first_epoch, tf.int64))
    if order.epochs == 1:
        return first.prefetch(AUTOTUNE)
    per_epoch = int(first.cardinality())
    if per_epoch < 0:  # unknown (a filter): count one epoch
        per_epoch = int(first.reduce(np.int64(0), lambda n, _: n + 1))
    epochs = tf.data.Dataset.range(order.first_epoch, order.first_epoch + order.epochs)
    batches = epochs.flat_map(epoch).apply(
        tf.data.experimental.assert_cardinality(order.epochs * per_epoch)
    )
    batches = batches.prefetch(AUTOTUNE)
    _BATCHES_PER_EPOCH[batches] = per_epoch
    return batches


# The datasets of several epochs that training_batches made: batches per epoch.
_BATCHES_PER_EPOCH = weakref.WeakKeyDictionary()


def batches_per_epoch(dataset):
    """The batches of each epoch of a `training_batches` dataset of several
    epochs (`fit`'s `steps_per_epoch` for it); `None` for other datasets."""
    try:
        return _BATCHES_PER_EPOCH.get(dataset)
    except TypeError:  # not weakly referable: not one of ours
        return None


def _evaluation_batches(ds, batch_size, drop_remainder=False):
    """Validation and test batches: in order, as they are."""
    return ds.batch(batch_size, drop_remainder=drop_remainder).prefetch(AUTOTUNE)


# ----------------------------------------------------------------- MNIST


# The random changes below are stateless: `key` (a `(2,)` int seed, see
# `training_batches`) fixes each draw.


def random_shift(image, key, max_shift=2):
    """Shifts by up to `max_shift` pixels each way, filling with zeros (Sabour et al.)."""
    height, width, channels = image.shape
    padded = tf.pad(image, [[max_shift] * 2, [max_shift] * 2, [0, 0]])
    return tf.image.stateless_random_crop(padded, (height, width, channels), key)


def random_rotate(image, key, max_degrees=30.0):
    """Rotation about the centre by `max_degrees * clip(N(0, 0.33), +-1)`.

    The angle distribution of the Efficient-CapsNet code
    (`image_rotate_random`); bilinear, zero fill.
    """
    angle = tf.clip_by_value(tf.random.stateless_normal((), key, 0.0, 0.33), -0.9999, 0.9999)
    angle = angle * max_degrees * math.pi / 180.0
    height, width = float(image.shape[0]), float(image.shape[1])
    cos, sin = tf.cos(angle), tf.sin(angle)
    # Output pixel (x, y) samples input (a0 x + a1 y + a2, b0 x + b1 y + b2).
    cx, cy = (width - 1) / 2.0, (height - 1) / 2.0
    transform = tf.stack(
        [
            cos,
            -sin,
            cx - cos * cx + sin * cy,
            sin,
            cos,
            cy - sin * cx - cos * cy,
            0.0,
            0.0,
        ]
    )
    rotated = tf.raw_ops.ImageProjectiveTransformV3(
        images=image[None],
        transforms=transform[None],
        output_shape=tf.constant([int(image.shape[0]), int(image.shape[1])], tf.int32),
        fill_value=0.0,
        interpolation="BILINEAR",
        fill_mode="CONSTANT",
    )
    return tf.ensure_shape(rotated[0], image.shape)


def random_erase(image, key, size=4):
    """Zeroes one random `size x size` patch (Efficient-CapsNet `image_erase_random`)."""
    height, width, _ = image.shape
    top = tf.random.stateless_uniform((), stream(key, 0), 0, height - size + 1, tf.int32)
    left = tf.random.stateless_uniform((), stream(key, 1), 0, width - size + 1, tf.int32)
    rows = tf.range(height)[:, None, None]
    cols = tf.range(width)[None, :, None]
    patch = (rows >= top) & (rows < top + size) & (cols >= left) & (cols < left + size)
    return tf.where(patch, tf.zeros_like(image), image)


def _mnist_image(example):
    return tf.cast(example["image"], tf.float32) / 255.0, example["label"]


def _capsnet_augment(example, key):
    image, label = example
    return random_shift(image, key), label


def _efficient_capsnet_augment(example, key):
    image, label = example
    image = random_rotate(image, stream(key, 0))
    return random_erase(random_shift(image, stream(key, 1)), stream(key, 2)), label


MNIST_AUGMENTATIONS = {
    None: None,
    "capsnet": _capsnet_augment,
    "efficient_capsnet": _efficient_capsnet_augment,
}


def mnist(
    split,
    batch_size,
    augment=None,
    data_dir=None,
    download=True,
    shuffle_buffer=10_000,
    drop_remainder=False,
    shuffle=None,
    order=None,
):
    """MNIST `(image in [0, 1], integer label)` batches.

    split: a TFDS split, slices too (`"train[:4096]"`, `"train[:90%]"`).
    augment: `None`, `"capsnet"` (random shift up to 2 px, Sabour et al.)
    or `"efficient_capsnet"` (random rotation, shift up to 2 px and a
    random 4x4 erase, after Mazzia et al.'s code). Only for training data:
    validation and test data take `None`.
    shuffle: shuffle each epoch (default: when augmenting, i.e. training).
    order: the training epochs (`EpochOrder`, see `training_batches`).
    """
    if augment not in MNIST_AUGMENTATIONS:
        raise ValueError(f"Unknown MNIST augmentation. Received: augment={augment!r}")
    training = augment is not None if shuffle is None else shuffle
    ds = load_split("mnist", split, data_dir, download, reads_whole_epochs(training, order))
    ds = ds.map(_mnist_image, AUTOTUNE)
    if not training:
        return _evaluation_batches(ds, batch_size, drop_remainder)
    return training_batches(
        ds,
        batch_size,
        order,
        augment=MNIST_AUGMENTATIONS[augment],
        shuffle_buffer=shuffle_buffer,
        drop_remainder=drop_remainder,
    )


def mnist_splits(args, batch_size, drop_remainder=False, augment=None):
    """The MNIST examples' `load_data`: (train, validation, test) batches.

    The training data, augmented by `augment` (see `mnist`), in the epochs
    of `args.epoch_order`; the validation data, the last
    `args.validation_fraction` of the training split (`None` at 0), and the
    test data as they are, in order.
    """
    train_split, validation_split = train_validation_splits(args.validation_fraction)

    def load(split, training):
        return mnist(
            split,
            batch_size,
            augment if training else None,
            args.data_dir,
            drop_remainder=drop_remainder,
            order=epoch_order(args) if training else None,
        )

    validation = None if validation_split is None else load(validation_split, False)
    return load(train_split, True), validation, load("test", False)


# ------------------------------------------------------------- smallNORB

SMALLNORB_CLASSES = ("animal", "human", "airplane", "truck", "car")


def _smallnorb_pair(example):
    """Both stereo images as 2 channels, resized to 48x48, in [0, 1]."""
    stereo = tf.concat([example["image"], example["image2"]], axis=-1)
    stereo = tf.image.resize(tf.cast(stereo, tf.float32) / 255.0, (48, 48))
    return stereo, example["label_category"]


def _smallnorb_train(example, key):
    image, label = example
    image = tf.image.stateless_random_crop(image, (32, 32, 2), stream(key, 0))
    image = tf.image.stateless_random_brightness(image, 32.0 / 255.0, stream(key, 1))
    image = tf.image.stateless_random_contrast(image, 0.5, 1.5, stream(key, 2))
    return tf.image.per_image_standardization(image), label


def _smallnorb_test(image, label):
    image = tf.image.crop_to_bounding_box(image, 8, 8, 32, 32)
    return tf.image.per_image_standardization(image), label


# Mazzia et al.'s recipe (EscVM/Efficient-CapsNet, utils/pre_process_smallnorb.py):
# each 96x96 channel standardised, resized to 64x64; a random 48x48 crop,
# random brightness (max_delta 2.0) and contrast (0.5-1.5) for training,
# the centre crop for testing.
EFFICIENT_CAPSNET_SCALE, EFFICIENT_CAPSNET_PATCH = 64, 48


def _efficient_capsnet_pair(example):
    """Both stereo images as 2 channels, each standardised, resized to 64x64."""
    stereo = tf.cast(tf.concat([example["image"], example["image2"]], axis=-1), tf.float32)
    mean, variance = tf.nn.moments(stereo, axes=(0, 1), keepdims=True)
    # The floor only keeps a constant (mock) image finite.
    stereo = (stereo - mean) / tf.maximum(tf.sqrt(variance), 1e-6)
    size = (EFFICIENT_CAPSNET_SCALE, EFFICIENT_CAPSNET_SCALE)
    return tf.image.resize(stereo, size), example["label_category"]


def _efficient_capsnet_train(example, key):
    image, label = example
    patch = EFFICIENT_CAPSNET_PATCH
    image = tf.image.stateless_random_crop(image, (patch, patch, 2), stream(key, 0))
    image = tf.image.stateless_random_brightness(image, 2.0, stream(key, 1))
    return tf.image.stateless_random_contrast(image, 0.5, 1.5, stream(key, 2)), label


def _efficient_capsnet_test(image, label):
    offset = (EFFICIENT_CAPSNET_SCALE - EFFICIENT_CAPSNET_PATCH) // 2
    patch = EFFICIENT_CAPSNET_PATCH
    return tf.image.crop_to_bounding_box(image, offset, offset, patch, patch), label


# Heinsen (2019): the full 96x96 stereo pairs in [0, 1]; for training a
# random 96x96 crop of the pair padded by 16 edge pixels, and mixup.
HEINSEN_PADDING = 16


def _smallnorb_full_pair(example):
    """Both stereo images as 2 channels, 96x96, in [0, 1]."""
    stereo = tf.concat([example["image"], example["image2"]], axis=-1)
    return tf.cast(stereo, tf.float32) / 255.0, example["label_category"]


def edge_pad(image, padding):
    """`image (H, W, C)` padded by `padding` pixels on each side with copies
    of its edge pixels (torchvision's `padding_mode="edge"`)."""
    height, width = tf.shape(image)[0], tf.shape(image)[1]
    rows = tf.clip_by_value(tf.range(-padding, height + padding), 0, height - 1)
    cols = tf.clip_by_value(tf.range(-padding, width + padding), 0, width - 1)
    return tf.gather(tf.gather(image, rows, axis=0), cols, axis=1)


def _heinsen_crop(example, key):
    image, label = example
    shape = tf.shape(image)
    padded = edge_pad(image, HEINSEN_PADDING)
    return tf.image.stateless_random_crop(padded, shape, key), label


def mixup(images, labels, num_classes, key, alpha=(0.2, 0.2)):
    """Mixup within a batch: each example is mixed with a random partner of
    the same batch, `r ~ Beta(alpha)` per example: `lerp(x, x[perm], r)`,
    and the one-hot labels alike (Heinsen's training loop). `key`: the
    stateless seed of the draws."""
    batch = tf.shape(images)[0]
    x = tf.random.stateless_gamma((batch,), stream(key, 0), alpha[0])
    y = tf.random.stateless_gamma((batch,), stream(key, 1), alpha[1])
    r = x / (x + y)
    perm = tf.argsort(tf.random.stateless_uniform((batch,), stream(key, 2)))
    targets = tf.one_hot(labels, num_classes)
    mixed = images + (tf.gather(images, perm) - images) * r[:, None, None, None]
    targets = targets + (tf.gather(targets, perm) - targets) * r[:, None]
    return mixed, targets


def _heinsen_test(image, label):
    return image, label


def _heinsen_mixup(batch, key):
    images, labels = batch
    return mixup(images, labels, len(SMALLNORB_CLASSES), key, (0.2, 0.2))


SMALLNORB_RECIPES = {
    # recipe -> (per example, training, test, per training batch)
    "hinton": (_smallnorb_pair, _smallnorb_train, _smallnorb_test, None),
    "efficient_capsnet": (
        _efficient_capsnet_pair,
        _efficient_capsnet_train,
        _efficient_capsnet_test,
        None,
    ),
    "heinsen": (_smallnorb_full_pair, _heinsen_crop, _heinsen_test, _heinsen_mixup),
}


def smallnorb(
    split,
    batch_size,
    training=None,
    data_dir=None,
    download=True,
    shuffle_buffer=10_000,
    drop_remainder=False,
    recipe="hinton",
    viewpoints=None,
    order=None,
):
    """smallNORB `(stereo image, category)` batches, each paper's way.

    `recipe="hinton"`, 32x32x2 (Hinton et al., 2018): 48x48, then a
    random 32x32 crop with random brightness and contrast for training,
    the centre crop for testing, per-image standardisation.
    `recipe="efficient_capsnet"`, 48x48x2 (Mazzia et al., 2021): each
    channel standardised per image, 64x64, then a random 48x48 crop with
    random brightness (max_delta 2.0) and contrast (0.5-1.5) for
    training, the centre crop for testing.
    `recipe="heinsen"`, 96x96x2 in [0, 1] (Heinsen, 2019): the whole pair;
    for training a random 96x96 crop after 16 pixels of edge padding and,
    per batch, mixup with `Beta(0.2, 0.2)` (the labels then soft one-hot).
    `training` (the random changes, shuffled) defaults to
    `split == "train"`; pass it for slices. `viewpoints`: `None` (every
    image), or `(split, familiar)` of a `SMALLNORB_VIEWPOINT_SPLITS` key
    and a bool: only the images of that split's training viewpoints
    (`familiar=True`) or only the others (see `viewpoint_filter`).
    `order`: the training epochs (`EpochOrder`, see `training_batches`).
    """
    if recipe not in SMALLNORB_RECIPES:
        raise ValueError(
            f"Unknown smallNORB recipe: expected one of {sorted(SMALLNORB_RECIPES)}. "
            f"Received: recipe={recipe!r}"
        )
    pair, train, test, train_batch = SMALLNORB_RECIPES[recipe]
    training = split == "train" if training is None else training
    ds = load_split("smallnorb", split, data_dir, download, reads_whole_epochs(training, order))
    if viewpoints is not None:
        ds = ds.filter(viewpoint_filter(*viewpoints))
    ds = ds.map(pair, AUTOTUNE)
    if not training:
        return _evaluation_batches(ds.map(test, AUTOTUNE), batch_size, drop_remainder)
    return training_batches(
        ds,
        batch_size,
        order,
        augment=train,
        batch_augment=train_batch,
        shuffle_buffer=shuffle_buffer,
        drop_remainder=drop_remainder,
    )


# Hinton, Sabour & Frosst (2018), section 5 ("Generalization to novel
# viewpoints"): train on the images of some viewpoints only, test on the
# images of the others. TFDS's labels: azimuth `a` is 20 a degrees (0-340),
# elevation `e` is 30 + 5 e degrees (30-70).
SMALLNORB_VIEWPOINT_SPLITS = {
    # Azimuths 300, 320, 340, 0, 20 and 40 degrees train; 60-280 are novel.
    "azimuth": ("label_azimuth", (15, 16, 17, 0, 1, 2)),
    # The 3 smallest elevations (30, 35, 40 degrees) train; 45-70 are novel.
    "elevation": ("label_elevation", (0, 1, 2)),
}
SMALLNORB_SPLITS = ("standard", *SMALLNORB_VIEWPOINT_SPLITS)


def viewpoint_filter(split, familiar):
    """A `tf.data` predicate on TFDS smallNORB examples: `True` for the
    images of `split`'s training viewpoints (`familiar=True`) or for the
    others (`familiar=False`). `split`: a `SMALLNORB_VIEWPOINT_SPLITS` key."""
    if split not in SMALLNORB_VIEWPOINT_SPLITS:
        raise ValueError(
            f"Unknown viewpoint split: expected one of {sorted(SMALLNORB_VIEWPOINT_SPLITS)}. "
            f"Received: split={split!r}"
        )
    feature, training_labels = SMALLNORB_VIEWPOINT_SPLITS[split]
    training_labels = tf.constant(training_labels, tf.int64)

    def predicate(example):
        label = tf.cast(example[feature], tf.int64)
        return tf.reduce_any(tf.equal(label, training_labels)) == familiar

    return predicate


def add_smallnorb_arguments(parser):
    """The smallNORB examples' `--split`."""
    parser.add_argument(
        "--split",
        choices=SMALLNORB_SPLITS,
        default="standard",
        help="standard: every training image, tested on every test image; "
        "azimuth / elevation: Hinton et al. (2018)'s novel-viewpoint splits, "
        "trained on the images of azimuths 300-40 degrees / of the 3 smallest "
        "elevations only and tested separately on the test images of those "
        "familiar viewpoints (test_accuracy) and of the novel ones "
        "(test_novel_viewpoints_accuracy)",
    )


def smallnorb_splits(args, batch_size, drop_remainder=False, recipe="hinton"):
    """The examples' `load_data` for smallNORB: (train, validation, test) batches.

    The validation data, the last `args.validation_fraction` of the
    training split (`None` at 0), is prepared like the test data (centre
    crop, no shuffle). `recipe`: as for `smallnorb`. With `args.split`
    `"azimuth"` or `"elevation"`, training and validation keep the images
    of the split's training viewpoints, and `test` is a dict of two test
    sets, `"familiar_viewpoints"` (those viewpoints) and
    `"novel_viewpoints"` (the others).
    """
    train_split, validation_split = train_validation_splits(args.validation_fraction)
    viewpoint_split = getattr(args, "split", "standard")
    viewpoints = None if viewpoint_split == "standard" else viewpoint_split
    args.extra_metrics = {**getattr(args, "extra_metrics", {}), "split": viewpoint_split}

    def load(split, training, familiar=True):
        return smallnorb(
            split,
            batch_size,
            training,
            args.data_dir,
            drop_remainder=drop_remainder,
            recipe=recipe,
            viewpoints=None if viewpoints is None else (viewpoints, familiar),
            order=epoch_order(args) if training else None,
        )

    validation = None if validation_split is None else load(validation_split, False)
    if viewpoints is None:
        test = load("test", False)
    else:
        test = {
            "familiar_viewpoints": load("test", False, familiar=True),
            "novel_viewpoints": load("test", False, familiar=False),
        }
    return load(train_split, True), validation, test


# ------------------------------------------------------------- MultiMNIST

MULTIMNIST_SIZE = 36  # 28 + 2 x 4: each digit shifted up to 4 px each way


def _all_examples(name, split, data_dir, download):
    """A whole (small) TFDS split as `(uint8 images, int32 labels)` tensors."""
    ds = load_split(name, split, data_dir, download)
    images, labels = [], []
    for batch in ds.batch(10_000):
        images.append(batch["image"])
        labels.append(tf.cast(batch["label"], tf.int32))
    return tf.concat(images, 0), tf.concat(labels, 0)


def overlay_pair(first, second, offsets, size=MULTIMNIST_SIZE):
    """Places two `(h, w, 1)` float digits on a `size x size` canvas.

    offsets: int `(2, 2)`, the (top, left) corner of each digit, in
    `[0, size - h]`; the canvas is the clipped sum of the two. Returns
    `(merged (size, size, 1), digits (2, size, size, 1))`, the digits as
    placed, which are the reconstruction targets.
    """
    digits = tf.stack(
        [
            tf.image.pad_to_bounding_box(image, offsets[k, 0], offsets[k, 1], size, size)
            for k, image in enumerate((first, second))
        ]
    )
    return tf.minimum(digits[0] + digits[1], 1.0), digits


def multimnist(
    split,
    batch_size,
    data_dir=None,
    download=True,
    max_shift=4,
    seed=None,
    drop_remainder=False,
    shuffle_buffer=10_000,
    order=None,
):
    """MultiMNIST (Sabour et al. 2017, sec. 6), generated on the fly from MNIST.

    Each MNIST image of `split` is paired with a random image of another
    class; both are shifted by up to `max_shift` px each way on a
    `(28 + 2 max_shift)`-square canvas (36x36) and summed (clipped to 1).
    Yields `(merged, {"labels": (batch, 2) int32, "images": (batch, 2,
    36, 36, 1)})`: the two classes and each digit alone on the canvas.

    Training (`seed=None`): new partners and shifts each epoch, in a new
    order, those of `order` (an `EpochOrder`, see `training_batches`).
    With an integer `seed` the pairs and shifts are a fixed function of
    the seed and the image index (stateless RNG), in order, so a test set
    is the same in every run, whatever the global seed.
    """
    images, labels = _all_examples("mnist", split, data_dir, download)
    count = int(labels.shape[0])
    size = 28 + 2 * max_shift
    # Indices sorted by class: the images of another class than l are the
    # positions outside [start[l], start[l] + per_class[l]).
    by_class = tf.argsort(labels, stable=True)
    per_class = tf.math.bincount(labels, minlength=10, dtype=tf.int32)
    start = tf.cumsum(per_class, exclusive=True)

    def make(index, key, offsets_key):
        label = labels[index]
        r = tf.random.stateless_uniform(
            (), key, 0, tf.maximum(count - per_class[label], 1), tf.int32
        )
        partner = by_class[tf.where(r < start[label], r, r + per_class[label])]
        offsets = tf.random.stateless_uniform((2, 2), offsets_key, 0, 2 * max_shift + 1, tf.int32)
        first = tf.cast(images[index], tf.float32) / 255.0
        second = tf.cast(images[partner], tf.float32) / 255.0
        merged, digits = overlay_pair(first, second, offsets, size)
        return merged, {"labels": tf.stack([label, labels[partner]]), "images": digits}

    if int(tf.reduce_max(per_class)) == count:
        raise ValueError(f"MultiMNIST needs two classes in MNIST {split!r}; it has one.")
    ds = tf.data.Dataset.range(count).map(lambda i: tf.cast(i, tf.int32))
    if seed is None:
        return training_batches(
            ds,
            batch_size,
            order,
            augment=lambda i, key: make(i, stream(key, 0), stream(key, 1)),
            shuffle_buffer=min(shuffle_buffer, count),
            drop_remainder=drop_remainder,
        )
    # The test sets' draws, as they were: keys (seed, i) and (seed, i + count).
    ds = ds.map(lambda i: make(i, tf.stack([seed, i]), tf.stack([seed, i + count])), AUTOTUNE)
    return ds.batch(batch_size, drop_remainder=drop_remainder).prefetch(AUTOTUNE)


# ------------------------------------------------------------ segmentation

DIGIT_CANVAS_SIZE = 64
DIGIT_SIZE = 28
NOISE_TYPES = ("uniform", "gaussian")


def place_digits(digits, offsets, keep, canvas_size):
    """`digits (k, 28, 28, 1)` float placed on one `canvas_size` square.

    offsets: int `(k, 2)`, each digit's (top, left) corner in
    `[0, canvas_size - 28]`; keep: bool `(k,)`, the digits drawn (the
    others are left out). Overlapping digits combine by their maximum.
    Vectorised over the digits (gathers, no loop). Returns
    `(canvas_size, canvas_size, 1)`.
    """
    size = digits.shape[1]
    positions = tf.range(canvas_size)[None, :]
    rows = positions - offsets[:, :1]  # (k, S): the digit row at each canvas row
    cols = positions - offsets[:, 1:]
    placed = tf.gather(digits[..., 0], tf.clip_by_value(rows, 0, size - 1), axis=1, batch_dims=1)
    placed = tf.gather(placed, tf.clip_by_value(cols, 0, size - 1), axis=2, batch_dims=1)
    inside = (
        ((rows >= 0) & (rows < size))[:, :, None]
        & ((cols >= 0) & (cols < size))[:, None, :]
        & keep[:, None, None]
    )
    canvas = tf.reduce_max(tf.where(inside, placed, tf.zeros_like(placed)), axis=0)
    return canvas[..., None]


def digit_canvases(
    split,
    batch_size,
    data_dir=None,
    canvas_size=DIGIT_CANVAS_SIZE,
    max_digits=3,
    noise=0.1,
    training=True,
    seed=0,
    download=True,
    num_examples=None,
    shuffle_buffer=10_000,
    drop_remainder=False,
    noise_type="uniform",
    order=None,
):
    """Segmentation of MNIST digits on a noisy canvas, made on the fly.

    Canvas `i` holds MNIST image `i` of `split` (slices too; cycling
    through the split when `num_examples` exceeds it) and up to
    `max_digits - 1` other random digits of the split: 1 to `max_digits`
    digits in all, uniformly, each 28x28 at a random place on a
    `canvas_size` square. Digits may overlap: the canvas is their maximum.
    The mask is the digits' pixels, those above 0.5 before the noise.
    Then noise of amplitude `noise`: `noise_type="uniform"` adds
    `U(0, noise)`, `"gaussian"` adds `N(0, noise**2)`; the image is
    clipped to [0, 1]. `noise=0`: none.

    Yields `(images (batch, s, s, 1) float32 in [0, 1], masks (batch, s,
    s, 1) float32 of 0/1)`; `num_examples` canvases per pass (default: one
    per image of the split).

    `training=False` (validation and test data): canvas `i` is a fixed
    function of `seed` and `i` (stateless RNG), in order, the same in
    every pass and every run whatever the global seed.
    `training=True`: new digits, places and noise each pass, in an order
    shuffled each pass: the epochs of `order` (an `EpochOrder`, see
    `training_batches`; without it, epoch 0 of `seed`, or with `seed=None`
    of a seed from TensorFlow's global seed, which
    `keras.utils.set_random_seed` sets).
    """
    if canvas_size < DIGIT_SIZE:
        raise ValueError(
            f"canvas_size must be at least {DIGIT_SIZE}. Received: canvas_size={canvas_size}"
        )
    if max_digits < 1:
        raise ValueError(f"max_digits must be at least 1. Received: max_digits={max_digits}")
    if noise_type not in NOISE_TYPES:
        raise ValueError(
            f"noise_type must be one of {NOISE_TYPES}. Received: noise_type={noise_type!r}"
        )
    if seed is None and not training:
        raise ValueError("Evaluation canvases need an integer seed. Received: seed=None")
    images, _ = _all_examples("mnist", split, data_dir, download)  # uint8 (n, 28, 28, 1)
    count = int(images.shape[0])
    total = count if num_examples is None else int(num_examples)
    if count == 0 or total < 1:
        raise ValueError(f"No canvases: MNIST {split!r} has {count} images, {total} asked for.")

    def make(index, key):
        # Independent streams of one example's key.
        def stream(k):
            return tf.random.experimental.stateless_fold_in(key, k)

        digits = tf.random.stateless_uniform((), stream(0), 1, max_digits + 1, tf.int32)
        others = tf.random.stateless_uniform((max_digits - 1,), stream(1), 0, count, tf.int32)
        chosen = tf.concat([[index % count], others], axis=0)
        offsets = tf.random.stateless_uniform(
            (max_digits, 2), stream(2), 0, canvas_size - DIGIT_SIZE + 1, tf.int32
        )
        placed = tf.cast(tf.gather(images, chosen), tf.float32) / 255.0
        keep = tf.range(max_digits) < digits
        canvas = place_digits(placed, offsets, keep, canvas_size)
        mask = tf.cast(canvas > 0.5, tf.float32)
        if noise > 0:
            if noise_type == "uniform":
                grain = tf.random.stateless_uniform(canvas.shape, stream(3), 0.0, noise)
            else:
                grain = noise * tf.random.stateless_normal(canvas.shape, stream(3))
            canvas = tf.clip_by_value(canvas + grain, 0.0, 1.0)
        return canvas, mask

    indices = tf.data.Dataset.range(total)
    if training:
        return training_batches(
            indices,
            batch_size,
            order or (None if seed is None else EpochOrder(seed)),
            augment=lambda i, key: make(tf.cast(i, tf.int32), key),
            shuffle_buffer=min(shuffle_buffer, total),
            drop_remainder=drop_remainder,
        )
    ds = indices.map(
        lambda i: make(tf.cast(i, tf.int32), tf.stack([tf.constant(seed, tf.int64), i])), AUTOTUNE
    )
    return ds.batch(batch_size, drop_remainder=drop_remainder).prefetch(AUTOTUNE)


OXFORD_PETS_TRIMAP = {"pet": 1, "background": 2, "border": 3}


def _pet_and_mask(image_size):
    size = (image_size, image_size)

    def convert(example):
        image = tf.cast(example["image"], tf.float32) / 255.0
        # Antialiased when shrinking (the photos are about 500 px).
        image = tf.clip_by_value(tf.image.resize(image, size, "bilinear", antialias=True), 0, 1)
        trimap = tf.image.resize(example["segmentation_mask"], size, "nearest")
        return image, tf.cast(trimap == OXFORD_PETS_TRIMAP["pet"], tf.float32)

    return convert


def _flip_both(example, key):
    """The same random left-right flip of an image and its mask."""
    image, mask = example
    both = tf.image.stateless_random_flip_left_right(tf.concat([image, mask], axis=-1), key)
    return both[..., :-1], both[..., -1:]


def oxford_pets_segmentation(
    split,
    batch_size,
    data_dir=None,
    image_size=64,
    training=True,
    download=True,
    flip=True,
    shuffle_buffer=1_000,
    drop_remainder=False,
    order=None,
):
    """Pet vs background masks of TFDS `oxford_iiit_pet`.

    split: `"train"` or `"test"` (3,680 and 3,669 photos), slices too.
    Images resized to `image_size` squares (bilinear, antialiased) and
    scaled to [0, 1]; the trimap (1 pet, 2 background, 3 border) resized
    by nearest neighbour and made the pet's mask: 1 on the pet, 0
    elsewhere (the border counts as background). `training=True`:
    shuffled, and with `flip` image and mask flipped left-right together
    at random; the epochs of `order` (an `EpochOrder`, see
    `training_batches`). Yields `(images (batch, s, s, 3) float32 in [0, 1],
    masks (batch, s, s, 1) float32 of 0/1)`.
    """
    whole = reads_whole_epochs(training, order)
    ds = load_split("oxford_iiit_pet", split, data_dir, download, whole)
    ds = ds.map(_pet_and_mask(image_size), AUTOTUNE)
    if not training:
        return _evaluation_batches(ds, batch_size, drop_remainder)
    return training_batches(
        ds,
        batch_size,
        order,
        augment=_flip_both if flip else None,
        shuffle_buffer=shuffle_buffer,
        drop_remainder=drop_remainder,
    )


def foreground_weight(dataset, max_batches=20):
    """Background pixels / foreground pixels of the masks in the first
    `max_batches` batches of an `(images, masks)` dataset (0/1 masks): the
    weight of foreground pixels in SegCaps's weighted binary
    cross-entropy. 1 when those masks have no foreground."""
    foreground = total = 0
    for _, masks in dataset.take(max_batches):
        masks = np.asarray(masks)
        foreground += float(np.sum(masks, dtype=np.float64))
        total += masks.size
    return (total - foreground) / foreground if foreground > 0 else 1.0


# ---------------------------------------------------------------- CIFAR-10

CIFAR10_CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)


def cifar10(
    split,
    batch_size,
    image_size=32,
    data_dir=None,
    download=True,
    shuffle_buffer=10_000,
    drop_remainder=False,
    training=None,
    order=None,
):
    """CIFAR-10 `(RGB image in [0, 1], label)` batches, resized to `image_size`.

    Training (`training`, default `split == "train"`; pass it for slices):
    shuffled, random horizontal flip and a random crop of the image padded
    by 4 px (the usual CIFAR augmentation), then the resize (bilinear; none
    at 32); the epochs of `order` (an `EpochOrder`, see `training_batches`).
    """
    training = split == "train" if training is None else training

    def resize(image):
        return image if image_size == 32 else tf.image.resize(image, (image_size, image_size))

    def prepare(example):
        return tf.cast(example["image"], tf.float32) / 255.0, example["label"]

    def augment(example, key):
        image, label = example
        image = tf.image.stateless_random_flip_left_right(image, stream(key, 0))
        padded = tf.pad(image, [[4, 4], [4, 4], [0, 0]])
        return resize(tf.image.stateless_random_crop(padded, (32, 32, 3), stream(key, 1))), label

    whole = reads_whole_epochs(training, order)
    ds = load_split("cifar10", split, data_dir, download, whole).map(prepare, AUTOTUNE)
    if not training:
        return _evaluation_batches(ds.map(lambda x, y: (resize(x), y)), batch_size, drop_remainder)
    return training_batches(
        ds,
        batch_size,
        order,
        augment=augment,
        shuffle_buffer=shuffle_buffer,
        drop_remainder=drop_remainder,
    )


# MNIST as point sets (Qi et al., "PointNet++", NeurIPS 2017, Table 1: digits
# as 512 2-D points from their foreground pixels).
MNIST_POINT_THRESHOLD = 128  # foreground: intensity >= half of 255


def digit_point_clouds(images, points, rng, lift=True):
    """Point sets of digit images: `points` of each image's foreground pixels.

    images: uint8 `(N, H, W)` or `(N, H, W, 1)`. Each point is a foreground
    pixel (intensity `>= MNIST_POINT_THRESHOLD`; an image without one uses
    its nonzero pixels, a blank image every pixel) drawn uniformly with
    replacement, placed at a uniform random spot inside the pixel, so that
    repeated pixels give distinct points. Coordinates span `[-1, 1]`: `x`
    left to right, `y` bottom to top; `lift=True` appends `z = 0` (3-D
    points for the point-cloud models). Returns float32 `(N, points, 2)` or
    `(N, points, 3)`; one `rng` draws every cloud (seeded: the same clouds
    each run). No loop over the images: one sorted search for all of them.
    """
    images = np.asarray(images)
    if images.ndim == 4 and images.shape[-1] == 1:
        images = images[..., 0]
    if images.ndim != 3:
        raise ValueError(f"images must be (N, H, W) or (N, H, W, 1). Received: {images.shape}")
    n, height, width = images.shape
    flat = images.reshape(n, -1)
    weights = (flat >= MNIST_POINT_THRESHOLD).astype(np.float64)
    faint = weights.sum(1) == 0
    weights[faint] = (flat[faint] > 0).astype(np.float64)
    weights[weights.sum(1) == 0] = 1.0
    # Inverse CDF of every image at once: each row's cumulative weights are
    # offset by the totals of the rows before it, so one searchsorted over
    # the flattened CDF finds every draw's pixel.
    cdf = np.cumsum(weights, axis=1)
    offsets = np.concatenate([[0.0], np.cumsum(cdf[:, -1])[:-1]])
    draws = rng.uniform(size=(n, points)) * cdf[:, -1:] + offsets[:, None]
    pixel = np.searchsorted((cdf + offsets[:, None]).ravel(), draws.ravel(), side="right")
    pixel = np.minimum(pixel.reshape(n, points) - np.arange(n)[:, None] * flat.shape[1],
                       flat.shape[1] - 1)  # fmt: skip
    row, col = np.divmod(pixel, width)
    spot = rng.uniform(size=(n, points, 2))
    x = 2.0 * (col + spot[..., 0]) / width - 1.0
    y = 1.0 - 2.0 * (row + spot[..., 1]) / height
    coords = [x, y, np.zeros_like(x)] if lift else [x, y]
    return np.stack(coords, axis=-1).astype("float32")


def mnist_point_clouds(split, points=512, seed=0, lift=True, data_dir=None, download=True):
    """MNIST digits as point sets: `(clouds (N, points, 3 or 2) float32,
    labels (N,) int32)` of a TFDS split (`"train"`, `"test"`, slices too),
    made by `digit_point_clouds` with a generator seeded by `seed`."""
    images, labels = _all_examples("mnist", split, data_dir, download)
    clouds = digit_point_clouds(images.numpy(), points, np.random.default_rng(seed), lift)
    return clouds, labels.numpy()


# MNIST as sequences: row by row (28 steps of 28 pixels) or pixel by pixel
# (784 steps of 1; "sequential MNIST"), and pixel by pixel in one fixed
# random order ("permuted MNIST"; Le et al., 2015).
SEQUENCE_FORMS = ("rows", "pixels", "permuted")
# The permutation of "permuted" is drawn once from this seed, whatever the
# run's seed: every run and every model sees the same order.
PERMUTATION_SEED = 92916


def pixel_permutation(length=28 * 28):
    """The fixed order of permuted MNIST's pixels: an `(length,)` int array."""
    return np.random.default_rng(PERMUTATION_SEED).permutation(length)


def digit_sequences(images, form):
    """Digit images as sequences: float32 in `[0, 1]`, `(N, H, W)` for
    `"rows"`, `(N, H W, 1)` for `"pixels"` (row-major order) and
    `"permuted"` (the order of `pixel_permutation`)."""
    if form not in SEQUENCE_FORMS:
        raise ValueError(f"form must be one of {SEQUENCE_FORMS}. Received: form={form!r}")
    images = np.asarray(images)
    if images.ndim == 4 and images.shape[-1] == 1:
        images = images[..., 0]
    if images.ndim != 3:
        raise ValueError(f"images must be (N, H, W) or (N, H, W, 1). Received: {images.shape}")
    pixels = images.astype("float32") / 255.0
    if form == "rows":
        return pixels
    n, height, width = pixels.shape
    pixels = pixels.reshape(n, height * width, 1)
    if form == "permuted":
        pixels = pixels[:, pixel_permutation(height * width)]
    return pixels


def mnist_sequences(split, form, data_dir=None, download=True):
    """MNIST digits as sequences: `(sequences float32, labels (N,) int32)` of
    a TFDS split (`"train"`, `"test"`, slices too), made by
    `digit_sequences`."""
    images, labels = _all_examples("mnist", split, data_dir, download)
    return digit_sequences(images.numpy(), form), labels.numpy()


# ModelNet40 in its common HDF5 release (modelnet40_ply_hdf5_2048: files
# ply_data_train0.h5 ... ply_data_test1.h5, each with `data` (N, 2048, 3)
# float32 points and `label` (N, 1) class ids of 40 classes).
MODELNET40_CLASSES = 40


def modelnet40_hdf5(directory, split):
    """Points `(N, points, 3)` float32 and labels `(N,)` int32 of a split
    (`"train"` or `"test"`) of the ModelNet40 HDF5 release in `directory`.

    Files are read with h5py, datasets only (no pickled objects); a missing
    file, dataset or a wrong shape is a `ValueError` naming it.
    """
    import h5py

    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test'. Received: split={split!r}")
    paths = sorted(glob.glob(os.path.join(directory, f"ply_data_{split}*.h5")))
    if not paths:
        raise ValueError(
            f"No ModelNet40 HDF5 files ply_data_{split}*.h5 in {directory!r} (the "
            "modelnet40_ply_hdf5_2048 release). Received: directory={directory!r}"
        )
    points, labels = [], []
    for path in paths:
        with h5py.File(path, "r") as f:
            for key in ("data", "label"):
                if not isinstance(f.get(key), h5py.Dataset):
                    raise ValueError(f"{path} has no dataset {key!r}. Received: {sorted(f)}")
            data, label = f["data"][()], f["label"][()]
        if data.ndim != 3 or data.shape[-1] != 3:
            raise ValueError(f"{path}: `data` must be (N, points, 3). Received: {data.shape}")
        label = label.reshape(-1)
        if len(label) != len(data):
            raise ValueError(
                f"{path}: {len(label)} labels for {len(data)} clouds. Received: "
                f"label.shape={f'{label.shape}'}"
            )
        if label.size and not (0 <= label.min() and label.max() < MODELNET40_CLASSES):
            raise ValueError(
                f"{path}: labels must be in [0, {MODELNET40_CLASSES}). Received: "
                f"{label.min()}..{label.max()}"
            )
        points.append(data.astype("float32"))
        labels.append(label.astype("int32"))
    return np.concatenate(points), np.concatenate(labels)
