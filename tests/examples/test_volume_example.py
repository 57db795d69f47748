"""The volumetric example: both models on tiny generated volumes and on a
folder of NumPy volumes; the folder reader's errors; the generated shapes."""

import json
import types

import numpy as np
import pytest

from tests.conftest import on_torch
from tests.examples.test_scripts import example

TINY = ["--epochs", "1", "--batch-size", "4"]


@pytest.mark.one_backend
def test_both_models_on_generated_volumes(tmp_path):
    results = example("volume_capsules").main(
        [*TINY, "--size", "12", "--train", "8", "--test", "4", "--output-dir", str(tmp_path)]
    )
    with open(tmp_path / "metrics.json") as f:
        assert json.load(f) == json.loads(json.dumps(results))
    for name in ("capsules", "cnn"):
        assert 0 <= results[name]["accuracy"] <= 1
    # "of about the same size", at the default 24^3 volumes
    volume = example("volume_capsules")
    ratio = (
        volume.capsule_model((24, 24, 24, 1), 4).count_params()
        / volume.cnn_model((24, 24, 24, 1), 4).count_params()
    )
    assert 0.8 < ratio < 1.25, ratio


def write_folder(root, rng, classes=("nodule", "vessel"), count=5, shape=(12, 12, 12)):
    for name in classes:
        (root / name).mkdir(parents=True)
        for n in range(count):
            np.save(root / name / f"{n}.npy", rng.normal(size=shape).astype("float32"))


@pytest.mark.one_backend
def test_a_folder_of_numpy_volumes(tmp_path):
    write_folder(tmp_path / "data", np.random.default_rng(0))
    volume = example("volume_capsules")
    x, y, x_test, y_test, classes = volume.folder_volumes(str(tmp_path / "data"), 0.2)
    assert classes == ["nodule", "vessel"]
    assert x.shape == (8, 12, 12, 12, 1) and x_test.shape == (2, 12, 12, 12, 1)
    assert list(y) == [0] * 4 + [1] * 4 and list(y_test) == [0, 1]
    results = volume.main(
        [*TINY, "--folder", str(tmp_path / "data"), "--output-dir", str(tmp_path)]
    )
    assert results["data"] == "folder" and results["classes"] == ["nodule", "vessel"]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda root: None, "at least two"),
        (lambda root: np.save(root / "a" / "bad.npy", np.array([{"x": 1}], dtype=object)),
         "not a plain NumPy array"),
        (lambda root: np.save(root / "a" / "bad.npy", np.zeros((12, 12))), r"\(D, H, W\)"),
        (lambda root: np.save(root / "a" / "bad.npy", np.zeros((10, 12, 12))), "volumes before it"),
    ],
)  # fmt: skip
def test_malformed_folders_are_named(tmp_path, make, message):
    root = tmp_path / "data"
    if message != "at least two":
        write_folder(root, np.random.default_rng(0), classes=("a", "b"))
    else:
        (root / "only").mkdir(parents=True)
    make(root)
    with pytest.raises(ValueError, match=message):
        example("volume_capsules").folder_volumes(str(root), 0.2)


def test_generated_volumes_hold_their_shapes():
    volumes, labels = example("volume_capsules").generated_volumes(40, 16, noise=0.0, seed=0)
    assert set(labels) == {0, 1, 2, 3}
    filled = (volumes[..., 0] > 0.5).sum(axis=(1, 2, 3))
    assert (filled[labels == 0] == 0).all() and (filled[labels > 0] > 0).all()
    rods = volumes[labels == 3, ..., 0] > 0.5
    # A rod spans the volume along one axis.
    assert all(
        max(r.any(axis=(1, 2)).sum(), r.any(axis=(0, 2)).sum(), r.any(axis=(0, 1)).sum()) == 16
        for r in rods
    )


@on_torch
def test_the_mnist_rotation_study(tmp_path):
    argv = [*TINY, "--mnist", "--train", "8", "--test", "6", "--curve-test", "4", "--size", "12",
            "--points", "64", "--angles", "0", "90", "--output-dir", str(tmp_path)]  # fmt: skip
    with example("data").mock_data(24):
        results = example("volume_capsules").main(argv)
        # Stopped after its models finished: --resume trains none again.
        resumed = example("volume_capsules").main([*argv, "--resume"])
    assert resumed == results
    assert results["data"] == "mnist" and (results["train"], results["test"]) == (8, 6)
    tests = ["aligned", "rotated"] + [
        f"{axis}_{angle}" for axis in ("in_plane", "out_of_plane") for angle in (0, 90)
    ]
    for model in ("capsules", "cnn"):
        for regime in ("aligned", "rotated"):
            row = results[f"{model}_trained_{regime}"]
            assert all(0 <= row[f"{test}_accuracy"] <= 1 for test in tests), row
    assert (tmp_path / "accuracy_by_angle.png").stat().st_size > 0


def test_mnist_digits_fit_the_grid_under_any_rotation():
    volume = example("volume_capsules")
    args = types.SimpleNamespace(train=4, test=3, seed=0, points=128, data_dir=None, thickness=0.15)
    with example("data").mock_data(8):
        clouds, labels, test_clouds, test_labels = volume.mnist_digits(args)
    assert clouds.shape == (4, 128, 3) and test_clouds.shape == (3, 128, 3)
    assert np.linalg.norm(clouds, axis=-1).max() <= 1.0 + 1e-6  # the unit ball
    assert np.abs(clouds[..., 2]).max() > 0  # thickened
