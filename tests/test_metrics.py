"""LabelSetAccuracy (exactly k labels per image) and ExactSetAccuracy (any
number): values against NumPy, images without labels, configs, errors,
use in compile."""

import contextlib

import keras
import numpy as np
import pytest

import keras_capsules as kc
from tests.test_case import round_trip, to_numpy

RNG = np.random.default_rng(0)
LABELS = (RNG.uniform(size=(64, 5)) < 0.3).astype("float32")  # 0 to 5 labels
SCORES = RNG.uniform(size=(64, 5)).astype("float32")


def test_exact_set_accuracy_matches_numpy():
    metric = kc.metrics.ExactSetAccuracy(0.4)
    metric.update_state(LABELS, SCORES)
    expected = np.all((SCORES > 0.4) == (LABELS > 0.5), axis=-1).mean()
    np.testing.assert_allclose(float(metric.result()), expected, rtol=1e-6)


def test_perfect_scores_are_perfect_for_any_number_of_labels():
    # 0, 1, 2 and 3 labels: LabelSetAccuracy(k) is for exactly k labels and
    # misses the others; ExactSetAccuracy scores every image right.
    labels = np.array([[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]], "float32")
    scores = 0.1 + 0.8 * labels + np.array([0.04, 0.03, 0.02, 0.01])  # no ties
    exact = kc.metrics.ExactSetAccuracy()
    exact.update_state(labels, scores)
    assert float(exact.result()) == 1.0
    set_of_two = kc.metrics.LabelSetAccuracy(2)
    set_of_two.update_state(labels, scores)
    assert float(set_of_two.result()) == 0.25


def test_label_set_accuracy_ties_do_not_make_other_than_k_labels_right():
    # Scores that tie (an untrained or saturated model): the image with two
    # labels is right, the ones with 0, 1 and 3 are not (0.5 before: the
    # three tied top scores of the last image matched its three labels).
    labels = np.array([[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]], "float32")
    metric = kc.metrics.LabelSetAccuracy(2)
    metric.update_state(labels, 0.1 + 0.8 * labels)
    assert float(metric.result()) == 0.25
    # All scores equal: no image is right, whatever its labels.
    metric = kc.metrics.LabelSetAccuracy(2)
    metric.update_state(labels, np.full_like(labels, 0.5))
    assert float(metric.result()) == 0.0


def reference_label_set_correct(y_true, y_pred, k):
    """Float64 NumPy: exactly `k` labels, and the `k` highest scores (sorted,
    the `k`-th strictly above the next) are the labelled classes."""
    y_true, y_pred = np.float64(y_true) > 0.5, np.float64(y_pred)
    order = np.argsort(-y_pred, axis=-1, kind="stable")
    ranked = np.take_along_axis(y_pred, order, axis=-1)
    top = np.zeros_like(y_true)
    np.put_along_axis(top, order[:, :k], True, axis=-1)
    decided = (
        ranked[:, k - 1] > ranked[:, k] if y_pred.shape[-1] > k else np.ones(len(y_pred), bool)
    )
    return np.float64((y_true.sum(-1) == k) & decided & np.all(top == y_true, axis=-1))


def float64():
    """JAX computes in float32 unless 64-bit types are enabled."""
    if keras.backend.backend() == "jax":
        import jax

        return jax.enable_x64(True)
    return contextlib.nullcontext()


@pytest.mark.parametrize("k", [1, 2, 3])
def test_label_set_correct_matches_a_float64_reference(k):
    rng = np.random.default_rng(k)
    labels = np.zeros((200, 5), "float32")
    for row, count in zip(labels, rng.integers(0, 5, 200)):  # 0 to 4 labels
        row[rng.choice(5, count, replace=False)] = 1.0
    labels[:100, :] = 0.0
    for row in labels[:100]:  # half with exactly k labels
        row[rng.choice(5, k, replace=False)] = 1.0
    # Scores on a coarse grid (many ties), and perfect scores.
    scores = np.concatenate([rng.integers(0, 4, (100, 5)) / 4.0, 0.2 + 0.6 * labels[100:]])
    expected = reference_label_set_correct(labels, scores, k)
    assert 0 < expected.sum() < len(expected)
    for dtype in ("float32", "float64"):
        with float64():
            got = kc.metrics.label_set_correct(labels, scores.astype(dtype), k=k)
            np.testing.assert_array_equal(to_numpy(got), expected)
            metric = kc.metrics.LabelSetAccuracy(k, dtype=dtype)
            metric.update_state(labels, scores.astype(dtype))
            np.testing.assert_allclose(float(metric.result()), expected.mean(), rtol=1e-6)


