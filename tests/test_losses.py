"""MarginLoss and SpreadLoss against their formulas."""

import keras
import numpy as np
import pytest

from keras_capsules.losses import MarginLoss, SpreadLoss


def _reference(y, lengths, m_plus=0.9, m_minus=0.1, down=0.5, reduce=np.sum):
    per_class = (
        y * np.maximum(0, m_plus - lengths) ** 2
        + down * (1 - y) * np.maximum(0, lengths - m_minus) ** 2
    )
    return reduce(per_class, axis=-1).mean()


@pytest.mark.parametrize("class_reduction", ("sum", "mean"))
def test_values(class_reduction):
    rng = np.random.default_rng(0)
    y = np.eye(5)[rng.integers(0, 5, size=8)]
    lengths = rng.uniform(size=(8, 5))
    loss = MarginLoss(class_reduction=class_reduction)(y, lengths.astype("float32"))
    reduce = np.sum if class_reduction == "sum" else np.mean
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loss), _reference(y, lengths, reduce=reduce), rtol=1e-5
    )


def test_custom_margins_and_config():
    loss = MarginLoss(m_plus=0.8, m_minus=0.2, down_weight=0.25)
    restored = MarginLoss.from_config(loss.get_config())
    assert restored.get_config() == loss.get_config()
    y, lengths = np.eye(3)[[0, 2]], np.array([[0.5, 0.4, 0.1], [0.9, 0.1, 0.7]])
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(restored(y, lengths.astype("float32"))),
        _reference(y, lengths, 0.8, 0.2, 0.25),
        rtol=1e-5,
    )
    assert keras.saving.get_registered_name(MarginLoss) == "keras_capsules>MarginLoss"


def test_error():
    with pytest.raises(ValueError, match="class_reduction='max'"):
        MarginLoss(class_reduction="max")


def _spread_reference(y, a, margin):
    target = (y * a).sum(-1, keepdims=True)
    return ((1 - y) * np.maximum(0, margin - (target - a)) ** 2).sum(-1).mean()


@pytest.mark.parametrize("margin", (0.2, 0.9))
def test_spread_loss_values(margin):
    rng = np.random.default_rng(0)
    y = np.eye(5)[rng.integers(0, 5, size=8)]
    a = rng.uniform(size=(8, 5))
    loss = SpreadLoss(margin=margin)(y, a.astype("float32"))
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loss), _spread_reference(y, a, margin), rtol=1e-5
    )


def test_spread_loss_margin_is_a_non_trainable_variable_and_config_round_trips():
    loss = SpreadLoss(margin=0.3)
    assert isinstance(loss.margin, keras.Variable) and not loss.margin.trainable
    y, a = np.eye(3)[[0, 2]], np.array([[0.5, 0.4, 0.1], [0.9, 0.1, 0.7]], "float32")
    loss.margin.assign(0.6)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loss(y, a)), _spread_reference(y, a, 0.6), rtol=1e-5
    )
    restored = SpreadLoss.from_config(loss.get_config())
    assert restored.get_config() == loss.get_config()
    assert float(keras.ops.convert_to_numpy(restored.margin)) == pytest.approx(0.6)
    assert keras.saving.get_registered_name(SpreadLoss) == "keras_capsules>SpreadLoss"
