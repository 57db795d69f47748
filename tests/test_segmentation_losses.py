"""WeightedBinaryCrossentropy, SoftDiceLoss and DiceCoefficient against
their formulas, at saturated scores, in half precision, saved and loaded,
and training a one-layer segmenter."""

import os
import re
import tempfile

import keras
import numpy as np
import pytest

from keras_capsules.losses import SoftDiceLoss, WeightedBinaryCrossentropy
from keras_capsules.metrics import DiceCoefficient, dice_coefficient
from tests.test_case import gradients, to_numpy

SHAPE = (3, 4, 5, 2)  # (batch, height, width, classes)


def _data(shape=SHAPE, seed=0):
    rng = np.random.default_rng(seed)
    y = (rng.uniform(size=shape) < 0.3).astype("float32")
    p = rng.uniform(0.01, 0.99, size=shape).astype("float32")
    return y, p


def _wbce_reference(y, p, positive_weight=1.0, epsilon=1e-7):
    """Per image, float64."""
    y, p = np.float64(y), np.clip(np.float64(p), epsilon, 1 - epsilon)
    per_element = -(positive_weight * y * np.log(p) + (1 - y) * np.log(1 - p))
    return per_element.reshape(len(y), -1).mean(-1)


def _wbce_logits_reference(y, x, positive_weight=1.0):
    """Per image, float64, from logits."""
    y, x = np.float64(y), np.float64(x)
    log_p, log_not_p = -np.logaddexp(0, -x), -np.logaddexp(0, x)
    per_element = -(positive_weight * y * log_p + (1 - y) * log_not_p)
    return per_element.reshape(len(y), -1).mean(-1)


def _dice_reference(y, p, smooth, threshold=None):
    """Per image (mean over classes), float64; thresholded if `threshold`."""
    y, p = np.float64(y), np.float64(p)
    if threshold is not None:
        y, p = np.float64(y > threshold), np.float64(p > threshold)
    axes = tuple(range(1, y.ndim - 1))
    dice = (2 * (y * p).sum(axes) + smooth) / (p.sum(axes) + y.sum(axes) + smooth)
    return dice.mean(-1)


def _value(x):
    return to_numpy(x)


@pytest.mark.parametrize("positive_weight", (1.0, 3.5))
def test_weighted_bce_values(positive_weight):
    y, p = _data()
    reference = _wbce_reference(y, p, positive_weight)
    loss = WeightedBinaryCrossentropy(positive_weight=positive_weight)
    np.testing.assert_allclose(_value(loss(y, p)), reference.mean(), rtol=1e-5)
    per_image = WeightedBinaryCrossentropy(positive_weight=positive_weight, reduction=None)
    np.testing.assert_allclose(_value(per_image(y, p)), reference, rtol=1e-5)


def test_weighted_bce_with_weight_one_is_keras_binary_crossentropy():
    y, p = _data()
    np.testing.assert_allclose(
        _value(WeightedBinaryCrossentropy()(y, p)),
        _value(keras.losses.BinaryCrossentropy()(y, p)),
        rtol=1e-5,
    )


@pytest.mark.parametrize("positive_weight", (1.0, 3.5))
def test_from_logits_equals_scores_of_sigmoid_logits(positive_weight):
    y, _ = _data()
    logits = np.random.default_rng(1).normal(0, 2, size=SHAPE).astype("float32")
    scores = (1 / (1 + np.exp(-np.float64(logits)))).astype("float32")
    from_logits = WeightedBinaryCrossentropy(positive_weight, from_logits=True)(y, logits)
    from_scores = WeightedBinaryCrossentropy(positive_weight)(y, scores)
    np.testing.assert_allclose(_value(from_logits), _value(from_scores), rtol=1e-5)
    np.testing.assert_allclose(
        _value(from_logits), _wbce_logits_reference(y, logits, positive_weight).mean(), rtol=1e-5
    )


