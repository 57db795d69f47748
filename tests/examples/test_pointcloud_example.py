"""The point-cloud example: every model and training regime on tiny
generated shapes, and on small files in the ModelNet40 HDF5 layout read by
the real loader; the loader's errors; the rotations."""

import json
import re
import warnings

import h5py
import numpy as np
import pytest

from tests.conftest import on_torch
from tests.examples.test_scripts import example

TINY = ["--epochs", "1", "--points", "32", "--primary-capsules", "16", "--pointnet-width", "32",
        "--batch-size", "8"]  # fmt: skip


def write_modelnet40(directory, rng, files=(("train0", 12), ("train1", 4), ("test0", 8))):
    for name, count in files:
        with h5py.File(directory / f"ply_data_{name}.h5", "w") as f:
            f["data"] = rng.normal(size=(count, 64, 3)).astype("float32")
            f["label"] = rng.integers(0, 40, (count, 1)).astype("uint8")


@on_torch
def test_every_model_and_regime_on_generated_shapes(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = example("pointcloud_capsules").main(
            [*TINY, "--train", "16", "--test", "8", "--output-dir", str(tmp_path)]
        )
    # The capsule classifier's decoder gets no gradients, as expected: silent.
    assert not [w for w in caught if "Gradients do not exist" in str(w.message)]
    with open(tmp_path / "metrics.json") as f:
        assert json.load(f) == json.loads(json.dumps(results))
    for name in ("capsules", "linear_probe", "pointnet", "quaternion", "set_capsules"):
        for regime in ("aligned", "rotated"):
            row = results[f"{name}_trained_{regime}"]
            assert 0 <= row["aligned_accuracy"] <= 1 and 0 <= row["rotated_accuracy"] <= 1
            assert row["parameters"] > 0


@pytest.mark.one_backend
def test_the_modelnet40_loader_reads_the_hdf5_release(tmp_path):
    data = example("data")
    write_modelnet40(tmp_path, np.random.default_rng(0))
    points, labels = data.modelnet40_hdf5(str(tmp_path), "train")
    assert points.shape == (16, 64, 3) and points.dtype == np.float32
    assert labels.shape == (16,) and labels.dtype == np.int32
    with h5py.File(tmp_path / "ply_data_train1.h5", "r") as f:  # files in order
        np.testing.assert_array_equal(points[12:], f["data"][()])
        np.testing.assert_array_equal(labels[12:], f["label"][()].reshape(-1))
    results = example("pointcloud_capsules").main(
        [*TINY, "--modelnet40", str(tmp_path), "--models", "pointnet", "--regimes", "aligned",
         "--output-dir", str(tmp_path / "run")]
    )  # fmt: skip
    assert results["data"] == "modelnet40" and (results["train"], results["test"]) == (16, 8)


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "No ModelNet40 HDF5 files"),
        ({"points": np.zeros((2, 8, 3))}, "no dataset 'data'"),
        ({"data": np.zeros((2, 8, 2)), "label": np.zeros((2, 1))}, r"\(N, points, 3\)"),
        ({"data": np.zeros((2, 8, 3)), "label": np.zeros((3, 1))}, "3 labels for 2 clouds"),
        ({"data": np.zeros((2, 8, 3)), "label": np.full((2, 1), 40)}, r"in \[0, 40\)"),
    ],
)  # fmt: skip
def test_malformed_modelnet40_files_are_named(tmp_path, content, message):
    if content is not None:
        with h5py.File(tmp_path / "ply_data_test0.h5", "w") as f:
            for key, value in content.items():
                f[key] = value
    with pytest.raises(ValueError, match=message):
        example("data").modelnet40_hdf5(str(tmp_path), "test")


