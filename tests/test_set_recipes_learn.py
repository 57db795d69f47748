"""The documented recipes for sets and sequences of any size learn with
their defaults (docs/examples.md, "Sets and sequences of any size"):
`SetPrimaryCapsule -> Capsule(share_weights=True)` on point clouds as
`Input((None, 3))`, and after a GRU on padded token sequences whose class
depends on order. Before the per-sample vote scale of
`Capsule(share_weights=True)` on an unknown number of children, the class
capsules of both started saturated (lengths 0.95-0.99) and stayed at
chance."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from tests.test_case import to_numpy


def _clouds(n, seed):
    # Four classes: clouds around four centres, of 16 to 32 points, padded.
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, n)
    centres = np.array([[1, 1, 0], [1, -1, 0], [-1, 1, 0], [-1, -1, 0]], "float32")
    points = centres[labels][:, None] + rng.normal(0, 0.5, (n, 32, 3)).astype("float32")
    sizes = rng.integers(16, 33, n)
    mask = np.arange(32)[None] < sizes[:, None]
    return points * mask[..., None], mask, np.eye(4, dtype="float32")[labels]


def _tokens(n, seed):
    # The class is the marker (1-4) that comes first; another marker follows.
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, n)
    x = np.zeros((n, 10), "int32")
    for k in range(n):
        length = rng.integers(4, 11)
        tokens = rng.integers(5, 30, length)
        first, second = np.sort(rng.choice(length, 2, replace=False))
        tokens[first] = labels[k] + 1
        tokens[second] = (labels[k] + rng.integers(1, 4)) % 4 + 1
        x[k, :length] = tokens
    return x, np.eye(4, dtype="float32")[labels]


def _fit(model, x, y, epochs):
    keras.utils.set_random_seed(0)
    start = float(to_numpy(model.evaluate(x, y, verbose=0)[0]))
    model.fit(x, y, batch_size=32, epochs=epochs, verbose=0)
    return start, model.evaluate(x, y, verbose=0)


@pytest.mark.one_backend("torch")  # what it learns: tests/test_learning.py
def test_point_clouds_of_unknown_size():
    keras.utils.set_random_seed(0)
    points = keras.Input((None, 3))
    mask = keras.Input((None,), dtype="bool")
    capsules = kc.layers.SetPrimaryCapsule(8, 8)(points, mask=mask)
    classes = kc.layers.Capsule(4, 16, share_weights=True)(capsules)
    model = keras.Model([points, mask], kc.layers.Length()(classes))
    model.compile(optimizer="adam", loss=kc.losses.MarginLoss(), metrics=["accuracy"])
    x, m, y = _clouds(512, 0)
    lengths = to_numpy(model([x, m]))
    assert 0.05 < lengths.mean() < 0.6, lengths.mean()  # near the knee, not saturated
    start, (loss, accuracy) = _fit(model, [x, m], y, epochs=4)
    assert loss < 0.3 * start and accuracy > 0.9, (start, loss, accuracy)


@pytest.mark.one_backend("jax")  # what it learns: tests/test_learning.py
def test_padded_token_sequences_after_a_gru():
    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(30, 16, mask_zero=True)(tokens)
    x = keras.layers.GRU(16, return_sequences=True)(x)
    capsules = kc.layers.SetPrimaryCapsule(4, 8)(x)
    scores = kc.layers.Length()(kc.layers.Capsule(4, 16, share_weights=True)(capsules))
    model = keras.Model(tokens, scores)
    model.compile(optimizer="adam", loss=kc.losses.MarginLoss(), metrics=["accuracy"])
    x, y = _tokens(768, 1)
    start, (loss, accuracy) = _fit(model, x, y, epochs=16)
    assert loss < 0.3 * start and accuracy > 0.9, (start, loss, accuracy)


def test_the_scale_is_saved_and_old_configs_keep_unscaled_votes():
    layer = kc.layers.Capsule(4, 8, share_weights=True)
    assert layer.get_config()["scale_unknown_children"] is True
    config = layer.get_config()
    del config["scale_unknown_children"]  # as saved before 0.3.0
    assert kc.layers.Capsule.from_config(config).scale_unknown_children is False
    # Known sizes are never scaled; the factor for n children is (512 / n).
    known = kc.layers.Capsule(4, 8, share_weights=True)
    known.build((None, 6, 3))
    unknown = kc.layers.Capsule(4, 8, share_weights=True)
    unknown.build((None, None, 3))
    assert not known.scales_votes and unknown.scales_votes
    votes = keras.ops.ones((2, 6, 4, 8))
    mask = np.array([[True] * 6, [True] * 3 + [False] * 3])
    scale = to_numpy(unknown.children_scale(votes, mask)).reshape(-1)
    np.testing.assert_allclose(scale, [512 / 6, 512 / 3], rtol=1e-6)
