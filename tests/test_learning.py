"""The documented composition learns, with every router and the layers'
default initializers: `Conv2D -> PrimaryCapsule -> Capsule(router=NAME) ->
Length`, trained with `MarginLoss` and `compile()`'s defaults on a small
task with structure, generated here (strokes at random places in noise).

Each test states its bar: the class capsules start alive (mean length
between 0.05 and 0.95, every length below 1: scores that `MarginLoss` can
move), the loss falls to at most half of its first value within 200 steps
of 32 images, and the held-out accuracy ends at 80 % or more (chance:
25 %). With Keras's `glorot_uniform` and zero biases the capsules start
near length 0, where the squash passes back almost no gradient, and the
models end near chance; inverted dot-product routing's layer-normed poses
started at length ~sqrt(dim).

The same bars hold for transforms shared by all children
(`Capsule(share_weights=True)`) on tokens like a transformer's:
layer-normalised and sharing a common direction, so that their votes add
up coherently (with transforms derived for independent children the class
capsules started at length ~0.98, where the squash passes back almost no
gradient, and self-attention and sparse-attention routing stayed at
chance; EM's poses, means of alike votes, started at length ~4).

Each router's training runs on one backend per suite run (`one_backend`: a
hash of the test id picks it, so the routers spread over the three): what
it learns rests on its forward values and gradients, which the parity
tests check against float64 references on every backend, and its starting
lengths are checked on every backend by tests/test_initializers.py.
"""

import keras
import numpy as np
import pytest

import keras_capsules as kc

SIZE, CLASSES = 12, 4
STEPS, BATCH = 200, 32


def strokes(count, seed):
    """Images of one of four strokes (horizontal, vertical and both
    diagonals, 5 pixels) at a random place in uniform noise; labels are
    the stroke's class id."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, count)
    images = rng.uniform(0.0, 0.3, (count, SIZE, SIZE)).astype("float32")
    offsets = np.arange(5)
    steps = {
        0: (0 * offsets, offsets),
        1: (offsets, 0 * offsets),
        2: (offsets, offsets),
        3: (offsets, 4 - offsets),
    }
    for n, label in enumerate(labels):
        top, left = rng.integers(0, SIZE - 4, 2)
        rows, cols = steps[label]
        images[n, top + rows, left + cols] = 1.0
    return images[..., None], labels


def composition(router):
    """README "Usage" at a small width."""
    images = keras.Input((SIZE, SIZE, 1))
    x = keras.layers.Conv2D(16, 3, activation="relu")(images)
    x = kc.PrimaryCapsule(8, 8, kernel_size=3, strides=2)(x)
    digits = kc.Capsule(CLASSES, 8, router=router)(x)
    model = keras.Model(images, kc.Length()(digits))
    model.compile(optimizer="adam", loss=kc.MarginLoss(), metrics=["accuracy"])
    return model


@pytest.mark.one_backend  # see the module docstring
@pytest.mark.parametrize("router", kc.routing.names())
def test_documented_composition_learns(router):
    keras.utils.set_random_seed(1)
    model = composition(router)
    x, y = strokes(STEPS * BATCH, seed=0)
    x_test, y_test = strokes(256, seed=1)
    initial = model.predict(x_test, verbose=0)
    assert 0.05 < initial.mean() < 0.95 and initial.max() < 1.0, (
        f"{router}: initial class-capsule lengths {initial.mean():.3g} (mean), "
        f"{initial.max():.3g} (max)"
    )
    steps = _StepLosses()
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[steps])
    losses = steps.losses()
    first, last = losses[0], np.mean(losses[-8:])
    accuracy = model.evaluate(x_test, y_test, verbose=0)[1]
    assert np.all(np.isfinite(losses))
    assert last <= 0.5 * first, f"{router}: loss {first:.4f} -> {last:.4f} in {STEPS} steps"
    assert accuracy >= 0.8, f"{router}: held-out accuracy {accuracy:.3f} after {STEPS} steps"


TOKENS, FEATURES, TOKEN_STEPS = 64, 32, 200


def correlated_tokens(count, seed):
    """Tokens like a transformer's: a direction common to every token plus
    noise, layer-normalised; 8 random tokens of each sequence also carry
    the pattern of its class (4 classes)."""
    rng = np.random.default_rng(seed)
    fixed = np.random.default_rng(123)  # the same directions for every split
    common = 2.0 * fixed.normal(size=FEATURES)
    patterns = 1.5 * fixed.normal(size=(CLASSES, FEATURES))
    labels = rng.integers(0, CLASSES, count)
    x = common + rng.normal(size=(count, TOKENS, FEATURES))
    for n, label in enumerate(labels):
        x[n, rng.choice(TOKENS, 8, replace=False)] += patterns[label]
    x = (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)
    return x.astype("float32"), labels


@pytest.mark.one_backend  # see the module docstring
@pytest.mark.parametrize("router", kc.routing.names())
def test_shared_transforms_on_correlated_tokens_learn(router):
    keras.utils.set_random_seed(1)
    tokens = keras.Input((TOKENS, FEATURES))
    capsules = kc.SetPrimaryCapsule(1, 16)(tokens)
    classes = kc.Capsule(CLASSES, 16, share_weights=True, router=router)(capsules)
    model = keras.Model(tokens, kc.Length()(classes))
    model.compile(optimizer="adam", loss=kc.MarginLoss(), metrics=["accuracy"])
    x, y = correlated_tokens(TOKEN_STEPS * BATCH, seed=0)
    x_test, y_test = correlated_tokens(256, seed=1)
    initial = model.predict(x_test, verbose=0)
    assert 0.05 < initial.mean() < 0.95 and initial.max() < 1.0, (
        f"{router}: initial class-capsule lengths {initial.mean():.3g} (mean), "
        f"{initial.max():.3g} (max)"
    )
    steps = _StepLosses()
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[steps])
    losses = steps.losses()
    first, last = losses[0], np.mean(losses[-8:])
    accuracy = model.evaluate(x_test, y_test, verbose=0)[1]
    assert np.all(np.isfinite(losses))
    assert last <= 0.5 * first, f"{router}: loss {first:.4f} -> {last:.4f} in {TOKEN_STEPS} steps"
    assert accuracy >= 0.8, f"{router}: held-out accuracy {accuracy:.3f} after {TOKEN_STEPS} steps"


class _StepLosses(keras.callbacks.Callback):
    """Each step's loss: Keras logs the running mean over the epoch, which
    `losses()` undoes."""

    def on_train_begin(self, logs=None):
        self.means = []

    def on_train_batch_end(self, batch, logs=None):
        self.means.append(float(logs["loss"]))

    def losses(self):
        totals = np.array(self.means) * np.arange(1, len(self.means) + 1)
        return np.diff(totals, prepend=0.0)
