"""The example scripts: --smoke end to end, --distribute, the data pipelines."""

import csv
import importlib
import json
import math
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_capsules as kc
from tests.conftest import BACKEND, authors_weights, on_torch, real_mnist_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
OUTPUTS = ["training_log.csv", "metrics.json", "model.keras", "training_curves.png"]
CAPSULE_FIGURES = ["reconstructions.png", "routing.png"]
# Written when some pose dimension visibly changes the reconstruction; after
# the smoke runs' 2 steps none does, and the run says so instead.
PERTURBATIONS = "perturbations.png"


def assert_perturbations_or_why_not(out, printed):
    assert (out / PERTURBATIONS).exists() or f"{PERTURBATIONS} not written" in printed


# Data pipelines (tf.data) and command-line parsing are the same code on
# every backend: their tests run once, in the torch run.
same_on_every_backend = pytest.mark.skipif(
    BACKEND != "torch", reason="tf.data and command-line code only: run once, on torch"
)

# script -> (extra flags of its smoke run, extra outputs)
SCRIPTS = {
    "mnist_capsnet": ([], [*CAPSULE_FIGURES, "routing_maps.png"]),
    "mnist_efficient_capsnet": ([], CAPSULE_FIGURES),
    "smallnorb_efficient_capsnet": ([], CAPSULE_FIGURES),
    # EM routing on the full-size net takes minutes per step here; the
    # paper's sizes are tested by test_matrix_capsnet.py's parameter count.
    "smallnorb_matrix_capsnet": (["--capsules", "4", "2", "2", "2", "--iterations", "1"], []),
    # The paper's sizes: tests/models/test_heinsen_capsnet.py.
    "smallnorb_heinsen_capsnet": (["--parts", "4", "--channels", "8"], []),
    "multimnist_capsnet": (["--model", "efficient"], ["multimnist.png"]),
    # The smallest backbone and images; the routing figure (no decoder).
    "cifar10_backbone_capsnet": (["--backbone", "small", "--image-size", "16"], ["routing.png"]),
}


def example(name):
    if EXAMPLES not in sys.path:
        sys.path.insert(0, EXAMPLES)
    return importlib.import_module(name)


def read_metrics(output_dir):
    with open(os.path.join(output_dir, "metrics.json")) as f:
        return json.load(f)


def read_log(output_dir):
    """training_log.csv as {column: [values per epoch]}."""
    with open(os.path.join(output_dir, "training_log.csv")) as f:
        rows = list(csv.DictReader(f))
    return {key: [row[key] for row in rows] for key in rows[0]}


def assert_validated(output_dir):
    """Every epoch has finite validation results, also in metrics.json."""
    log = read_log(output_dir)
    for key in ("val_loss", "val_accuracy"):
        assert log[key] and all(math.isfinite(float(v)) for v in log[key]), (key, log)
    metrics = read_metrics(output_dir)
    assert metrics["validation_accuracy"] == float(log["val_accuracy"][-1])
    assert 0 <= metrics["validation_accuracy"] <= 1


# The EfficientCapsNet scripts differ from multimnist_capsnet (an
# EfficientCapsNet too) only in their tf.data pipelines: on TensorFlow and
# JAX their smoke runs add time, not coverage. HeinsenCapsNet's forward and
# fit are tested on every backend by tests/models/test_heinsen_capsnet.py;
# its script adds a tf.data pipeline. mnist_capsnet's CapsNet fits and
# round-trips on every backend in tests/models/test_capsnet.py, and its figures
# are the EfficientCapsNet scripts'.
# MultiMNIST's model, loss and accuracy fit on JAX in
# test_multimnist_loss_accuracy_and_saving; its tf.data code is backend-free.
NOT_ON_JAX = {"multimnist_capsnet"}
ON_TORCH_ONLY = {
    "mnist_capsnet",
    "mnist_efficient_capsnet",
    "smallnorb_efficient_capsnet",
    "smallnorb_heinsen_capsnet",
}