def test_generated_shapes_are_on_their_surfaces():
    clouds, labels = example("pointcloud_capsules").generated_shapes(40, 64, seed=0)
    assert set(labels) == {0, 1, 2, 3}

    def constant(values):  # one value per cloud: its scale times the surface's
        np.testing.assert_allclose(values, values.mean(), rtol=1e-5)

    for cloud, label in zip(clouds, labels):
        if label == 0:  # sphere: one radius
            constant(np.linalg.norm(cloud, axis=1))
        elif label == 1:  # cube: one coordinate on a face
            constant(np.abs(cloud).max(axis=1))
        elif label == 2:  # cylinder: one distance from the z axis
            constant(np.linalg.norm(cloud[:, :2], axis=1))
        else:  # cone: the distance from the axis falls linearly with z
            constant(2 * np.linalg.norm(cloud[:, :2], axis=1) + cloud[:, 2])


def test_only_the_decoder_warning_is_silenced():
    pattern = example("pointcloud_capsules").DECODER_WITHOUT_GRADIENTS
    message = (
        "Gradients do not exist for variables {} when minimizing the loss. If using "
        "`model.compile()`, did you forget to provide a `loss` argument?"
    )
    decoder = ["point_caps_net/decoder/kernel_0", "point_caps_net/decoder/bias_0"]
    assert re.match(pattern, message.format(decoder))
    assert not re.match(pattern, message.format([*decoder, "point_caps_net/latent/kernel"]))
    assert not re.match(pattern, message.format(["dense/kernel"]))


def test_digit_point_clouds_lie_on_the_foreground_pixels():
    data = example("data")
    rng = np.random.default_rng(0)
    images = np.zeros((3, 28, 28, 1), np.uint8)
    images[0, 5:10, 12] = 255  # a stroke
    images[0, 20, 20] = 100  # faint: not foreground
    images[1, 3, 3] = 50  # only faint pixels: they are used
    clouds = data.digit_point_clouds(images, 64, rng)
    assert clouds.shape == (3, 64, 3) and clouds.dtype == np.float32
    assert np.all(clouds[..., 2] == 0) and np.all(np.abs(clouds) <= 1)
    # Back to pixels: column from x, row from y (y points up).
    cols = np.floor((clouds[..., 0] + 1) * 14).astype(int)
    rows = np.floor((1 - clouds[..., 1]) * 14).astype(int)
    assert set(zip(rows[0], cols[0])) == {(r, 12) for r in range(5, 10)}
    assert set(zip(rows[1], cols[1])) == {(3, 3)}
    assert len(set(zip(rows[2], cols[2]))) > 40  # blank: any pixel
    assert len(np.unique(clouds[0], axis=0)) == 64  # repeated pixels, distinct points
    again = data.digit_point_clouds(images, 64, np.random.default_rng(0), lift=False)
    np.testing.assert_array_equal(again, clouds[..., :2])


def test_mnist_point_clouds_come_from_the_tfds_split():
    data = example("data")
    with data.mock_data(6):
        clouds, labels = data.mnist_point_clouds("train[:4]", points=32, seed=1)
        images, _ = data._all_examples("mnist", "train[:4]", None, True)
    assert clouds.shape == (4, 32, 3) and labels.shape == (4,) and labels.dtype == np.int32
    expected = data.digit_point_clouds(images.numpy(), 32, np.random.default_rng(1))
    np.testing.assert_array_equal(clouds, expected)


@on_torch
def test_the_example_trains_on_mnist_point_sets(tmp_path):
    with example("data").mock_data(24):
        results = example("pointcloud_capsules").main(
            [*TINY, "--mnist", "--train", "16", "--test", "8", "--models", "pointnet",
             "quaternion", "set_capsules", "--regimes", "aligned", "--output-dir", str(tmp_path)]
        )  # fmt: skip
    assert results["data"] == "mnist" and (results["train"], results["test"]) == (16, 8)
    assert 0 <= results["quaternion_trained_aligned"]["rotated_accuracy"] <= 1
    for angle in (0, 30, 90, 180):  # the curves, on the first --curve-test digits
        for axis in ("in_plane", "out_of_plane"):
            assert 0 <= results["pointnet_trained_aligned"][f"{axis}_{angle}_accuracy"] <= 1
    assert results["curve_test"] == 8
    assert (tmp_path / "accuracy_by_angle.png").stat().st_size > 0
