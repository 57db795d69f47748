"""LabelSetAccuracy (exactly k labels per image) and ExactSetAccuracy (any
number): values against NumPy, images without labels, configs, errors,
use in compile."""

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