# The scripts that run on torch whatever their hash says (a hash that picked
# another backend would skip them everywhere), and the costliest to compile.
ON_TORCH = ON_TORCH_ONLY | {"cifar10_backbone_capsnet"}


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=on_torch) if n in ON_TORCH else n for n in SCRIPTS],
)
@pytest.mark.one_backend
def test_smoke_run_writes_every_output(name, tmp_path, monkeypatch, capsys):
    if name in ON_TORCH_ONLY and BACKEND != "torch":
        pytest.skip("its model is tested on every backend elsewhere: the script on torch")
    if name in NOT_ON_JAX and BACKEND == "jax":
        pytest.skip(
            "its model and loss are tested on JAX by test_multimnist_loss_accuracy_and_saving"
        )
    # XLA-compiling the full-size models costs minutes on TF; every layer's
    # XLA train step is covered by its own test.
    jit = ["--jit-compile", "false"] if BACKEND == "tensorflow" else []
    flags, figures = SCRIPTS[name]
    # The default output folder, runs/<example>/<backend>, from a fresh folder.
    monkeypatch.chdir(tmp_path)
    metrics = example(name).main(["--smoke", *jit, *flags])
    out = tmp_path / "runs" / name / BACKEND
    for output in OUTPUTS + figures:
        assert (out / output).stat().st_size > 0, output
    if "reconstructions.png" in figures:
        assert_perturbations_or_why_not(out, capsys.readouterr().out)
    assert read_metrics(out) == json.loads(json.dumps(metrics))
    assert metrics["backend"] == BACKEND and metrics["steps_per_epoch"] == 2
    assert metrics["seed"] == 0  # The default: the same numbers each run.
    assert metrics["threads"] is None  # the backend's default (--threads)
    assert np.isfinite(metrics["test_loss"]) and 0 <= metrics["test_accuracy"] <= 1
    assert metrics["parameters"] > 0 and metrics["images_per_second"] > 0
    assert metrics["validation_fraction"] == 0.1
    assert_validated(out)


def run_script(args, env_extra, prelude=""):
    """Runs an example in a fresh interpreter (device flags must precede imports)."""
    env = dict(os.environ, PYTHONPATH=ROOT, KERAS_BACKEND=BACKEND, **env_extra)
    code = (
        "import sys, runpy\n"
        + prelude
        + f"sys.argv = {args!r}\nsys.path.insert(0, {EXAMPLES!r})\n"
        + "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600
    )


TF_TWO_CPUS = """
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
"""


@pytest.mark.skipif(
    BACKEND == "torch", reason="torch: one process per device (torchrun), tests/test_distributed.py"
)
def test_distribute_on_two_virtual_cpu_devices(tmp_path):
    # The smallest example model (the script's code path is the same for all).
    script = os.path.join(EXAMPLES, "cifar10_backbone_capsnet.py")
    args = [script, "--smoke", "--distribute", "--output-dir", str(tmp_path)]
    args += ["--backbone", "small", "--image-size", "16"]
    if BACKEND == "tensorflow":
        args += ["--jit-compile", "false"]  # see test_smoke_run_writes_every_output
    if BACKEND == "jax":
        two_devices = os.environ["XLA_FLAGS"] + " --xla_force_host_platform_device_count=2"
        result = run_script(args, {"XLA_FLAGS": two_devices})
    else:
        result = run_script(args, {}, prelude="import keras\n" + TF_TWO_CPUS)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = read_metrics(tmp_path)
    assert metrics["replicas"] == 2 and metrics["distribute"]
    assert np.isfinite(metrics["test_loss"])
    assert_validated(tmp_path)


@pytest.mark.skipif(BACKEND != "torch", reason="the torch message only")
def test_distribute_on_torch_without_torchrun_says_how_to_launch(tmp_path, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit, match="torchrun --nproc_per_node=2"):
        example("mnist_capsnet").main(["--smoke", "--distribute", "--output-dir", str(tmp_path)])


@same_on_every_backend
def test_missing_dataset_error_names_tfds_data_dir(tmp_path):
    data = example("data")
    with pytest.raises(data.DatasetUnavailableError, match="TFDS_DATA_DIR"):
        data.mnist("train", 4, data_dir=str(tmp_path), download=False)


