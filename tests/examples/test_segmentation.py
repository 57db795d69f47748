"""The segmentation examples: segcaps_digits.py and segcaps_pets.py end to
end on fake data, their tf.data pipelines, and the U-Net baseline."""

import numpy as np
import pytest

from tests.conftest import BACKEND
from tests.examples.test_scripts import (
    OUTPUTS,
    example,
    read_log,
    read_metrics,
    same_on_every_backend,
)


@pytest.mark.parametrize(
    "script, flags",
    [
        ("segcaps_digits", ["--image-size", "32"]),
        ("segcaps_pets", ["--image-size", "16"]),
        ("segcaps_digits", ["--image-size", "32", "--model", "unet"]),
    ],
    ids=["digits-segcaps", "pets-segcaps", "digits-unet"],
)
@pytest.mark.one_backend
def test_smoke_run_writes_every_output(script, flags, tmp_path):
    if "unet" in flags and BACKEND != "torch":
        pytest.skip("the U-Net is plain Keras: its script runs once, on torch")
    if script == "segcaps_pets" and BACKEND != "torch":
        # Its model and training loop are the digits script's; only its
        # tf.data input differs, and that is the same on every backend.
        pytest.skip("segcaps_pets differs from segcaps_digits in its input only: runs on torch")
    if script == "segcaps_digits" and "unet" not in flags and BACKEND == "jax":
        # Compiling SegCaps's train and test steps costs over a minute on JAX;
        # it fits and round-trips on JAX in tests/models/test_segcaps.py, and
        # the script's loop is the same code on every backend.
        pytest.skip("SegCaps on JAX: tests/models/test_segcaps.py; the script on TF and torch")
    jit = ["--jit-compile", "false"] if BACKEND == "tensorflow" else []
    metrics = example(script).main(["--smoke", "--output-dir", str(tmp_path), *jit, *flags])
    for output in OUTPUTS + ["segmentation.png"]:
        assert (tmp_path / output).stat().st_size > 0, output
    assert read_metrics(tmp_path)["test_dice"] == metrics["test_dice"]
    assert metrics["backend"] == BACKEND and metrics["steps_per_epoch"] == 2
    assert 0 <= metrics["test_dice"] <= 1 and 0 <= metrics["test_metrics"]["iou"] <= 1
    assert np.isfinite(metrics["test_loss"]) and metrics["positive_weight"] > 0
    assert metrics["model"] == ("Functional" if "unet" in flags else "SegCaps")
    log = read_log(tmp_path)
    assert all(np.isfinite(float(v)) for v in log["val_dice"] + log["val_loss"]), log


def fake_mnist(tmp_path, count=12):
    """MNIST prepared by examples/prepare_mnist_offline.py from fake digits:
    a bright square per image, so the masks have a known area."""
    images = np.zeros((count, 28, 28), np.uint8)
    images[:, 10:18, 8:20] = 255  # 96 pixels
    path = tmp_path / "mnist.npz"
    np.savez(
        path, x_train=images, y_train=np.arange(count) % 10, x_test=images[:4], y_test=np.arange(4)
    )
    example("prepare_mnist_offline").prepare(path, str(tmp_path / "tfds"))
    return str(tmp_path / "tfds")


@same_on_every_backend
def test_digit_canvases_masks_and_fixed_test_set(tmp_path):
    data = example("data")
    data_dir = fake_mnist(tmp_path)
    test = data.digit_canvases("test", 4, data_dir, canvas_size=40, training=False, noise=0.2)
    images, masks = (np.asarray(t) for t in next(iter(test)))
    assert images.shape == masks.shape == (4, 40, 40, 1)
    assert set(np.unique(masks)) <= {0.0, 1.0}
    assert 0 <= images.min() and images.max() <= 1
    # 1 to 3 squares of 96 pixels, overlapping or not; noise never reaches the mask.
    areas = masks.sum(axis=(1, 2, 3))
    assert np.all((areas >= 96) & (areas <= 3 * 96)), areas
    assert np.all(images[masks == 1] == 1.0) and np.all(images[masks == 0] <= 0.2 + 1e-6)
    again = np.asarray(next(iter(test))[0])
    np.testing.assert_array_equal(images, again)  # the same test canvases every run
    train = data.digit_canvases("train", 12, data_dir, canvas_size=40, training=True)
    assert sum(int(np.asarray(b[0]).shape[0]) for b in train) == 12  # one canvas per digit


@same_on_every_backend
def test_pets_pipeline_on_mock_data():
    data = example("data")
    with data.mock_data(8):
        ds = data.oxford_pets_segmentation("train[:50%]", 2, image_size=16, training=True)
        batches = list(ds)
    assert len(batches) == 2
    images, masks = (np.asarray(t) for t in batches[0])
    assert images.shape == (2, 16, 16, 3) and masks.shape == (2, 16, 16, 1)
    assert 0 <= images.min() and images.max() <= 1
    assert set(np.unique(masks)) <= {0.0, 1.0}


@same_on_every_backend
def test_foreground_weight_is_background_over_foreground():
    import tensorflow as tf

    masks = np.zeros((4, 4, 4, 1), "float32")
    masks[:, :2, :2] = 1  # 4 of 16 pixels
    ds = tf.data.Dataset.from_tensor_slices((masks, masks)).batch(2)
    assert example("data").foreground_weight(ds) == pytest.approx(3.0)
    empty = tf.data.Dataset.from_tensor_slices((masks, 0 * masks)).batch(2)
    assert example("data").foreground_weight(empty) == 1.0


@pytest.mark.one_backend
def test_unet_learns():
    import keras

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    # Centred inputs: with all-positive ones every kernel weight starts
    # moving with the bias and the net saturates at "all foreground".
    images = rng.uniform(-1, 1, size=(16, 16, 16, 1)).astype("float32")
    masks = (images > 0).astype("float32")
    model = example("unet").unet((16, 16, 1), filters=(4, 8))
    assert tuple(model.output.shape) == (None, 16, 16, 1)
    model.compile(keras.optimizers.Adam(1e-2), "binary_crossentropy")
    history = model.fit(images, masks, batch_size=8, epochs=25, verbose=0).history["loss"]
    assert history[-1] < 0.7 * history[0], history
    with pytest.raises(ValueError, match="divisible by 2"):
        example("unet").unet((15, 16, 1), filters=(4, 8))
