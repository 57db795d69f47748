"""A small matrix-capsule network trains on (mock) smallNORB with SpreadLoss."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from tests.conftest import jit_compile_for_backend

tfds = pytest.importorskip("tensorflow_datasets")


def matrix_capsnet(input_shape=(32, 32, 2), num_classes=5):
    """Conv 5x5/2 -> PrimaryMatrixCapsule(8) -> ConvMatrixCapsule(16, 3, /2)
    -> ConvMatrixCapsule(16, 3) -> ClassMatrixCapsule(num_classes)."""
    images = keras.Input(input_shape)
    x = keras.layers.Conv2D(16, 5, strides=2, activation="relu")(images)
    capsules = kc.PrimaryMatrixCapsule(8)(x)
    capsules = kc.ConvMatrixCapsule(16, 3, strides=2)(capsules)
    capsules = kc.ConvMatrixCapsule(16, 3)(capsules)
    _, activations = kc.ClassMatrixCapsule(num_classes)(capsules)
    return keras.Model(images, activations)


def mock_smallnorb(num_examples, size=32):
    """Both stereo images as 2 channels, block-averaged 96 -> `size`, in [0, 1]."""
    with tfds.testing.mock_data(num_examples=num_examples):
        data = tfds.load("smallnorb", split="train")
        examples = list(tfds.as_numpy(data))
    images = np.stack(
        [np.concatenate([e["image"], e["image2"]], axis=-1) for e in examples]
    ).astype("float32") / 255.0
    factor = images.shape[1] // size
    images = images.reshape(-1, size, factor, size, factor, 2).mean(axis=(2, 4))
    labels = np.eye(5, dtype="float32")[[e["label_category"] for e in examples]]
    return images, labels


def test_matrix_capsnet_trains_on_mock_smallnorb():
    images, labels = mock_smallnorb(8)
    assert images.shape == (8, 32, 32, 2) and labels.shape == (8, 5)
    model = matrix_capsnet()
    loss = kc.SpreadLoss(margin=0.2)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss,
                  jit_compile=jit_compile_for_backend())
    scheduler = kc.callbacks.SpreadLossMarginScheduler(loss, start=0.2, end=0.9, steps=2)
    history = model.fit(images, labels, batch_size=4, epochs=1, verbose=0,
                        callbacks=[scheduler])
    assert np.isfinite(history.history["loss"][0])
    assert history.history["margin"][0] == pytest.approx(0.55)
    for w in model.weights:
        assert np.all(np.isfinite(keras.ops.convert_to_numpy(w))), w.path
