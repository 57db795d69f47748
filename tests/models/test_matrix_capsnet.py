"""MatrixCapsNet: the model harness, size, the spread loss in compute_loss,
the margin schedule, router swaps."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules.models import MatrixCapsNet
from tests.models.builders import ONE_EM_ITERATION, TINY_MATRIX, tiny_matrix_capsnet
from tests.test_case import ModelTestCase, jit_compile_for_backend, to_numpy

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


class TestMatrixCapsNet(ModelTestCase):
    def test_model_with_margin_schedule(self):
        rng = np.random.default_rng(0)
        images = rng.normal(size=(8, 32, 32, 2)).astype("float32")
        labels = rng.integers(0, 5, size=8)
        run = self.run_model_test(
            tiny_matrix_capsnet,
            images,
            labels,
            (8, 5),
            jit_compile=JIT,
            batch_size=4,
            callbacks=lambda model: [
                kc.callbacks.SpreadLossMarginScheduler(model.spread_loss, 0.2, 0.9, steps=4)
            ],
        )
        # Logged after steps 1 and 3 (2 per epoch) of the ramp.
        assert run.history["margin"] == pytest.approx([0.375, 0.725])
        model = run.model
        after = [to_numpy(w) for w in model.weights]
        assert all(np.all(np.isfinite(w)) for w in after)
        assert any(np.abs(a - run.initial(w)).max() > 0 for a, w in zip(after, model.weights))

        activations = run.predictions  # the class activations
        assert np.all((activations >= 0) & (activations <= 1))
        # Without a compiled loss: the model's spread loss, at the schedule's margin.
        loss = model.compute_loss(images, labels, keras.ops.convert_to_tensor(activations))
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(loss), spread_loss(labels, activations, 0.725), rtol=1e-5
        )
        assert len(run.loaded.weights) == len(model.weights) == 15


def test_compiled_loss_gets_one_hot_labels_and_router_swaps_everywhere():
    model = MatrixCapsNet(**dict(TINY_MATRIX, router=kc.routing.SelfRouting()))
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


def test_mixed_precision_fit_has_finite_loss():
    keras.config.set_dtype_policy("mixed_float16")  # conftest restores float32
    rng = np.random.default_rng(1)
    images, labels = rng.normal(size=(4, 32, 32, 2)).astype("float32"), np.arange(4)
    model = tiny_matrix_capsnet()
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
        MatrixCapsNet(input_shape=(12, 12, 2), **TINY_MATRIX)  # too small for the capsule grid


SIZES = dict(conv_filters=4, primary_capsules=2, conv_capsules1=2, conv_capsules2=3)


def test_sizes_and_router_are_in_the_config():
    model = kc.MatrixCapsNet(**SIZES, router=ONE_EM_ITERATION)
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


def test_config_without_dtype_loads():
    model = tiny_matrix_capsnet()
    config = model.get_config()
    del config["dtype"]  # configs saved before the policy was kept
    assert MatrixCapsNet.from_config(config).get_config() == model.get_config()
