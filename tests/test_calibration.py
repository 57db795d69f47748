"""keras_capsules.calibration.calibrate: every calibrated layer starts at
the target length (measured here with a float64 reference of the lengths),
the transforms are only rescaled, bad arguments are refused, and a network
five routed layers deep learns once calibrated."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules.calibration import calibrate

RNG = np.random.default_rng(0)


def _bars(n, classes=4, seed=0):
    """12 x 12 images with one bright horizontal bar per class (its row)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    images = rng.uniform(0, 0.2, size=(n, 12, 12, 1)).astype("float32")
    for k, label in enumerate(labels):
        images[k, 1 + 3 * label : 3 + 3 * label, 1:11] += 0.8
    return images, labels


def _stack(routed_layers, classes=4, router="dynamic"):
    """Conv -> primary capsules -> `routed_layers - 1` hidden capsule
    layers -> class capsules -> lengths."""
    images = keras.Input((12, 12, 1))
    x = keras.layers.Conv2D(16, 3, activation="relu")(images)
    x = kc.PrimaryCapsule(4, 8, 3, strides=2)(x)
    for k in range(routed_layers - 1):
        x = kc.Capsule(16, 8, router=router, name=f"hidden_{k + 1}")(x)
    x = kc.Capsule(classes, 8, router=router, name="classes")(x)
    return keras.Model(images, kc.Length()(x))


def _mean_length(model, layer_name, x):
    probe = keras.Model(model.inputs, model.get_layer(layer_name).output)
    poses = keras.ops.convert_to_numpy(probe(x, training=False)).astype("float64")
    return np.mean(np.sqrt(np.sum(poses**2, axis=-1)))


def test_every_layer_starts_at_the_target_and_only_its_scale_changes():
    keras.utils.set_random_seed(0)
    model = _stack(3)
    x, _ = _bars(64)
    kernels = {layer.name: keras.ops.convert_to_numpy(layer.kernel) for layer in model.layers
               if isinstance(layer, kc.Capsule)}  # fmt: skip
    report = calibrate(model, x, target_length=0.4, tolerance=0.01)
    assert list(report) == ["hidden_1", "hidden_2", "classes"]
    for name, row in report.items():
        # The lengths as measured by a float64 reference on the final weights.
        assert abs(_mean_length(model, name, x) - 0.4) <= 0.01 + 1e-5, name
        assert row["length"] == pytest.approx(_mean_length(model, name, x), rel=1e-5)
        kernel = keras.ops.convert_to_numpy(model.get_layer(name).kernel)
        np.testing.assert_allclose(kernel, kernels[name] * row["scale"], rtol=1e-5, atol=1e-7)
    # The stack started saturated: the first hidden layer above the knee.
    assert report["hidden_1"]["length_before"] > 0.6


def test_windowed_layers_and_return_activations_are_calibrated_orthogonal_ones_kept():
    keras.utils.set_random_seed(0)
    images = keras.Input((12, 12, 1))
    x = keras.layers.Conv2D(8, 3, activation="relu")(images)
    x = kc.PrimaryCapsule(4, 4, 3, strides=1)(x)
    x = keras.layers.Reshape((8, 8, 4, 4))(x)
    x = kc.ConvCapsule2D(4, 4, 3, strides=2, name="conv")(x)
    x = keras.layers.Reshape((-1, 4))(x)
    x = kc.Capsule(4, 4, orthogonal=True, name="orthogonal")(x)
    poses, _ = kc.Capsule(3, 4, return_activations=True, name="classes")(x)
    model = keras.Model(images, kc.Length()(poses))
    before = keras.ops.convert_to_numpy(model.get_layer("orthogonal").householder)
    x, _ = _bars(32)
    report = calibrate(model, x, tolerance=0.02)
    assert list(report) == ["conv", "classes"]
    for name in report:
        assert abs(report[name]["length"] - 0.5) <= 0.02, (name, report[name])
    after = keras.ops.convert_to_numpy(model.get_layer("orthogonal").householder)
    np.testing.assert_array_equal(after, before)


def test_under_mixed_precision_the_kernels_stay_float32():
    keras.config.set_dtype_policy("mixed_float16")
    try:
        keras.utils.set_random_seed(0)
        model = _stack(2)
        report = calibrate(model, _bars(32)[0])
    finally:
        keras.config.set_dtype_policy("float32")
    assert all(abs(row["length"] - 0.5) <= 0.02 for row in report.values()), report
    assert all(np.isfinite(row["scale"]) for row in report.values())
    assert model.get_layer("classes").kernel.dtype == "float32"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"target_length": 0.0}, "target_length=0.0"),
        ({"target_length": 1.5}, "target_length=1.5"),
        ({"target_length": "0.5"}, "target_length='0.5'"),
        ({"target_length": True}, "target_length=True"),
        ({"tolerance": 0}, "tolerance=0"),
        ({"batch_size": 0}, "batch_size=0"),
    ],
)
def test_bad_arguments_are_refused(kwargs, message):
    model = _stack(1)
    with pytest.raises(ValueError, match=message):
        calibrate(model, _bars(4)[0], **kwargs)


def test_models_without_layers_to_calibrate_are_refused():
    inputs = keras.Input((6, 4))
    plain = keras.Model(inputs, keras.layers.Dense(3)(inputs))
    with pytest.raises(ValueError, match="no capsule layer with transforms"):
        calibrate(plain, np.zeros((2, 6, 4)))
    with pytest.raises(ValueError, match="Received: model of class EfficientCapsNet"):
        calibrate(kc.models.EfficientCapsNet((16, 16, 1), 3), np.zeros((2, 16, 16, 1)))
    with pytest.raises(ValueError, match="must be a keras.Model"):
        calibrate("model", np.zeros((2, 6, 4)))


@pytest.mark.one_backend("torch")  # what it learns: tests/test_learning.py
def test_five_routed_layers_learn_once_calibrated():
    """The recipe of docs/routing.md ("Deep capsule networks"): five routed
    layers, calibrated on a batch of training data, then trained with the
    margin loss. In two epochs the loss falls far below its start and below
    0.1, and the classes are told apart. The same network with the default
    transforms, which starts saturated, ended at 0.34-0.52 on the three
    backends."""
    x, y = _bars(512)
    xt, yt = _bars(128, seed=1)
    keras.utils.set_random_seed(0)
    model = _stack(5)
    calibrate(model, x[:128])
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss=kc.MarginLoss(),
                  metrics=["accuracy"])  # fmt: skip
    losses = model.fit(x, np.eye(4)[y], batch_size=32, epochs=2, verbose=0).history["loss"]
    accuracy = model.evaluate(xt, np.eye(4)[yt], verbose=0)[1]
    assert losses[-1] < 0.2 * losses[0] and losses[-1] < 0.1, losses
    assert accuracy > 0.9, accuracy
