"""CapsuleSequenceClassifier on small keras-hub backbones built from their
configs (no download): learning with the backbone frozen and fine-tuned,
the padding mask, every depth or chosen layers, saving, local presets,
mixed precision, bad arguments."""

import keras
import numpy as np
import pytest

from keras_capsules.models import CapsuleSequenceClassifier
from tests.test_case import forward, round_trip, to_numpy

keras_hub = pytest.importorskip("keras_hub", reason="keras-hub is not installed")

LENGTH = 12


def bert(seed=0):
    keras.utils.set_random_seed(seed)
    return keras_hub.models.BertBackbone(
        vocabulary_size=12, num_layers=2, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=LENGTH,
    )  # fmt: skip


def bert_inputs(tokens, mask=None):
    mask = np.ones_like(tokens) if mask is None else mask
    return {"token_ids": tokens, "segment_ids": np.zeros_like(tokens), "padding_mask": mask}


def counting_task(count, seed=0):
    """Sequences of tokens 3-9; the class: five or more tokens below 6."""
    tokens = np.random.default_rng(seed).integers(3, 10, size=(count, LENGTH)).astype("int32")
    return bert_inputs(tokens), ((tokens < 6).sum(axis=1) >= 5).astype("int32")


def weights_of(model):
    return [to_numpy(w).copy() for w in model.weights]


@pytest.mark.one_backend("torch")  # what it learns: tests/test_learning.py
def test_learns_on_a_frozen_backbone_with_the_defaults():
    backbone = bert()
    model = CapsuleSequenceClassifier(backbone, 2)
    backbone.trainable = False
    before = weights_of(backbone)
    x, y = counting_task(256)
    model.compile()
    losses = model.fit(x, y, batch_size=32, epochs=5, verbose=0).history["loss"]
    # A pooled linear head on these frozen features reaches 0.50 in 10
    # epochs at 1e-2; the capsule head 0.25 in 5 at its default 1e-3.
    assert losses[-1] < 0.6 * losses[0], losses
    for old, new in zip(before, weights_of(backbone)):
        np.testing.assert_array_equal(old, new)


def test_default_learning_rate_fine_tunes_only_pretrained_weights():
    # From scratch (the backbone trains with the head): 1e-3, as a frozen
    # backbone; 5e-5 only fine-tuning pretrained weights.
    scratch = CapsuleSequenceClassifier(bert(), 2)
    pretrained = CapsuleSequenceClassifier(bert(), 2, pretrained=True)
    assert not scratch.pretrained
    rates = {}
    for name, model in (("scratch", scratch), ("pretrained", pretrained)):
        model.compile()
        rates[name] = float(model.optimizer.learning_rate)
        model.backbone.trainable = False
        model.compile()
        rates[name + " frozen"] = float(model.optimizer.learning_rate)
    expected = {
        "scratch": 1e-3,
        "scratch frozen": 1e-3,
        "pretrained": 5e-5,
        "pretrained frozen": 1e-3,
    }
    np.testing.assert_allclose([rates[k] for k in expected], list(expected.values()), rtol=1e-6)


def test_pretrained_is_saved_and_old_files_keep_fine_tuning():
    model = CapsuleSequenceClassifier(bert(), 2, hidden_dim=16, num_parts=4, part_dim=8)
    model.compile()
    loaded = round_trip(model)
    assert loaded.get_config()["pretrained"] is False
    np.testing.assert_allclose(float(loaded.optimizer.learning_rate), 1e-3, rtol=1e-6)
    loaded.fit(*counting_task(4), verbose=0)  # resumes
    # A config saved before `pretrained` existed: 5e-5 for a trainable
    # backbone, as when it was saved.
    config = model.get_config()
    del config["pretrained"]
    old = CapsuleSequenceClassifier.from_config(config)
    assert old.pretrained
    np.testing.assert_allclose(old.default_learning_rate, 5e-5, rtol=1e-6)


@pytest.mark.one_backend("torch")  # what it learns: tests/test_learning.py
def test_fine_tunes_the_backbone_when_it_is_trainable():
    backbone = bert()
    model = CapsuleSequenceClassifier(backbone, 2, hidden_dim=32, num_parts=8, part_dim=16)
    before = weights_of(backbone)
    x, y = counting_task(32)
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    changed = [not np.array_equal(a, b) for a, b in zip(before, weights_of(backbone))]
    assert sum(changed) > len(changed) // 2


