"""Swapping the router of the Sabour CapsNet is one argument: every router
of the library trains the tiny CapsNet for a few steps with finite loss."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from tests.test_case import jit_compile_for_backend
from tests.test_sabour_capsnet import sabour_capsnet

# Every registered router (`routing.names()`: a new router joins the test by
# registering), with the arguments that keep the test short or that the
# tiny model needs, and extra variants by name.
ARGUMENTS = {
    "dynamic": {"iterations": 2},
    "em": {"iterations": 2},
    "heinsen": {"iterations": 2},
    "sparse_attention": {"temperature": 4.0},
}
ROUTERS = {
    **{
        name: lambda n=name: kc.routing.get({"class_name": n, "config": ARGUMENTS.get(n, {})})
        for name in kc.routing.names()
    },
    "sparse_attention-top2": lambda: kc.routing.SparseAttentionRouting(top_k=2),
}


@pytest.mark.parametrize("name", sorted(ROUTERS))
def test_capsnet_trains_with_router(name):
    keras.utils.set_random_seed(0)
    model = sabour_capsnet(
        (20, 20, 1), 3, conv_filters=8, primary_types=2, decoder=(8,), router=ROUTERS[name]()
    )
    model.compile(
        optimizer="adam",
        loss=[kc.MarginLoss(), "mse"],
        loss_weights=[1.0, 0.392],
        # XLA on TF compiles each whole model slowly; every router's
        # XLA train step is already tested by its LayerTestCase test.
        jit_compile=jit_compile_for_backend(xla_on_tensorflow=False),
    )
    rng = np.random.default_rng(0)
    images = rng.uniform(size=(12, 20, 20, 1)).astype("float32")
    labels = np.eye(3, dtype="float32")[rng.integers(0, 3, 12)]
    before = [np.array(keras.ops.convert_to_numpy(w)) for w in model.trainable_weights]
    history = model.fit([images, labels], [labels, images], batch_size=4, epochs=1, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    after = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    assert all(np.all(np.isfinite(w)) for w in after)
    assert any(np.any(a != b) for a, b in zip(after, before))