def test_float64_scores_are_compared_in_float64():
    # Differences below float32's resolution: decided in float64, ties in
    # float32.
    labels = np.array([[1, 0, 1], [0, 0, 1]], "float32")
    scores = np.array([[0.5 + 1e-12, 0.5, 0.5 + 1e-12], [0.5, 0.5, 0.5 + 1e-12]])
    with float64():
        got = kc.metrics.label_set_correct(labels, scores, k=2)
        np.testing.assert_array_equal(to_numpy(got), [1.0, 0.0])
        np.testing.assert_array_equal(
            to_numpy(kc.metrics.exact_set_correct(labels, scores)), [1.0, 1.0]
        )
    np.testing.assert_array_equal(reference_label_set_correct(labels, scores, 2), [1.0, 0.0])
    rounded = scores.astype("float32")
    np.testing.assert_array_equal(
        to_numpy(kc.metrics.label_set_correct(labels, rounded, k=2)), [0.0, 0.0]
    )
    np.testing.assert_array_equal(
        to_numpy(kc.metrics.exact_set_correct(labels, rounded)), [0.0, 0.0]
    )


def test_sample_weight():
    metric = kc.metrics.ExactSetAccuracy()
    labels = np.array([[1, 0], [0, 1]], "float32")
    metric.update_state(labels, np.array([[0.9, 0.1], [0.9, 0.1]]), sample_weight=[3.0, 1.0])
    assert float(metric.result()) == 0.75


def test_label_set_accuracy_matches_numpy():
    labels = np.zeros((64, 5), "float32")
    for row in labels:
        row[RNG.choice(5, 2, replace=False)] = 1.0
    metric = kc.metrics.LabelSetAccuracy(2)
    metric.update_state(labels, SCORES)
    top = np.argsort(-SCORES, axis=-1)[:, :2]
    predicted = np.zeros_like(labels)
    np.put_along_axis(predicted, top, 1.0, axis=-1)
    np.testing.assert_allclose(float(metric.result()), np.all(predicted == labels, -1).mean())


@pytest.mark.parametrize(
    "metric", [kc.metrics.ExactSetAccuracy(0.3, name="exact"), kc.metrics.LabelSetAccuracy(3)]
)
def test_config_round_trip(metric):
    restored = metric.__class__.from_config(metric.get_config())
    assert restored.get_config() == metric.get_config()


@pytest.mark.parametrize("threshold", [-0.1, 1.0, float("nan"), "0.5"])
def test_bad_threshold(threshold):
    with pytest.raises(ValueError, match="threshold"):
        kc.metrics.ExactSetAccuracy(threshold)


def test_in_a_compiled_model_saved_and_loaded():
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(5, activation="sigmoid")(inputs))
    model.compile(loss="binary_crossentropy", metrics=[kc.metrics.ExactSetAccuracy()])
    x = RNG.normal(size=(64, 4)).astype("float32")
    model.fit(x, LABELS, epochs=1, verbose=0)
    value = model.evaluate(x, LABELS, verbose=0, return_dict=True)["exact_set_accuracy"]
    expected = np.all((to_numpy(model(x)) > 0.5) == (LABELS > 0.5), axis=-1).mean()
    np.testing.assert_allclose(value, expected, rtol=1e-5)
    loaded = round_trip(model)
    again = loaded.evaluate(x, LABELS, verbose=0, return_dict=True)["exact_set_accuracy"]
    np.testing.assert_allclose(again, expected, rtol=1e-5)