def test_a_padded_batch_gives_the_unpadded_logits():
    # Every depth: the mask is repeated over the routed depths.
    model = CapsuleSequenceClassifier(bert(), 3, hidden_dim=16, num_parts=4, part_dim=8)
    tokens = np.random.default_rng(1).integers(3, 12, size=(2, LENGTH)).astype("int32")
    short = tokens[:, :7]
    padded = np.concatenate([short, np.zeros((2, LENGTH - 7), "int32")], axis=1)
    mask = (np.arange(LENGTH) < 7)[None].repeat(2, axis=0).astype("int32")
    unpadded = to_numpy(forward(model, bert_inputs(short)))
    np.testing.assert_allclose(
        to_numpy(forward(model, bert_inputs(padded, mask))), unpadded, rtol=1e-5, atol=1e-5
    )
    # And the padding matters: without the mask the logits differ.
    assert not np.allclose(to_numpy(forward(model, bert_inputs(padded))), unpadded)


def test_routes_every_depth_or_the_named_layers():
    backbone = bert()
    assert CapsuleSequenceClassifier(backbone, 2).depth == 2
    assert CapsuleSequenceClassifier(backbone, 2, hidden_states="last").depth == 1
    named = CapsuleSequenceClassifier(
        backbone, 2, hidden_states=["embeddings_layer_norm", "transformer_layer_1"]
    )
    assert named.depth == 2
    assert tuple(named(counting_task(3)[0]).shape) == (3, 2)


def test_a_plain_keras_backbone():
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(20, 8)(tokens)
    hidden = keras.layers.Conv1D(8, 3, padding="same", name="conv")(hidden)
    model = CapsuleSequenceClassifier(keras.Model(tokens, hidden), 4, hidden_states="last")
    assert tuple(model(np.ones((2, 5), "int32")).shape) == (2, 4)
    assert not model.uses_padding_mask


def test_saves_and_loads_with_the_backbone():
    backbone = bert()
    model = CapsuleSequenceClassifier(backbone, 3, hidden_dim=16, num_parts=4, part_dim=8)
    backbone.trainable = False
    model.compile()
    x = counting_task(4)[0]
    loaded = round_trip(model)
    np.testing.assert_allclose(
        to_numpy(forward(loaded, x)), to_numpy(forward(model, x)), rtol=1e-5, atol=1e-6
    )
    assert not loaded.backbone.trainable
    assert loaded.get_config()["hidden_states"] == "all"


def test_from_a_local_preset(tmp_path):
    backbone = bert()
    backbone.save_to_preset(str(tmp_path / "preset"))
    model = CapsuleSequenceClassifier.from_preset(str(tmp_path / "preset"), num_classes=2)
    for ours, theirs in zip(model.backbone.weights, backbone.weights):
        np.testing.assert_array_equal(to_numpy(ours), to_numpy(theirs))
    assert tuple(model(counting_task(2)[0]).shape) == (2, 2)
    # Its weights loaded: fine-tuned at 5e-5; without them, trained at 1e-3.
    assert model.pretrained and model.default_learning_rate == 5e-5
    fresh = CapsuleSequenceClassifier.from_preset(
        str(tmp_path / "preset"), num_classes=2, load_weights=False
    )
    assert not fresh.pretrained and fresh.default_learning_rate == 1e-3


def test_mixed_precision_gives_finite_logits():
    backbone = bert()
    model = CapsuleSequenceClassifier(backbone, 2, dtype="mixed_bfloat16")
    logits = to_numpy(model(counting_task(2)[0])).astype("float32")
    assert np.isfinite(logits).all()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_classes=1), "num_classes=1"),
        (dict(hidden_states="first"), "hidden_states='first'"),
        (dict(hidden_states=["no_such_layer"]), "no_such_layer"),
        (dict(iterations=0), "iterations=0"),
        (dict(pretrained="yes"), "pretrained='yes'"),
    ],
)
def test_bad_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CapsuleSequenceClassifier(bert(), **{"num_classes": 2, **kwargs})


def test_bad_backbones_are_refused():
    with pytest.raises(ValueError, match="backbone"):
        CapsuleSequenceClassifier(keras.layers.Dense(3), 2)
    tokens = keras.Input((None,), dtype="int32")
    plain = keras.Model(tokens, keras.layers.Embedding(20, 8)(tokens))
    with pytest.raises(ValueError, match="transformer_layers"):
        CapsuleSequenceClassifier(plain, 2)  # hidden_states="all"
