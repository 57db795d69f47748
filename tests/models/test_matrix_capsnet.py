"""MatrixCapsNet: size, the spread loss in compute_loss, margin schedule, saving."""

import os
import tempfile

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules.models import MatrixCapsNet
from tests.models.test_base import check_compile_auto_and_xla_hint, check_policy_round_trip
from tests.test_case import jit_compile_for_backend

# One EM iteration keeps XLA compilation short; the layer tests route with 2.
ONE_ITERATION = {"class_name": "em", "config": {"iterations": 1}}
TINY = dict(
    conv_filters=4, primary_capsules=2, conv_capsules1=2, conv_capsules2=2, router=ONE_ITERATION
)
# XLA on TF costs minutes of compilation even for the tiny net; the margin
# inside XLA steps on TF is tested in tests/test_callbacks.py, the layers'
# XLA train steps in tests/layers/test_matrix_capsule.py. JAX compiles
# (eager JAX compiles every op).
JIT = jit_compile_for_backend(xla_on_tensorflow=False)


def spread_loss(labels, activations, margin):
    one_hot = np.eye(activations.shape[-1])[labels]
    target = (one_hot * activations).sum(-1, keepdims=True)
    return ((1 - one_hot) * np.maximum(0, margin - (target - activations)) ** 2).sum(-1).mean()


def test_paper_parameter_count():
    model = MatrixCapsNet()  # A = B = C = D = 32 on (32, 32, 2), 5 classes.
    # The input layer's name depends on how many models the process built.
    sizes = {layer.name: layer.count_params() for layer in model.network.layers[1:]}
    assert sizes == {
        "conv": 5 * 5 * 2 * 32 + 32,
        "primary_capsules": 32 * (32 * 16 + 32) + 32 * 17,
        "conv_capsules1": 3 * 3 * 32 * 32 * 16 + 2 * 32,  # + EM beta_u, beta_a
        "conv_capsules2": 3 * 3 * 32 * 32 * 16 + 2 * 32,
        "class_capsules": 32 * 5 * 16 + 2 * 5,
    }
    assert model.count_params() == 317_194
    assert [tuple(t.shape) for t in model.network.outputs] == [(None, 5, 16), (None, 5)]


def test_fit_with_margin_schedule_then_keras_round_trip():
    rng = np.random.default_rng(0)
    images = rng.normal(size=(8, 32, 32, 2)).astype("float32")
    labels = rng.integers(0, 5, size=8)
    model = MatrixCapsNet(**TINY)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), metrics=["accuracy"], jit_compile=JIT)
    scheduler = kc.callbacks.SpreadLossMarginScheduler(model.spread_loss, 0.2, 0.9, steps=2)
    before = [w.copy() for w in model.get_weights()]
    history = model.fit(images, labels, batch_size=4, epochs=1, verbose=0, callbacks=[scheduler])
    assert np.isfinite(history.history["loss"][0])
    assert history.history["margin"][0] == pytest.approx(0.55)  # step 1 of the ramp
    after = model.get_weights()
    assert all(np.all(np.isfinite(w)) for w in after)
    assert any(np.abs(a - b).max() > 0 for a, b in zip(after, before))

    activations = model.predict(images, verbose=0)  # the class activations
    assert activations.shape == (8, 5) and np.all((activations >= 0) & (activations <= 1))
    # Without a compiled loss: the model's spread loss, at the schedule's margin.
    loss = model.compute_loss(images, labels, keras.ops.convert_to_tensor(activations))
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loss), spread_loss(labels, activations, 0.55), rtol=1e-5
    )

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.keras")
        model.save(path)
        loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded) is MatrixCapsNet
    assert loaded.get_config() == model.get_config()
    # Same config and weights: the same function (predict would compile again).
    assert len(loaded.weights) == len(model.weights) == 15
    for a, b in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_compiled_loss_gets_one_hot_labels_and_router_swaps_everywhere():
    model = MatrixCapsNet(**dict(TINY, router=kc.routing.SelfRouting()))
    routers = [
        model.network.get_layer(name).router
        for name in ("conv_capsules1", "conv_capsules2", "class_capsules")
    ]
    assert all(type(r) is kc.routing.SelfRouting for r in routers)
    assert len({id(r) for r in routers}) == 3
    restored = MatrixCapsNet.from_config(model.get_config())
    assert type(restored.network.get_layer("class_capsules").router) is kc.routing.SelfRouting

    model.compile(loss=kc.SpreadLoss(margin=0.5))
    rng = np.random.default_rng(0)
    activations = rng.uniform(size=(6, 5)).astype("float32")
    labels = rng.integers(0, 5, size=6)
    for y in (labels, np.eye(5, dtype="float32")[labels]):  # ids or one-hot
        loss = model.compute_loss(None, y, keras.ops.convert_to_tensor(activations))
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(loss), spread_loss(labels, activations, 0.5), rtol=1e-5
        )


