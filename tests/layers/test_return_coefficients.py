"""`return_coefficients=True` on every routed layer: `(outputs,
coefficients)` eagerly, as a second output of a functional model, under
`jit_compile`, after a `.keras` round trip; what the coefficients are."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from tests.test_case import jit_compile_for_backend, round_trip, to_numpy

RNG = np.random.default_rng(0)


def normal(*shape):
    return RNG.normal(size=shape).astype("float32")


def unit(*shape):
    return RNG.uniform(0.1, 0.9, size=shape).astype("float32")


# (name, layer factory, inputs, coefficients shape for a batch of 2)
LAYERS = [
    ("Capsule", lambda: kc.Capsule(3, 4), normal(2, 6, 5), (2, 6, 3)),
    (
        "Capsule-activations",
        lambda: kc.Capsule(3, 4, router="em", return_activations=True),
        [normal(2, 6, 5), unit(2, 6)],
        (2, 6, 3),
    ),
    (
        "ConvCapsule1D",
        lambda: kc.ConvCapsule1D(3, 4, 3, strides=2),
        normal(2, 7, 2, 5),
        (2, 3, 6, 3),
    ),
    (
        "ConvCapsule2D",
        lambda: kc.ConvCapsule2D(3, 4, 3, return_activations=True),
        normal(2, 4, 4, 2, 5),
        (2, 2, 2, 18, 3),
    ),
    (
        "LocalCapsule2D",
        lambda: kc.LocalCapsule2D(3, 4, 3, padding="same"),
        normal(2, 4, 4, 2, 5),
        (2, 4, 4, 2, 3),
    ),
    (
        "LocalDeconvCapsule2D",
        lambda: kc.LocalDeconvCapsule2D(3, 4, 4, strides=2, padding="same"),
        normal(2, 3, 3, 2, 5),
        (2, 6, 6, 2, 3),
    ),
    ("HeinsenCapsule", lambda: kc.HeinsenCapsule(3, 4), normal(2, 6, 4, 4), (2, 6, 3)),
    (
        "ConvMatrixCapsule",
        lambda: kc.ConvMatrixCapsule(2, 3),
        [normal(2, 4, 4, 2, 16), unit(2, 4, 4, 2)],
        (2, 2, 2, 18, 2),
    ),
    (
        "ClassMatrixCapsule",
        lambda: kc.ClassMatrixCapsule(3),
        [normal(2, 3, 3, 2, 16), unit(2, 3, 3, 2)],
        (2, 18, 3),
    ),
]
IDS = [name for name, *_ in LAYERS]


def symbolic(inputs):
    return (
        [keras.Input(x.shape[1:]) for x in inputs]
        if isinstance(inputs, list)
        else (keras.Input(inputs.shape[1:]))
    )


def flat(structure):
    return [to_numpy(t) for t in keras.tree.flatten(structure)]


def assert_all_close(actual, expected):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name, make, inputs, shape", LAYERS, ids=IDS)
def test_eager_call_returns_outputs_and_coefficients(name, make, inputs, shape):
    layer = make()
    plain = layer(inputs)
    outputs, coefficients = layer(inputs, return_coefficients=True)
    assert_all_close(flat(outputs), flat(plain))
    assert tuple(coefficients.shape) == shape
    input_shape = [x.shape for x in inputs] if isinstance(inputs, list) else inputs.shape
    assert layer.compute_coefficients_shape(input_shape) == shape
    assert np.all(np.isfinite(to_numpy(coefficients)))


@pytest.mark.parametrize("name, make, inputs, shape", LAYERS, ids=IDS)
def test_second_output_of_a_functional_model(name, make, inputs, shape):
    keras.utils.set_random_seed(2)
    x = symbolic(inputs)
    outputs, coefficients = make()(x, return_coefficients=True)
    assert tuple(coefficients.shape) == (None, *shape[1:])
    model = keras.Model(x, [outputs, coefficients])
    expected = flat(model(inputs))
    loaded = round_trip(model)
    assert_all_close(flat(loaded(inputs)), expected)
    model.compile(jit_compile=jit_compile_for_backend())
    assert_all_close(flat(model.predict(inputs, verbose=0)), expected)


@pytest.mark.parametrize("router", kc.routing.names())
def test_capsule_coefficients_are_the_routers(router):
    layer = kc.Capsule(3, 4, router=router)
    poses = normal(2, 6, 5)
    _, coefficients = layer(poses, return_coefficients=True)
    expected = layer.router(layer.votes(poses), None, return_coefficients=True)[2]
    np.testing.assert_allclose(to_numpy(coefficients), to_numpy(expected), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("router", kc.routing.names())
def test_what_rows_sum_to(router):
    # docs/routing.md, "Routing coefficients": every router's rows are a
    # distribution over the parents, but self-attention routing's, which
    # adds its priors after the softmax, and cross-attention routing's,
    # whose columns are a distribution over the children.
    layer = kc.Capsule(3, 4, router=router)
    poses = normal(2, 6, 5)
    layer(poses)
    if router == "self_attention":
        layer.router.priors.assign(normal(*layer.router.priors.shape))
    _, coefficients = layer(poses, return_coefficients=True)
    sums = to_numpy(coefficients).sum(1 if router == "cross_attention" else -1)
    if router == "self_attention":
        assert np.abs(sums - 1.0).max() > 0.1
    else:
        np.testing.assert_allclose(sums, 1.0, rtol=1e-5)


def test_mixed_precision_coefficients():
    layer = kc.Capsule(3, 4, dtype="mixed_bfloat16")
    _, coefficients = layer(normal(2, 6, 5), return_coefficients=True)
    assert keras.backend.standardize_dtype(coefficients.dtype) == "bfloat16"
    assert np.all(np.isfinite(to_numpy(keras.ops.cast(coefficients, "float32"))))
