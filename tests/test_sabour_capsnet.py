"""The Sabour CapsNet assembled from the layers: size and training."""

import keras
import numpy as np

import keras_capsules as kc
from tests.test_case import jit_compile_for_backend


def sabour_capsnet(
    input_shape=(28, 28, 1),
    num_classes=10,
    conv_filters=256,
    primary_types=32,
    decoder=(512, 1024),
    init="glorot_uniform",
    router=None,
):
    images = keras.Input(input_shape)
    labels = keras.Input((num_classes,))
    x = keras.layers.Conv2D(conv_filters, 9, activation="relu", kernel_initializer=init)(images)
    x = kc.PrimaryCapsule(primary_types, 8, 9, strides=2, kernel_initializer=init)(x)
    digits = kc.Capsule(num_classes, 16, router=router, kernel_initializer=init)(x)
    lengths = kc.Length(name="lengths")(digits)
    h = kc.Mask()([digits, labels])
    for units in decoder:
        h = keras.layers.Dense(units, activation="relu", kernel_initializer=init)(h)
    size = int(np.prod(input_shape))
    h = keras.layers.Dense(size, activation="sigmoid", kernel_initializer=init)(h)
    reconstruction = keras.layers.Reshape(input_shape, name="reconstruction")(h)
    return keras.Model([images, labels], [lengths, reconstruction])


def test_paper_parameter_count():
    # Zero initialisers: random init of 8M weights would dominate the test.
    assert sabour_capsnet(init="zeros").count_params() == 8_215_568


def test_tiny_capsnet_fits():
    model = sabour_capsnet((20, 20, 1), 3, conv_filters=8, primary_types=2, decoder=(8,))
    model.compile(
        optimizer="adam",
        loss=[kc.MarginLoss(), "mse"],
        loss_weights=[1.0, 0.392],
        jit_compile=jit_compile_for_backend(),
    )
    rng = np.random.default_rng(0)
    images = rng.uniform(size=(8, 20, 20, 1)).astype("float32")
    labels = np.eye(3, dtype="float32")[rng.integers(0, 3, 8)]
    history = model.fit([images, labels], [labels, images], batch_size=4, epochs=1, verbose=0)
    losses = history.history["loss"]
    assert len(losses) == 1 and np.isfinite(losses[0])