def test_from_logits_is_stable_for_huge_logits():
    y = np.array([[[[1.0], [0.0], [1.0], [0.0]]]], "float32")
    logits = np.array([[[[1e4], [-1e4], [-100.0], [100.0]]]], "float32")
    loss = WeightedBinaryCrossentropy(2.0, from_logits=True, reduction=None)
    # 0, 0, 2 * 100, 100 (softplus(100) = 100 in float32), over 4 pixels.
    np.testing.assert_allclose(_value(loss(y, logits)), [75.0], rtol=1e-5)


def test_positive_weight_doubles_the_foreground_part():
    y, p = _data()
    foreground = (-np.float64(y) * np.log(np.float64(p))).reshape(len(y), -1).mean(-1).mean()
    one = _value(WeightedBinaryCrossentropy(1.0)(y, p))
    two = _value(WeightedBinaryCrossentropy(2.0)(y, p))
    np.testing.assert_allclose(two - one, foreground, rtol=1e-4)
    ones = np.ones_like(y)
    np.testing.assert_allclose(
        _value(WeightedBinaryCrossentropy(2.0)(ones, p)),
        2 * _value(WeightedBinaryCrossentropy(1.0)(ones, p)),
        rtol=1e-6,
    )
    zeros = np.zeros_like(y)  # No foreground: the weight changes nothing.
    np.testing.assert_allclose(
        _value(WeightedBinaryCrossentropy(2.0)(zeros, p)),
        _value(WeightedBinaryCrossentropy(1.0)(zeros, p)),
        rtol=1e-6,
    )


@pytest.mark.parametrize("smooth", (1e-5, 1.0))
def test_soft_dice_loss_values(smooth):
    y, p = _data()
    y[0] = 0.0  # An image without foreground in either class.
    reference = 1 - _dice_reference(y, p, smooth)
    np.testing.assert_allclose(_value(SoftDiceLoss(smooth)(y, p)), reference.mean(), rtol=1e-5)
    per_image = SoftDiceLoss(smooth, reduction=None)(y, p)
    np.testing.assert_allclose(_value(per_image), reference, rtol=1e-5)


@pytest.mark.parametrize("threshold", (0.5, 0.3))
def test_dice_coefficient_values(threshold):
    y, p = _data()
    reference = _dice_reference(y, p, 1e-5, threshold)
    np.testing.assert_allclose(
        _value(dice_coefficient(y, p, threshold=threshold)), reference, rtol=1e-5
    )
    metric = DiceCoefficient(threshold=threshold)
    metric.update_state(y[:2], p[:2])
    metric.update_state(y[2:], p[2:])
    np.testing.assert_allclose(_value(metric.result()), reference.mean(), rtol=1e-5)


def test_perfect_and_empty_predictions():
    y, _ = _data()
    y[0, ..., 0] = 1.0  # Every pixel foreground in one class of one image.
    np.testing.assert_allclose(_value(dice_coefficient(y, y)), np.ones(len(y)), rtol=1e-6)
    np.testing.assert_allclose(_value(SoftDiceLoss()(y, y)), 0.0, atol=1e-6)
    empty = np.zeros(SHAPE, "float32")
    np.testing.assert_allclose(_value(dice_coefficient(empty, empty)), np.ones(len(y)), rtol=1e-6)
    np.testing.assert_allclose(_value(SoftDiceLoss()(empty, empty)), 0.0, atol=1e-6)
    # Scores below the threshold are an empty prediction.
    np.testing.assert_allclose(
        _value(dice_coefficient(empty, np.full(SHAPE, 0.4, "float32"))), np.ones(len(y))
    )
    # Everything missed: Dice ~0.
    assert np.all(_value(dice_coefficient(np.ones(SHAPE, "float32"), empty)) < 1e-6)


