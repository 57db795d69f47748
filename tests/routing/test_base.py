"""Router: which routers may be shared between layers; `remat`."""

import keras
import numpy as np
import pytest

from keras_capsules import routing
from keras_capsules.layers import Capsule
from keras_capsules.routing import DynamicRouting, EMRouting, SelfAttentionRouting
from tests.test_case import BACKEND, LayerTestCase, to_numpy


def test_a_router_without_weights_may_be_shared():
    # Documented reuse: DynamicRouting has no weights, so one instance
    # routes votes of any size (two Capsule layers of different sizes).
    router = DynamicRouting()
    first = Capsule(3, 4, router=router)(np.ones((2, 6, 4), "float32"))
    second = Capsule(2, 5, router=router)(np.ones((2, 5, 4), "float32"))
    assert tuple(first.shape) == (2, 3, 4) and tuple(second.shape) == (2, 2, 5)


@pytest.mark.parametrize("router_cls", (SelfAttentionRouting, EMRouting))
def test_a_router_with_weights_names_the_size_it_was_built_for(router_cls):
    router = router_cls()
    Capsule(3, 4, router=router)(np.ones((2, 6, 4), "float32"))
    n, in_caps = (3, 5) if router_cls is SelfAttentionRouting else (4, 6)
    with pytest.raises(ValueError, match="was built for votes with"):
        Capsule(n, 4, router=router)(np.ones((2, in_caps, 4), "float32"))


# ----------------------------------------------------------------- remat

BATCH, CHILDREN, IN_DIM, CLASSES, DIM = 2, 6, 4, 3, 4


def _remat_model(name, remat):
    """Poses and activations -> Capsule(router=name) -> both outputs."""
    router = routing.get({"class_name": name, "config": {"remat": remat}})
    poses = keras.Input((CHILDREN, IN_DIM), batch_size=BATCH)
    activations = keras.Input((CHILDREN,), batch_size=BATCH)
    outputs = Capsule(CLASSES, DIM, router=router, return_activations=True)([poses, activations])
    return keras.Model([poses, activations], list(outputs))


def _outputs_and_grads(model, inputs, jit):
    """The model's outputs and the gradients of a weighted sum of them
    w.r.t. its inputs and every trainable weight (capsule kernel, router
    weights), with the backend's autodiff; `jit`: one XLA program."""
    rng = np.random.default_rng(2)
    weights = [rng.normal(size=(BATCH, CLASSES, DIM)), rng.normal(size=(BATCH, CLASSES))]
    weights = [keras.ops.convert_to_tensor(w.astype("float32")) for w in weights]
    variables = model.trainable_variables

    def loss_of(outputs):
        return sum(keras.ops.sum(o * w) for o, w in zip(outputs, weights))

    if BACKEND == "jax":
        import jax

        def f(values, x):
            outputs, _ = model.stateless_call(values, [], x)
            return loss_of(outputs), outputs

        grad = jax.value_and_grad(f, argnums=(0, 1), has_aux=True)
        (_, outputs), (g_vars, g_inputs) = (jax.jit(grad) if jit else grad)(
            [v.value for v in variables], inputs
        )
        return [*outputs, *g_inputs, *g_vars]
    if BACKEND == "tensorflow":
        import tensorflow as tf

        def f(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                outputs = model(x)
                loss = loss_of(outputs)
            sources = [*x, *[v.value for v in variables]]
            grads = tape.gradient(loss, sources)
            return [
                *outputs,
                *(tf.zeros_like(s) if g is None else g for s, g in zip(sources, grads)),
            ]

        return (tf.function(f, jit_compile=True) if jit else f)(inputs)
    import torch

    x = [t.detach().clone().requires_grad_(True) for t in inputs]
    outputs = model(x)
    sources = [*x, *[v.value for v in variables]]
    grads = torch.autograd.grad(loss_of(outputs), sources, allow_unused=True)
    return [*outputs, *(torch.zeros_like(s) if g is None else g for s, g in zip(sources, grads))]


@pytest.mark.parametrize("jit", (False, True) if BACKEND != "torch" else (False,))
@pytest.mark.parametrize("name", routing.names())
def test_remat_keeps_outputs_and_gradients(name, jit):
    rng = np.random.default_rng(1)
    inputs = [rng.normal(size=(BATCH, CHILDREN, IN_DIM)), rng.uniform(size=(BATCH, CHILDREN))]
    inputs = [keras.ops.convert_to_tensor(x.astype("float32")) for x in inputs]
    stored, recomputed = _remat_model(name, False), _remat_model(name, True)
    # Random weights (the routers' own start at zeros or ones), shared.
    values = [rng.normal(size=w.shape).astype("float32") * 0.5 for w in stored.get_weights()]
    stored.set_weights(values)
    recomputed.set_weights(values)
    expected = _outputs_and_grads(stored, inputs, jit)
    received = _outputs_and_grads(recomputed, inputs, jit)
    # outputs (2), inputs' gradients (2), the kernel's and the router's.
    assert len(received) == len(expected) == 4 + len(stored.trainable_variables)
    assert len(stored.trainable_variables) > 1 or name in ("dynamic", "sparse_attention")
    for k, (e, r) in enumerate(zip(expected, received)):
        e, r = to_numpy(e), to_numpy(r)
        # Every gradient is nonzero but the activations' (index 3), which
        # routers that ignore activations do not use.
        assert k == 3 or np.abs(e).max() > 0
        np.testing.assert_allclose(r, e, rtol=1e-5, atol=1e-5 * np.abs(e).max())


@pytest.mark.parametrize("name", routing.names())
def test_remat_round_trips_through_the_config(name):
    router = routing.get({"class_name": name, "config": {"remat": True}})
    assert router.get_config()["remat"] is True
    assert type(router).from_config(router.get_config()).remat is True
    assert routing.get(name).get_config()["remat"] is False


def test_remat_must_be_a_bool():
    with pytest.raises(ValueError, match="Received: remat='yes'"):
        DynamicRouting(remat="yes")


class TestRematRouter(LayerTestCase):
    def test_layer(self):
        # Save/load, a jit-compiled train step and mixed precision, with remat.
        votes = np.random.default_rng(0).normal(size=(2, 6, 3, 16)).astype("float32")
        self.run_layer_test(
            EMRouting,
            {"iterations": 2, "remat": True},
            votes,
            ((2, 3, 16), (2, 3)),
            expected_num_trainable_weights=2,
            expected_num_non_trainable_weights=0,
        )