@same_on_every_backend
def test_router_flag_lists_library_routers():
    args = example("common").parse_args("test", 1, 1, argv=["--router", "self_attention"])
    assert args.router == "self_attention"
    with pytest.raises(SystemExit):
        example("common").parse_args("test", 1, 1, argv=["--router", "dynamo"])


@same_on_every_backend
def test_validation_fraction_flag_and_splits():
    common, data = example("common"), example("data")
    assert common.parse_args("test", 1, 1, argv=[]).validation_fraction == 0.1
    for bad in ("1", "-0.1"):
        with pytest.raises(SystemExit):
            common.parse_args("test", 1, 1, argv=["--validation-fraction", bad])
    assert data.train_validation_splits(0.1) == ("train[:90%]", "train[90%:]")
    assert data.train_validation_splits(0.15) == ("train[:85%]", "train[85%:]")
    assert data.train_validation_splits(0) == ("train", None)


def images_of(split, data_dir=None):
    data = example("data")
    return [
        np.asarray(example["image"]).tobytes()
        for example in data.load_split("mnist", split, data_dir, download=False)
    ]


@same_on_every_backend
def test_validation_slices_do_not_overlap_the_training_slices(tmp_path):
    """The split strings select disjoint examples that make up the training
    split: on a prepared dataset (TFDS's reader) and in the --smoke runs'
    mock data (TFDS's split arithmetic; TFDS's own mock ignores slices)."""
    data = example("data")
    train_split, validation_split = data.train_validation_splits(0.1)
    rng = np.random.default_rng(0)
    arrays = {
        "x_train": rng.integers(0, 256, (30, 28, 28), dtype=np.uint8),
        "x_test": rng.integers(0, 256, (2, 28, 28), dtype=np.uint8),
    }
    arrays.update(y_train=np.arange(30) % 10, y_test=np.arange(2))
    np.savez(tmp_path / "mnist.npz", **arrays)
    data_dir = str(tmp_path / "tfds")
    example("prepare_mnist_offline").prepare(tmp_path / "mnist.npz", data_dir)
    train, validation = (images_of(split, data_dir) for split in (train_split, validation_split))
    assert (len(train), len(validation)) == (27, 3)
    assert sorted(train + validation) == sorted(
        image[..., None].tobytes() for image in arrays["x_train"]
    )
    with data.mock_data(40):
        train, validation, everything = (
            images_of(split) for split in (train_split, validation_split, "train")
        )
    assert train + validation == everything and len(set(everything)) == 40


@pytest.mark.real_mnist
@pytest.mark.skipif(
    real_mnist_dir() is None,
    reason="real MNIST not prepared: run examples/prepare_mnist_offline.py NPZ DIR "
    "and set TFDS_DATA_DIR=DIR",
)
@pytest.mark.parametrize("augment", [None, "capsnet", "efficient_capsnet"])
def test_real_mnist_pipeline(augment):
    data = example("data")
    images, labels = next(iter(data.mnist("train", 256, augment, real_mnist_dir())))
    images, labels = np.asarray(images), np.asarray(labels)
    assert images.shape == (256, 28, 28, 1) and images.dtype == np.float32
    assert images.min() >= 0 and images.max() <= 1 and images.max() > 0.9
    assert set(np.unique(labels)) == set(range(10))
    # Shifts keep the digit's ink (MNIST digits sit 4 px from the border).
    if augment == "capsnet":
        assert np.all(images.reshape(256, -1).sum(-1) > 20)
    test_images, _ = next(iter(data.mnist("test", 10_000, None, real_mnist_dir())))
    assert test_images.shape[0] == 10_000


