"""examples/affine_robustness.py and its affNIST-style data (affine_data.py)."""

import numpy as np
import pytest

from tests.conftest import BACKEND, on_torch
from tests.examples.test_scripts import example, read_metrics, same_on_every_backend


def digits(count=6):
    """Bar-shaped fake digits, `(count, 28, 28, 1)` in [0, 1]."""
    images = np.zeros((count, 28, 28, 1), np.float32)
    for i in range(count):
        images[i, 4 + i : 24, 10 : 14 + i] = 1.0
    return images


@same_on_every_backend
def test_translated_set_moves_each_digit_within_six_pixels():
    affine_data = example("affine_data")
    images = affine_data.translated_test_set(digits(), seed=3)
    assert images.shape == (6, 40, 40, 1)
    np.testing.assert_array_equal(images.sum(axis=(1, 2, 3)), digits().sum(axis=(1, 2, 3)))
    top, _, left, _ = affine_data.bounding_boxes(images)
    centred_top, _, centred_left, _ = affine_data.bounding_boxes(
        affine_data.centre_on_canvas(digits()).numpy()
    )
    assert np.all(np.abs(top - centred_top) <= 6) and np.all(np.abs(left - centred_left) <= 6)
    np.testing.assert_array_equal(images, affine_data.translated_test_set(digits(), seed=3))
    assert not np.array_equal(images, affine_data.translated_test_set(digits(), seed=4))


@same_on_every_backend
def test_affine_maps_stay_in_affnists_ranges_and_turn_about_the_centre():
    affine_data = example("affine_data")
    forward = affine_data.affine_matrices(2000, np.random.default_rng(0))
    # rotation @ shear @ scale: the first column is the scaled x axis, rotated.
    angle = np.degrees(np.arctan2(forward[:, 1, 0], forward[:, 0, 0]))
    assert 19 < np.abs(angle).max() <= 20
    determinant = np.linalg.det(forward)  # sx * sy
    assert 0.64 <= determinant.min() and determinant.max() <= 1.44
    # A quarter turn of one pixel about the centre (19.5, 19.5): a pixel at
    # (x, y) = (29, 19) ends at (20, 29) (x right, y down).
    image = np.zeros((1, 40, 40, 1), np.float32)
    image[0, 19, 29] = 1.0
    quarter = np.array([[[0.0, -1.0], [1.0, 0.0]]])
    turned = affine_data.warp(image, affine_data.about_centre(quarter), "NEAREST").numpy()
    assert turned[0, 29, 20, 0] == 1.0 and turned.sum() == 1.0
    identity = affine_data.about_centre(np.eye(2)[None])
    np.testing.assert_array_equal(affine_data.warp(image, identity).numpy(), image)


@same_on_every_backend
def test_affine_set_is_seeded_and_keeps_each_digit_on_the_canvas():
    affine_data = example("affine_data")
    images = affine_data.affine_test_set(digits(), seed=0)
    assert images.shape == (6, 40, 40, 1) and images.min() >= 0 and images.max() <= 1
    np.testing.assert_array_equal(images, affine_data.affine_test_set(digits(), seed=0))
    assert not np.allclose(images, affine_data.affine_test_set(digits(), seed=1))
    # The ink is scaled by sx * sy (0.64-1.44), never cut off by the canvas's
    # edge: a digit whose whole box fits is moved, not clipped.
    ratio = images.sum(axis=(1, 2, 3)) / digits().sum(axis=(1, 2, 3))
    assert np.all((0.55 < ratio) & (ratio < 1.55)), ratio
    translated = affine_data.translated_test_set(digits(), seed=0)
    assert not np.allclose(images, translated)


@same_on_every_backend
def test_training_batches_are_translated_and_keep_their_shape():
    affine_data = example("affine_data")
    moved = affine_data.random_translation(digits())
    assert tuple(moved.shape) == (6, 40, 40, 1)
    np.testing.assert_array_equal(
        np.asarray(moved).sum(axis=(1, 2, 3)), digits().sum(axis=(1, 2, 3))
    )


@same_on_every_backend
def test_bad_flags_are_refused():
    script = example("affine_robustness")
    for flags in (["--target", "0"], ["--validation-fraction", "0"]):
        with pytest.raises(SystemExit):
            script.parse_args(flags)


@on_torch
def test_smoke_run_trains_both_models_and_reports_both_test_sets(tmp_path):
    """End to end on fake MNIST: the capsule model and the CNN, each tested
    on the clean and the affine set after every epoch."""
    jit = ["--jit-compile", "false"] if BACKEND == "tensorflow" else []
    metrics = example("affine_robustness").main(["--smoke", "--output-dir", str(tmp_path), *jit])
    assert read_metrics(tmp_path)["models"]["cnn"] == metrics["models"]["cnn"]
    assert metrics["backend"] == BACKEND and sorted(metrics["models"]) == ["cnn", "efficient"]
    for name, result in metrics["models"].items():
        assert result["epochs_trained"] == 1 and len(result["curve"]) == 1, name
        for key in ("validation_accuracy", "clean_test_accuracy", "affine_test_accuracy"):
            assert 0 <= result[key] <= 1, (name, key)
        assert result["parameters"] > 0 and result["images_per_second"] > 0
        assert (tmp_path / f"training_log_{name}.csv").stat().st_size > 0
    capsules = metrics["models"]["efficient"]
    assert capsules["parameters_without_decoder"] < capsules["parameters"]
    for figure in ("affine_robustness.png", "affine_examples.png"):
        assert (tmp_path / figure).stat().st_size > 0