def test_sample_weight():
    y, p = _data()
    weights = np.array([0.5, 0.0, 2.0], "float32")
    wbce = _wbce_reference(y, p, 2.0)
    np.testing.assert_allclose(
        _value(WeightedBinaryCrossentropy(2.0)(y, p, sample_weight=weights)),
        (weights * wbce).sum() / len(y),  # "sum_over_batch_size"
        rtol=1e-5,
    )
    dice = 1 - _dice_reference(y, p, 1e-5)
    np.testing.assert_allclose(
        _value(SoftDiceLoss(reduction="sum")(y, p, sample_weight=weights)),
        (weights * dice).sum(),
        rtol=1e-5,
    )
    metric = DiceCoefficient()
    metric.update_state(y, p, sample_weight=weights)
    hard = _dice_reference(y, p, 1e-5, 0.5)
    np.testing.assert_allclose(
        _value(metric.result()), (weights * hard).sum() / weights.sum(), rtol=1e-5
    )


def _saturated():
    """Scores of exactly 0 and 1 against both mask values."""
    y = np.array([[[[1.0], [0.0], [1.0], [0.0], [1.0]]]], "float32")
    p = np.array([[[[0.0], [0.0], [1.0], [1.0], [0.5]]]], "float32")
    return y, p


LOSSES = {
    "wbce": lambda: WeightedBinaryCrossentropy(positive_weight=3.0),
    "wbce_logits": lambda: WeightedBinaryCrossentropy(positive_weight=3.0, from_logits=True),
    "dice": lambda: SoftDiceLoss(),
}


@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_finite_values_and_gradients_at_saturated_scores(name, dtype):
    y, p = _saturated()
    if name == "wbce_logits":
        p = (p - 0.5) * 2e4 if dtype == "float32" else (p - 0.5) * 2e3  # +-1e4 (+-1e3)
    loss = LOSSES[name]()
    tensors = {
        "y": keras.ops.convert_to_tensor(y, dtype),
        "p": keras.ops.convert_to_tensor(p, dtype),
    }
    value = loss(tensors["y"], tensors["p"])
    assert keras.backend.standardize_dtype(value.dtype) == "float32"
    assert np.isfinite(_value(value))
    grads = gradients(lambda t: loss(t["y"], t["p"]), tensors, ("p",))
    assert keras.backend.standardize_dtype(grads["p"].dtype) == dtype
    assert np.all(np.isfinite(_value(grads["p"])))
    # The clipped cross-entropy equals its float64 formula, in half precision too.
    if name == "wbce":
        np.testing.assert_allclose(_value(value), _wbce_reference(y, p, 3.0).mean(), rtol=1e-5)


def test_half_precision_inputs_give_the_float32_value():
    y, p = _data()
    for dtype in ("float16", "bfloat16"):
        rounded = _value(keras.ops.convert_to_tensor(p, dtype))
        for loss in (WeightedBinaryCrossentropy(2.0), SoftDiceLoss()):
            np.testing.assert_allclose(
                _value(loss(y, keras.ops.convert_to_tensor(p, dtype))),
                _value(loss(y, rounded.astype("float32"))),
                rtol=1e-6,
            )


def test_serialization_round_trip():
    objects = (
        WeightedBinaryCrossentropy(
            positive_weight=4.0, from_logits=True, epsilon=1e-6, reduction="sum", name="wbce"
        ),
        SoftDiceLoss(smooth=0.5, reduction=None),
        DiceCoefficient(threshold=0.3, smooth=1e-3, name="dice_30"),
    )
    for obj in objects:
        config = keras.saving.serialize_keras_object(obj)
        assert config["registered_name"] == f"keras_capsules>{type(obj).__name__}"
        restored = keras.saving.deserialize_keras_object(config)
        assert type(restored) is type(obj)
        assert restored.get_config() == obj.get_config()
        restored = type(obj).from_config(obj.get_config())
        assert restored.get_config() == obj.get_config()
    assert objects[2].get_config() == {
        "threshold": 0.3,
        "smooth": 1e-3,
        "name": "dice_30",
        "dtype": "float32",
    }


