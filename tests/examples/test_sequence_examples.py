"""The sequence examples on TFDS mock data (their --smoke): every model of each script
trains and is evaluated on this backend (what they learn is measured by
the scripts themselves, on real data)."""

import json

import numpy as np
import pytest

from tests.conftest import on_torch
from tests.examples.test_scripts import example

pytest.importorskip("keras_hub", reason="the BERT and ViT models need keras-hub")


@on_torch
def test_text_example_trains_every_model(tmp_path):
    """`--smoke`: fake TFDS examples, no dataset needed."""
    results = example("text_capsules").main(["--smoke", "--output-dir", str(tmp_path)])
    with open(tmp_path / "metrics.json") as f:
        assert json.load(f) == json.loads(json.dumps(results))
    assert (results["train"], results["test"]) == (24, 8)
    for name in ("bert_pooled", "bert_capsules", "capsules", "conv1d"):
        assert 0 <= results[name]["accuracy"] <= 1, name
        assert results[name]["parameters"] > 0
    # The BERT models share one backbone size: the heads make the difference.
    assert results["bert_capsules"]["parameters"] != results["bert_pooled"]["parameters"]


def test_sst2_texts_are_its_sentences_held_out_on_validation():
    data, text = example("data"), example("text_capsules")
    assert text.DATASETS["glue/sst2"] == ("sentence", "validation")
    with data.mock_data(6):
        texts, labels = text.texts_and_labels("glue/sst2", "validation", 4)
    assert len(texts) == 4 and isinstance(texts[0], str) and set(labels) <= {0, 1}


def test_word_ids_start_with_the_class_token_and_pad_with_zeros():
    words = example("text_capsules").WordIds(
        np.array(["a good film", "a bad film , bad"], dtype=object), vocabulary=100, length=8
    )
    ids = words(np.array(["good film", "an unknown word"], dtype=object))
    assert ids.shape == (2, 8) and (ids[:, 0] == words.cls).all()
    assert (ids[0, 3:] == 0).all() and (ids[0, 1:3] > 1).all()
    assert (ids[1, 1:4] == 1).all()  # out of the vocabulary


@on_torch
def test_vit_example_trains_both_heads_on_one_backbone(tmp_path):
    """`--smoke`: fake TFDS examples, no dataset needed."""
    results = example("vit_capsules").main(["--smoke", "--output-dir", str(tmp_path)])
    with open(tmp_path / "metrics.json") as f:
        assert json.load(f) == json.loads(json.dumps(results))
    assert (results["train"], results["test"]) == (16, 8)
    for name in ("vit_pooled", "vit_capsules"):
        assert 0 <= results[name]["accuracy"] <= 1, name


@on_torch
def test_mnist_sequence_example_trains_every_model(tmp_path):
    """`--smoke` on rows: fake TFDS digits, no dataset needed."""
    results = example("sequence_mnist").main(["--smoke", "--output-dir", str(tmp_path)])
    with open(tmp_path / "metrics.json") as f:
        assert json.load(f) == json.loads(json.dumps(results))
    assert (results["train"], results["test"], results["steps"]) == (24, 8, 28)
    for name in example("sequence_mnist").MODELS:
        assert 0 <= results[name]["accuracy"] <= 1, name
        assert results[name]["train_samples_per_second"] > 0
    # The two Transformers share a backbone: the heads make the difference.
    assert results["transformer_capsules"]["parameters"] > results["transformer"]["parameters"]


def test_digits_become_rows_pixels_and_one_fixed_permutation():
    data = example("data")
    images = np.random.default_rng(0).integers(0, 256, (3, 28, 28), dtype=np.uint8)
    rows = data.digit_sequences(images, "rows")
    pixels = data.digit_sequences(images[..., None], "pixels")
    permuted = data.digit_sequences(images, "permuted")
    assert rows.shape == (3, 28, 28) and pixels.shape == permuted.shape == (3, 784, 1)
    assert rows.dtype == pixels.dtype == "float32" and rows.max() <= 1.0
    np.testing.assert_array_equal(pixels[:, :, 0], rows.reshape(3, 784))
    order = data.pixel_permutation()
    assert sorted(order) == list(range(784)) and (order != np.arange(784)).any()
    np.testing.assert_array_equal(permuted[:, :, 0], pixels[:, order, 0])
    np.testing.assert_array_equal(order, data.pixel_permutation())  # fixed
    with pytest.raises(ValueError, match="form"):
        data.digit_sequences(images, "columns")