def test_jit_compile_flag():
    resolve = example("common").resolve_jit_compile
    assert resolve("true") is True and resolve("false") is False
    assert resolve("auto", "torch") is False  # eager unless the model says compiled is faster
    # torch.compile only for models that measured faster compiled, on runs long
    # enough to repay the compile (the smoke runs stay eager).
    images = example("common").TORCH_COMPILE_MIN_IMAGES
    assert resolve("auto", "torch", torch_compile=True, train_images=images) is True
    assert resolve("auto", "torch", torch_compile=True, train_images=images - 1) is False
    assert resolve("auto", "torch", torch_compile=False, train_images=10 * images) is False
    assert resolve("auto", "jax") == resolve("auto", "tensorflow") == "auto"
    assert resolve("auto", "tensorflow", xla_on_cpu=True) is True
    assert resolve("false", "tensorflow", xla_on_cpu=True) is False


def write_image_folder(root, classes=("circle", "square", "tri"), per_class=5):
    """Tiny PNGs of several sizes, colour and grey, one sub-folder per class."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for c, name in enumerate(classes):
        os.makedirs(root / name)
        for i in range(per_class):
            size = (int(rng.integers(8, 20)), int(rng.integers(8, 20)))
            pixels = rng.integers(0, 256, (*size[::-1], 3), dtype=np.uint8)
            pixels[..., c] = 255  # a class colour: learnable, not needed here
            image = Image.fromarray(pixels)
            (image.convert("L") if i % 2 else image).save(root / name / f"{i}.png")


@same_on_every_backend  # --seeds and the folder pipeline; the model's fit: the smoke runs
def test_image_folder_with_two_seeds(tmp_path, capsys):
    """DIR of class folders -> every output, per seed, and mean +- std over seeds."""
    write_image_folder(tmp_path / "images")
    out = tmp_path / "out"
    jit = ["--jit-compile", "false"] if BACKEND == "tensorflow" else []
    # 3 of the 12 training images validate: one batch the size of the test set's.
    metrics = example("image_folder_capsnet").main(
        [
            str(tmp_path / "images"),
            "--image-size",
            "16",
            "16",
            "--smoke",
            "--seeds",
            "2",
            "--validation-fraction",
            "0.25",
            "--output-dir",
            str(out),
            *jit,
        ]
    )
    printed = capsys.readouterr().out
    for seed in (0, 1):
        for output in OUTPUTS + CAPSULE_FIGURES:
            assert (out / f"seed_{seed}" / output).stat().st_size > 0, output
        assert_perturbations_or_why_not(out / f"seed_{seed}", printed)
        assert read_metrics(out / f"seed_{seed}")["seed"] == seed
        assert_validated(out / f"seed_{seed}")
    assert read_metrics(out) == json.loads(json.dumps(metrics))
    assert metrics["class_names"] == ["circle", "square", "tri"] and metrics["seeds"] == [0, 1]
    assert (metrics["train_images"], metrics["validation_images"], metrics["test_images"]) == (
        9,
        3,
        3,
    )
    accuracies = metrics["test_accuracies"]
    assert len(accuracies) == 2 and metrics["test_accuracy_mean"] == pytest.approx(
        np.mean(accuracies)
    )
    assert metrics["test_accuracy_std"] == pytest.approx(np.std(accuracies, ddof=1))
    # 3 classes of 16 x 16 RGB images (grey PNGs are read as RGB).
    model = keras.saving.load_model(out / "seed_0" / "model.keras", safe_mode=True)
    assert model.image_shape == (16, 16, 3) and model.num_classes == 3


@same_on_every_backend
def test_image_folder_validation_split(tmp_path):
    """The validation images come from the training images of DIR, the test
    images stay those of the split without validation, with --test-dir too."""
    common, folder = example("common"), example("image_folder_capsnet")
    write_image_folder(tmp_path / "images")
    write_image_folder(tmp_path / "test", per_class=2)
    every = sorted(str(path) for path in (tmp_path / "images").rglob("*.png"))

    def split(*flags):
        args = common.parse_args(
            "d", 1, 4, argv=[str(tmp_path / "images"), *flags], add_arguments=folder.add_arguments
        )
        return folder.split_images(args)

    train, validation, test = split("--validation-fraction", "0")
    assert validation is None and len(test.file_paths) == 3
    plain_test = test.file_paths
    train, validation, test = split("--validation-fraction", "0.25")
    assert test.file_paths == plain_test
    assert (len(train.file_paths), len(validation.file_paths)) == (9, 3)
    assert sorted(train.file_paths + validation.file_paths + test.file_paths) == every
    # The validation examples are the images of those paths (their labels).
    labels = [int(label) for _, label in validation]
    assert labels == [
        validation.class_names.index(os.path.basename(os.path.dirname(path)))
        for path in validation.file_paths
    ]
    train, validation, test = split("--test-dir", str(tmp_path / "test"))  # 10 % of 15
    assert (len(train.file_paths), len(validation.file_paths), len(test.file_paths)) == (13, 2, 6)
    assert sorted(train.file_paths + validation.file_paths) == every
    with pytest.raises(SystemExit, match="validation-fraction"):
        split("--validation-fraction", "0.01")


def test_command_line_runs_turn_off_ynn_convolutions_on_jax(monkeypatch):
    from importlib.metadata import version

    common = example("common")
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    common.use_xla_cpu_convolutions()
    known = BACKEND == "jax" and version("jaxlib").startswith("0.10.")
    expected = (
        f"--xla_dump_to=/tmp/x {common.YNN_CONVOLUTIONS_OFF}" if known else ("--xla_dump_to=/tmp/x")
    )
    assert os.environ["XLA_FLAGS"] == expected
    # A setting of the user's own is kept.
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type=")
    common.use_xla_cpu_convolutions()
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_experimental_ynn_fusion_type="


def tiny_run(output_dir, *flags, load_data=None):
    """common.run of a tiny CapsuleImageClassifier on 16 generated images, one epoch
    of 3 steps; `--validation-fraction` holds out the last 4 images
    (`load_data`: other data of those shapes)."""
    import tensorflow as tf

    import keras_capsules as kc

    rng = np.random.default_rng(0)
    images, labels = rng.uniform(size=(16, 6, 6, 3)).astype("float32"), rng.integers(0, 3, 16)

    def build_model(args):
        backbone = keras.Sequential([keras.Input((6, 6, 3)), keras.layers.Conv2D(4, 3)])
        return kc.CapsuleImageClassifier(
            backbone, 3, primary_capsules=2, primary_dim=4, capsule_dim=4
        )

    def generated(args, batch_size, drop_remainder=False):
        held_out = 4 if args.validation_fraction else 0
        train = tf.data.Dataset.from_tensor_slices(
            (images[: 16 - held_out], labels[: 16 - held_out])
        )
        validation = tf.data.Dataset.from_tensor_slices((images[12:], labels[12:])).batch(4)
        return (
            train.shuffle(16).batch(4),
            validation if held_out else None,
            tf.data.Dataset.from_tensor_slices((images, labels)).batch(4),
        )

    argv = ["--epochs", "1", "--output-dir", str(output_dir), "--steps-per-epoch", "3", *flags]
    return example("common").run(
        "tiny",
        "d",
        build_model,
        load_data or generated,
        lambda args, steps: keras.optimizers.Adam(0.01),
        routers=False,
        argv=argv,
    )


@pytest.mark.one_backend("torch")  # what it learns: tests/test_learning.py
def test_seed_makes_runs_repeatable(tmp_path):
    """common.run seeds data order and initial weights: same --seed, same run."""
    with pytest.raises(SystemExit):
        example("common").parse_args("d", 1, 4, argv=["--seeds", "0"])

    def run(seed, name):
        loss = tiny_run(tmp_path / name, "--seed", str(seed))["test_loss"]
        model = keras.saving.load_model(tmp_path / name / "model.keras")
        return loss, [keras.ops.convert_to_numpy(w) for w in model.weights]

    (first, weights), (again, same), (other, _) = run(7, "a"), run(7, "b"), run(8, "c")
    assert first == again and first != other
    for a, b in zip(weights, same):  # bit-identical on CPU, on every backend
        np.testing.assert_array_equal(a, b)
    assert_validated(tmp_path / "a")


@same_on_every_backend
def test_step_log_recovers_each_steps_value(tmp_path):
    """Keras logs the epoch's mean so far after each step; StepLog gives
    each step's own value, over epochs, and the curves plot them."""
    log = example("common").StepLog(keys=("loss",))
    for epoch, values in enumerate(([3.0, 1.0, 2.0], [5.0, 1.0])):
        log.on_epoch_begin(epoch)
        for k in range(1, len(values) + 1):
            log.on_train_batch_end(k - 1, {"loss": np.float32(np.mean(values[:k]))})
        log.on_epoch_end(epoch)
    assert log.steps == [1, 2, 3, 4, 5] and log.epoch_ends == [3, 5]
    np.testing.assert_allclose(log.values["loss"], [3.0, 1.0, 2.0, 5.0, 1.0], rtol=1e-6)
    figures = example("figures")
    np.testing.assert_allclose(
        figures.moving_average([1.0, 3.0, np.nan, 5.0], 2), [1.0, 2.0, 3.0, 5.0]
    )
    figures.plot_history(
        {"loss": [2.0, 3.0], "val_loss": [1.5, 2.5], "accuracy": [0.5, 0.6]},
        tmp_path / "curves.png",
        log,
    )
    assert (tmp_path / "curves.png").stat().st_size > 0


