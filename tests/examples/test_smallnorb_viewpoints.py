"""smallNORB's novel-viewpoint splits (Hinton et al., 2018), on TFDS mock data."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from tests.conftest import BACKEND
from tests.examples.test_scripts import example, read_metrics

EXAMPLES = 60  # mock examples per split: each viewpoint subset gets some


def raw_examples(split, predicate=None):
    """The mocked TFDS examples of `split` (after `predicate`), as numpy dicts."""
    ds = tfds.load("smallnorb", split=split)
    if predicate is not None:
        ds = ds.filter(predicate)
    return list(tfds.as_numpy(ds))


def test_training_viewpoints_are_the_papers():
    """TFDS's azimuth label `a` is 20 a degrees, elevation `e` is 30 + 5 e."""
    data = example("data")
    feature, labels = data.SMALLNORB_VIEWPOINT_SPLITS["azimuth"]
    assert feature == "label_azimuth"
    assert sorted(20 * a for a in labels) == [0, 20, 40, 300, 320, 340]
    feature, labels = data.SMALLNORB_VIEWPOINT_SPLITS["elevation"]
    assert feature == "label_elevation"
    assert sorted(30 + 5 * e for e in labels) == [30, 35, 40]
    with pytest.raises(ValueError, match="Received: split='lighting'"):
        data.viewpoint_filter("lighting", True)


@pytest.mark.skipif(BACKEND != "torch", reason="tf.data code only: run once, on torch")
@pytest.mark.parametrize("split", ["azimuth", "elevation"])
def test_familiar_and_novel_viewpoints_partition_the_images(split):
    data = example("data")
    feature, labels = data.SMALLNORB_VIEWPOINT_SPLITS[split]
    with data.mock_data(EXAMPLES):
        everything = raw_examples("test")
        familiar = raw_examples("test", data.viewpoint_filter(split, True))
        novel = raw_examples("test", data.viewpoint_filter(split, False))
    assert familiar and novel
    assert all(e[feature] in labels for e in familiar)
    assert all(e[feature] not in labels for e in novel)
    assert len(familiar) + len(novel) == len(everything)


@pytest.mark.skipif(BACKEND != "torch", reason="tf.data code only: run once, on torch")
def test_viewpoint_split_trains_and_validates_on_familiar_viewpoints_only():
    """`--split azimuth`: training and validation batches hold the familiar
    viewpoints' images; the test sets are the test split's familiar and
    novel images, prepared for testing (the same batches twice)."""
    common, data = example("common"), example("data")
    module = example("smallnorb_efficient_capsnet")
    args = common.parse_args(
        "smallnorb",
        1,
        4,
        add_arguments=data.add_smallnorb_arguments,
        argv=["--split", "azimuth", "--validation-fraction", "0.2"],
    )
    predicate = data.viewpoint_filter("azimuth", True)
    with data.mock_data(EXAMPLES):
        train, validation, test = module.load_data(args, 4)
        familiar_train = raw_examples("train[:80%]", predicate)
        familiar_validation = raw_examples("train[80%:]", predicate)
        familiar_test = raw_examples("test", predicate)
        novel_test = raw_examples("test", data.viewpoint_filter("azimuth", False))
        assert sorted(test) == ["familiar_viewpoints", "novel_viewpoints"]
        counts = [
            sum(int(tf.shape(labels)[0]) for _, labels in ds)
            for ds in (train, validation, test["familiar_viewpoints"], test["novel_viewpoints"])
        ]
        assert counts == [
            len(familiar_train),
            len(familiar_validation),
            len(familiar_test),
            len(novel_test),
        ]
        novel_labels = np.concatenate(
            [labels for _, labels in tfds.as_numpy(test["novel_viewpoints"])]
        )
        np.testing.assert_array_equal(novel_labels, [e["label_category"] for e in novel_test])
        first, again = (
            [np.asarray(images) for images, _ in test["novel_viewpoints"]] for _ in range(2)
        )
        np.testing.assert_array_equal(np.concatenate(first), np.concatenate(again))


@pytest.mark.skipif(BACKEND != "torch", reason="the example's model is tested on every backend")
def test_smoke_run_reports_familiar_and_novel_viewpoint_accuracies(tmp_path):
    flags = ["--capsules", "4", "2", "2", "2", "--iterations", "1", "--split", "elevation"]
    module = example("smallnorb_matrix_capsnet")
    metrics = module.main(["--smoke", "--output-dir", str(tmp_path), *flags])
    assert (
        read_metrics(tmp_path)["test_novel_viewpoints_accuracy"]
        == (metrics["test_novel_viewpoints_accuracy"])
    )
    assert metrics["split"] == "elevation"
    assert sorted(metrics["test_sets"]) == ["familiar_viewpoints", "novel_viewpoints"]
    for name in metrics["test_sets"]:
        result = metrics["test_sets"][name]
        assert metrics[f"test_{name}_accuracy"] == result["accuracy"]
        assert 0 <= result["accuracy"] <= 1 and np.isfinite(result["loss"])
    assert metrics["test_accuracy"] == metrics["test_familiar_viewpoints_accuracy"]
    assert (
        metrics["test_sets"]["novel_viewpoints"]["loss"]
        != (metrics["test_sets"]["familiar_viewpoints"]["loss"])
    )