def test_compile_auto_uses_xla_on_tensorflow_cpu_and_tells_the_layers():
    model = MatrixCapsNet(**TINY)
    check_compile_auto_and_xla_hint(model, model.network.get_layer("conv"))


def test_mixed_precision_fit_has_finite_loss():
    keras.config.set_dtype_policy("mixed_float16")  # conftest restores float32
    rng = np.random.default_rng(1)
    images, labels = rng.normal(size=(4, 32, 32, 2)).astype("float32"), np.arange(4)
    model = MatrixCapsNet(**TINY)
    model.compile(optimizer="adam", jit_compile=JIT)
    loss = model.fit(images, labels, batch_size=4, verbose=0).history["loss"]
    assert np.all(np.isfinite(loss))


def test_bad_arguments_raise_value_errors():
    with pytest.raises(ValueError, match="conv_filters=0"):
        MatrixCapsNet(conv_filters=0)
    with pytest.raises(ValueError, match="iterations=0"):
        MatrixCapsNet(router={"class_name": "em", "config": {"iterations": 0}})
    with pytest.raises(ValueError, match="router"):
        MatrixCapsNet(router="emm")
    with pytest.raises(ValueError, match="implementation='fft'"):
        MatrixCapsNet(implementation="fft")
    with pytest.raises(ValueError, match="margin=0"):
        MatrixCapsNet(margin=0)
    with pytest.raises(ValueError, match="kernel_size"):
        MatrixCapsNet(input_shape=(12, 12, 2), **TINY)  # too small for the capsule grid


SIZES = dict(conv_filters=4, primary_capsules=2, conv_capsules1=2, conv_capsules2=3)


def test_sizes_and_router_are_in_the_config():
    model = kc.MatrixCapsNet(**SIZES, router=ONE_ITERATION)
    config = model.get_config()
    assert {k: config[k] for k in SIZES} == SIZES
    assert model.network.get_layer("conv").filters == 4
    assert model.network.get_layer("conv_capsules2").num_capsules == 3
    routers = [model.network.get_layer(n).router for n in ("conv_capsules1", "class_capsules")]
    assert all(r.iterations == 1 for r in routers) and routers[0] is not routers[1]
    assert "implementation" not in config and "iterations" not in config
    restored = kc.MatrixCapsNet.from_config(config)
    assert restored.get_config() == config
    # The default: EM routing with 3 iterations in every capsule layer.
    default = kc.MatrixCapsNet(**SIZES)
    assert default.get_config()["router"] is None
    assert default.network.get_layer("conv_capsules1").router.iterations == 3


@pytest.mark.parametrize("given_as", ["argument", "global"])
def test_dtype_policy_survives_keras_round_trip(given_as):
    images = np.random.default_rng(2).normal(size=(2, 32, 32, 2)).astype("float32")
    check_policy_round_trip(lambda **kwargs: MatrixCapsNet(**TINY, **kwargs), images, given_as)


def test_config_without_dtype_loads():
    model = MatrixCapsNet(**TINY)
    config = model.get_config()
    del config["dtype"]  # configs saved before the policy was kept
    assert MatrixCapsNet.from_config(config).get_config() == model.get_config()