@pytest.mark.one_backend
def test_validation_fraction_zero_trains_without_validation(tmp_path):
    jit = ["--jit-compile", "false"] if BACKEND == "tensorflow" else []  # XLA: seconds more
    metrics = tiny_run(tmp_path, "--validation-fraction", "0", *jit)
    assert list(read_log(tmp_path)) == ["epoch", "accuracy", "loss"]
    assert metrics["validation_fraction"] == 0 and metrics["validation_accuracy"] is None
    assert (tmp_path / "training_curves.png").stat().st_size > 0


# The examples that read TFDS datasets, with the flags of their smoke runs.
TFDS_EXAMPLES = {name: flags for name, (flags, _) in SCRIPTS.items()}


@same_on_every_backend
@pytest.mark.parametrize("fraction", [0.1, 0])
def test_tfds_examples_validate_on_their_training_split(fraction):
    """Each example's load_data: the last `fraction` of the (mocked, 40
    examples) training split validates, the same batches every epoch; the
    rest trains; 0: no validation data."""
    common, data = example("common"), example("data")
    with data.mock_data(common.SMOKE_EXAMPLES):
        for name, flags in TFDS_EXAMPLES.items():
            module = example(name)
            args = common.parse_args(
                name,
                1,
                4,
                add_arguments=getattr(module, "add_arguments", None),
                argv=["--validation-fraction", str(fraction), *flags],
            )
            train, validation, test = module.load_data(args, 4)
            assert int(train.cardinality()) == (9 if fraction else 10), name
            assert int(test.cardinality()) == 10, name
            if not fraction:
                assert validation is None, name
                continue
            assert int(validation.cardinality()) == 1, name
            first, again = ([np.asarray(images) for images, _ in validation] for _ in range(2))
            np.testing.assert_array_equal(first, again, err_msg=name)