# An untrained model's optimizer holds fewer variables than the loaded one.
@pytest.mark.filterwarnings("ignore:Skipping variable loading for optimizer")
@pytest.mark.parametrize("name", ("wbce", "dice"))
def test_compiled_model_saves_and_loads_in_safe_mode(name):
    keras.utils.set_random_seed(0)
    loss = WeightedBinaryCrossentropy(positive_weight=2.5) if name == "wbce" else SoftDiceLoss(0.1)
    model = _segmenter()
    model.compile(
        optimizer="adam", loss=loss, metrics=[DiceCoefficient(threshold=0.4, name="dice_40")]
    )
    x, y = _segmentation_task(8)
    expected = model.evaluate(x, y, verbose=0, return_dict=True)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "segmenter.keras")
        model.save(path)
        loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded.loss) is type(loss)
    assert loaded.loss.get_config() == loss.get_config()
    result = loaded.evaluate(x, y, verbose=0, return_dict=True)
    assert set(result) == {"loss", "dice_40"}
    for key, value in expected.items():
        np.testing.assert_allclose(result[key], value, rtol=1e-5)


@pytest.mark.parametrize(
    "make, argument, value",
    [
        (WeightedBinaryCrossentropy, "positive_weight", -1),
        (WeightedBinaryCrossentropy, "positive_weight", 0.0),
        (WeightedBinaryCrossentropy, "positive_weight", float("inf")),
        (WeightedBinaryCrossentropy, "positive_weight", "2"),
        (WeightedBinaryCrossentropy, "from_logits", "yes"),
        (WeightedBinaryCrossentropy, "from_logits", 1),
        (WeightedBinaryCrossentropy, "epsilon", 0.0),
        (WeightedBinaryCrossentropy, "epsilon", 0.5),
        (SoftDiceLoss, "smooth", 0.0),
        (SoftDiceLoss, "smooth", -1e-5),
        (DiceCoefficient, "threshold", 1.0),
        (DiceCoefficient, "threshold", -0.1),
        (DiceCoefficient, "threshold", None),
        (DiceCoefficient, "smooth", 0),
    ],
)
def test_bad_arguments(make, argument, value):
    with pytest.raises(ValueError, match=re.escape(f"Received: {argument}={value!r}")):
        make(**{argument: value})


def test_soft_dice_needs_a_spatial_axis():
    with pytest.raises(ValueError, match=re.escape("Received: y_pred.shape=(2, 3)")):
        SoftDiceLoss()(np.zeros((2, 3)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match=re.escape("Received: y_pred.shape=(2, 3)")):
        dice_coefficient(np.zeros((2, 3)), np.zeros((2, 3)))


def _segmenter():
    return keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(1, 3, padding="same", activation="sigmoid"),
        ]
    )


def _segmentation_task(n, seed=0):
    """Random images, foreground where a pixel is above the middle value.

    Centred pixels: with all inputs positive every kernel weight gets the
    bias's gradient sign at first, and soft Dice drives the segmenter to
    all-foreground (Dice 2/3 on half-foreground masks), where the sigmoid
    saturates."""
    x = np.random.default_rng(seed).uniform(-1, 1, size=(n, 8, 8, 1)).astype("float32")
    return x, (x > 0).astype("float32")


@pytest.mark.parametrize("name", ("wbce", "dice"))
def test_a_one_layer_segmenter_learns(name):
    keras.utils.set_random_seed(0)
    x, y = _segmentation_task(32)
    positive_weight = float((1 - y).sum() / y.sum())  # SegCaps: background / foreground
    loss = WeightedBinaryCrossentropy(positive_weight) if name == "wbce" else SoftDiceLoss()
    model = _segmenter()
    model.compile(optimizer=keras.optimizers.Adam(0.1), loss=loss, metrics=[DiceCoefficient()])
    history = model.fit(x, y, batch_size=32, epochs=30, verbose=0).history
    losses = history["loss"]
    assert np.all(np.isfinite(losses))
    # Seeds 0-3 on each backend: 0.38-0.41 (cross-entropy), 0.48-0.51 (Dice).
    assert losses[-1] < 0.7 * losses[0], losses
    if name == "wbce":  # Soft Dice gets to Dice 0.7-0.86 in 30 steps.
        assert history["dice"][-1] > 0.9, history["dice"]
