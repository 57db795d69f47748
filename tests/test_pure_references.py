"""The pure-framework CapsNets of benchmarks/train_step.py compute our CapsNet.

From the Keras model's own weights, on a batch of 2: the same parameter
count, the same first-step loss and the same gradients for every weight.
The references do not depend on the Keras backend and the parity matrix
makes the backends agree, so this runs once, on torch, where the Keras
model's gradient is cheapest (on JAX compiling it alone took over a minute;
the TensorFlow run spent 40 s here).
"""

import functools
import os
import sys

import keras
import numpy as np
import pytest

from keras_capsules.models import CapsNet
from tests.test_case import gradients

if keras.backend.backend() != "torch":
    pytest.skip(
        "the references do not depend on the backend: checked once, on torch",
        allow_module_level=True,
    )

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks"))
import capsnet_spec  # noqa: E402


@pytest.fixture(scope="module")
def keras_capsnet():
    """CapsNet(), its weights by spec name, a batch, and loss and gradients."""
    model = CapsNet()
    # Primary capsules of norm ~0.5 (not ~0.01) and votes of norm ~1: then
    # each routing iteration changes the loss (by ~3%), not only the 7th digit.
    for variable, scale in (
        (model.features.get_layer("primary").kernel, 10.0),
        (model.class_capsules.kernel, 30.0),
    ):
        variable.assign(variable * scale)
    weights = capsnet_spec.keras_weights(model)
    images, labels = capsnet_spec.batches(2, count=1, seed=1)[0]
    x, y = keras.ops.convert_to_tensor(images), keras.ops.convert_to_tensor(labels)
    variables = capsnet_spec.keras_variables(model)

    def loss_fn(values):
        mapping = [(variables[k], values[k]) for k in variables]
        with keras.StatelessScope(state_mapping=mapping):
            return model.compute_loss(x, y, model(x, training=True))

    tensors = {k: keras.ops.convert_to_tensor(w) for k, w in weights.items()}
    loss = float(keras.ops.convert_to_numpy(loss_fn(tensors)))
    grads = gradients(loss_fn, tensors, tuple(tensors))
    grads = {k: np.asarray(keras.ops.convert_to_numpy(g)) for k, g in grads.items()}
    return model, weights, (images, labels), loss, grads


def assert_same(loss, grads, ref_loss, ref_grads):
    np.testing.assert_allclose(ref_loss, loss, rtol=1e-5)
    for name, grad in grads.items():
        scale = np.abs(grad).max() + 1e-12
        np.testing.assert_allclose(ref_grads[name] / scale, grad / scale, atol=1e-4, err_msg=name)


def test_spec_matches_keras_capsnet(keras_capsnet):
    model, weights, *_ = keras_capsnet
    assert {k: w.shape for k, w in weights.items()} == capsnet_spec.SHAPES
    assert capsnet_spec.count_params(weights) == model.count_params() == capsnet_spec.NUM_PARAMS
    assert capsnet_spec.count_params(capsnet_spec.init_weights()) == capsnet_spec.NUM_PARAMS


@pytest.mark.parametrize("primary", ["conv", "matmul"])
def test_pure_torch_capsnet(keras_capsnet, primary):
    torch = pytest.importorskip("torch")
    from pure_torch_capsnet import PureTorchCapsNet, to_nchw

    _, weights, (images, labels), loss, grads = keras_capsnet
    model = PureTorchCapsNet(weights, primary)
    assert sum(p.numel() for p in model.parameters()) == capsnet_spec.NUM_PARAMS
    assert_same(loss, grads, *_torch_loss_and_grads(torch, model, to_nchw(images), labels))
    np.testing.assert_array_equal(
        model.keras_layout(dict(model.weight))["primary_kernel"], weights["primary_kernel"]
    )


def _torch_loss_and_grads(torch, model, images, labels):
    ref_loss = model.loss(images, torch.from_numpy(labels))
    ref_loss.backward()
    return float(ref_loss.detach()), model.keras_layout(
        {k: p.grad for k, p in model.weight.items()}
    )


@pytest.mark.parametrize("primary", ["matmul", "conv"])
def test_pure_jax_capsnet(keras_capsnet, primary):
    jax = pytest.importorskip("jax")
    import pure_jax_capsnet as ref

    _, weights, (images, labels), loss, grads = keras_capsnet
    ref_loss, ref_grads = jax.jit(
        jax.value_and_grad(functools.partial(ref.loss_fn, primary=primary))
    )(ref.to_params(weights), images, labels)
    assert_same(loss, grads, float(ref_loss), {k: np.asarray(g) for k, g in ref_grads.items()})


def test_pure_jax_adam_is_keras_adam():
    jax = pytest.importorskip("jax")
    import pure_jax_capsnet as ref

    rng = np.random.default_rng(0)
    w, g1, g2 = (rng.normal(size=(3, 4)).astype("float32") for _ in range(3))
    var = keras.Variable(w)
    optimizer = keras.optimizers.Adam(**capsnet_spec.ADAM)
    params, state = {"w": jax.numpy.asarray(w)}, ref.init_adam({"w": w})
    for g in (g1, g2):
        optimizer.apply([keras.ops.convert_to_tensor(g)], [var])
        params, state = ref.adam_update(params, {"w": g}, state)
    np.testing.assert_allclose(
        np.asarray(params["w"]), keras.ops.convert_to_numpy(var), rtol=1e-6, atol=1e-7
    )