@same_on_every_backend
def test_multimnist_pairs(tmp_path):
    """Two digits of different classes, each shifted by up to 4 px on a
    36 x 36 canvas, merged by a clipped sum; a seeded split is fixed."""
    import tensorflow_datasets as tfds

    data = example("data")
    with tfds.testing.mock_data(num_examples=12):
        batches = [list(data.multimnist("test", 12, seed=seed))[0] for seed in (0, 0, 1)]
        train = list(data.multimnist("train", 12))[0]
    for merged, targets in batches + [train]:
        merged, labels = np.asarray(merged), np.asarray(targets["labels"])
        digits = np.asarray(targets["images"])
        assert merged.shape == (12, 36, 36, 1) and digits.shape == (12, 2, 36, 36, 1)
        assert np.all(labels[:, 0] != labels[:, 1])
        np.testing.assert_allclose(merged, np.minimum(digits[:, 0] + digits[:, 1], 1.0))
        # Each 28 x 28 digit sits at offsets 0..8 (shifts of +-4 px); mock
        # digits are noise, so their ink fills their window.
        ink = digits[..., 0] > 0
        for lines in (ink.any(-1), ink.any(-2)):
            first, last = lines.argmax(-1), 35 - lines[..., ::-1].argmax(-1)
            assert np.all(last - first == 27) and first.min() >= 0 and first.max() <= 8
            assert len(np.unique(first)) > 1
    np.testing.assert_array_equal(batches[0][0], batches[1][0])
    assert not np.array_equal(batches[0][0], batches[2][0])


def tiny_multidigit_capsnet():
    return kc.models.CapsNet(
        (20, 20, 1),
        4,
        conv_filters=4,
        primary_capsules=2,
        primary_dim=4,
        capsule_dim=4,
        decoder_units=(8,),
        reconstruction_weight=0.5,
        labels_per_image=2,
    )


@pytest.mark.one_backend
def test_multimnist_loss_accuracy_and_saving(tmp_path):
    """Margin loss with both classes present + each digit reconstructed from
    its own capsule; accuracy 1 only when both are the two longest."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    images = rng.uniform(size=(4, 20, 20, 1)).astype("float32")
    labels = np.array([[0, 1], [2, 3], [1, 3], [3, 0]], "int32")
    digits = rng.uniform(size=(4, 2, 20, 20, 1)).astype("float32")
    y = {"labels": labels, "images": digits}
    model = tiny_multidigit_capsnet()
    # Jitted on JAX (op by op is slower there); no XLA on TF (its compile
    # costs more than the evaluation: docs/testing.md).
    model.compile(optimizer="adam", jit_compile=BACKEND == "jax")  # metrics "auto"
    results = model.evaluate(images, y, batch_size=4, verbose=0, return_dict=True)
    scores, poses = model(images, return_poses=True)
    scores = keras.ops.convert_to_numpy(scores)  # safe_norm lengths
    poses = keras.ops.convert_to_numpy(poses)
    two_hot = np.eye(4)[labels].sum(1)
    margin = (
        (
            two_hot * np.maximum(0.9 - scores, 0) ** 2
            + 0.5 * (1 - two_hot) * np.maximum(scores - 0.1, 0) ** 2
        )
        .sum(-1)
        .mean()
    )
    mse = 0.0
    for k in range(2):
        keep = np.eye(4)[labels[:, k]][..., None]
        decoded = keras.ops.convert_to_numpy(model.decode(poses * keep.astype("float32")))
        mse += ((decoded - digits[:, k]) ** 2).mean()
    np.testing.assert_allclose(results["loss"], margin + 0.5 * mse, rtol=1e-4)
    # Ties with the second longest count as predicted (a tiny net can tie).
    predicted = scores >= np.sort(scores, -1)[:, -2:-1]
    accuracy = np.mean(np.all(predicted == two_hot.astype(bool), -1))
    np.testing.assert_allclose(results["accuracy"], accuracy)
    correct = kc.metrics.label_set_correct(
        np.array([[1, 0, 1, 0], [1, 1, 0, 0]], "float32"),
        np.array([[0.9, 0.1, 0.8, 0.7], [0.9, 0.1, 0.8, 0.7]], "float32"),
        k=2,
    )
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(correct), [1.0, 0.0])
    loss = model.fit(images, y, batch_size=4, verbose=0).history["loss"]
    assert np.all(np.isfinite(loss))
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded) is kc.models.CapsNet and loaded.labels_per_image == 2
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(images)),
        keras.ops.convert_to_numpy(model(images)),
        rtol=1e-5,
        atol=1e-6,
    )


@same_on_every_backend
def test_heinsen_edge_padding_and_mixup():
    import tensorflow as tf

    data = example("data")
    image = np.arange(12, dtype="float32").reshape(3, 4, 1)
    padded = data.edge_pad(tf.constant(image), 2).numpy()[..., 0]
    np.testing.assert_array_equal(padded, np.pad(image[..., 0], 2, mode="edge"))
    images = tf.constant(np.random.default_rng(0).uniform(size=(6, 4, 4, 2)), tf.float32)
    key = tf.constant([0, 0], tf.int64)
    mixed, targets = data.mixup(images, tf.constant([0, 1, 2, 3, 4, 0]), 5, key)
    assert tuple(mixed.shape) == (6, 4, 4, 2) and tuple(targets.shape) == (6, 5)
    np.testing.assert_allclose(targets.numpy().sum(-1), 1.0, rtol=1e-6)
    assert mixed.numpy().min() >= 0 and mixed.numpy().max() <= 1


@same_on_every_backend
@pytest.mark.parametrize(
    "build",
    [
        lambda: kc.models.HeinsenCapsNet(num_parts=4, channels=8),
        lambda: kc.models.EfficientCapsNet(architecture="smallnorb"),
    ],
    ids=["heinsen", "efficient_capsnet"],
)
def test_evaluate_preset_on_mock_smallnorb(build, tmp_path):
    # A saved model of a preset's class stands in for the authors' file,
    # which needs a download; tests/models/test_*.py check the real ones.
    model = build()
    path = str(tmp_path / "fine_tuned.keras")
    model.save(path)
    metrics = example("evaluate_preset").main(
        ["--preset", path, "--smoke", "--output-dir", str(tmp_path)]
    )
    assert read_metrics(tmp_path) == metrics
    assert metrics["model"] == type(model).__name__ and metrics["test_examples"] == 8
    assert 0 <= metrics["test_accuracy"] <= 1 and len(metrics["per_class_accuracy"]) == 5


ESCVM_WEIGHTS, needs_escvm_weights = authors_weights("escvm_efficient_capsnet_SMALLNORB.h5")


@same_on_every_backend
@needs_escvm_weights
def test_evaluate_preset_with_the_authors_weights_on_mock_smallnorb(tmp_path):
    path = ESCVM_WEIGHTS
    metrics = example("evaluate_preset").main(
        ["--preset", "efficient_capsnet_smallnorb", "--weights", path, "--smoke"]
        + ["--output-dir", str(tmp_path)]
    )
    assert metrics["parameters"] == 381_234 and metrics["test_examples"] == 8


@pytest.mark.one_backend
def test_multilabel_example_trains_both_models(tmp_path):
    # Few images and one epoch: the script's code on this backend; the
    # learning on more images is measured by the script itself.
    results = example("multilabel_shapes").main(
        ["--epochs", "1", "--train", "64", "--test", "32", "--output-dir", str(tmp_path)]
    )
    with open(tmp_path / "metrics.json") as f:
        assert json.load(f) == json.loads(json.dumps(results))
    for name in ("capsules", "cnn"):
        row = results[name]
        assert 0 <= row["exact_set_accuracy"] <= 1 and 0 <= row["per_label_accuracy"] <= 1
    ratio = results["capsules"]["parameters"] / results["cnn"]["parameters"]
    assert 0.8 < ratio < 1.25, ratio  # "of about the same size"


def test_multilabel_shapes_labels_match_the_images():
    shapes = example("multilabel_shapes").shapes
    images, labels, numbers = shapes(200, seed=3)
    np.testing.assert_array_equal(labels.sum(-1), numbers)
    assert set(numbers) == {0, 1, 2, 3}
    # An image without objects is noise only (below 0.2); each object
    # draws pixels of 1.
    assert images[numbers == 0].max() < 0.2 and images[numbers > 0].max() == 1.0


@pytest.mark.one_backend("torch")  # what it learns: tests/test_learning.py
def test_monitor_logs_the_routed_layers_and_draws_them(tmp_path):
    """--monitor: CapsuleMonitor on the held-out images, its measures as
    training_log.csv columns, its figures beside the others."""
    tiny_run(tmp_path, "--monitor", "--validation-fraction", "0.25")
    with open(tmp_path / "training_log.csv") as f:
        header = f.readline().strip().split(",")
    assert "capsules/class_capsules/starved_fraction" in header
    assert "capsules/class_capsules/coefficient_entropy" in header
    for figure in ("capsule_monitor.png", "capsule_monitor_routing.png"):
        assert (tmp_path / figure).stat().st_size > 0
    # The routing maps as TensorBoard images.
    assert list((tmp_path / "tensorboard" / "capsules").glob("events.out.tfevents.*"))
