"""VectorRouting (Heinsen, 2022): the float64 reference, the author's own
module (fixtures), masks (a padded batch gives the unpadded outputs), bad
inputs, finiteness, the layer harness, and learning on sequences."""

import pathlib

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules.convert import vector_routing as convert
from keras_capsules.layers import VectorRouting
from tests.reference.vector_routing import vector_routing
from tests.test_case import LayerTestCase, gradients, to_numpy

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
X = np.random.default_rng(0).normal(size=(2, 6, 4)).astype("float32")


def _weights(layer):
    return {v.name: to_numpy(v).astype("float64") for v in layer.weights}


class TestVectorRouting(LayerTestCase):
    def test_layer(self):
        self.run_layer_test(
            VectorRouting,
            {"num_capsules": 3, "capsule_dim": 5},
            X,
            (2, 3, 5),
            expected_num_trainable_weights=14,
            expected_num_non_trainable_weights=0,
        )

    def test_layer_with_fixed_inputs(self):
        self.run_layer_test(
            VectorRouting,
            {"num_capsules": 3, "capsule_dim": 5, "num_inputs": 6, "iterations": 3},
            X,
            (2, 3, 5),
            expected_num_trainable_weights=12,
            expected_num_non_trainable_weights=0,
            run_mixed_precision_check=False,
        )


@pytest.mark.parametrize("num_inputs", [None, 6])
@pytest.mark.parametrize("iterations", [1, 2, 3])
def test_matches_float64_reference(num_inputs, iterations):
    layer = VectorRouting(3, 5, iterations=iterations, num_inputs=num_inputs)
    outputs, phi = layer(X, return_coefficients=True)
    expected, expected_phi = vector_routing(X.astype("float64"), _weights(layer), None, iterations)
    np.testing.assert_allclose(to_numpy(outputs), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(to_numpy(phi), expected_phi, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("capsule_dim", [1, 4])
def test_without_normalization_and_with_one_dimension(capsule_dim):
    layer = VectorRouting(2, capsule_dim, normalize=False)
    expected, _ = vector_routing(X.astype("float64"), _weights_after_call(layer), normalize=False)
    np.testing.assert_allclose(to_numpy(layer(X)), expected, rtol=1e-5, atol=1e-6)


def _weights_after_call(layer):
    layer(X)
    return _weights(layer)


@pytest.mark.parametrize("name", ["fixed", "any"])
def test_the_authors_module_gives_the_same_outputs(name):
    # Their EfficientVectorRouting, run in float64 with seeded weights
    # (tests/fixtures/README.md); ours loads their state dict as it is.
    data = np.load(FIXTURES / f"vector_routing_{name}.npz")
    num_inputs = 5 if name == "fixed" else None
    lengths = sorted(int(k[2:]) for k in data.files if k.startswith("x_") and "out" not in k)
    out_shape = data[f"x_out_{lengths[0]}"].shape
    layer = VectorRouting(
        out_shape[1], out_shape[2], iterations=2 if name == "fixed" else 3, num_inputs=num_inputs
    )
    convert.load_authors_weights(layer, FIXTURES / f"vector_routing_{name}.pt")
    for length in lengths:
        outputs, phi = layer(data[f"x_{length}"], return_coefficients=True)
        expected = data[f"x_out_{length}"]
        np.testing.assert_allclose(to_numpy(outputs), expected, rtol=1e-5, atol=1e-5)
        expected_phi = data[f"phi_{length}"]
        np.testing.assert_allclose(
            to_numpy(phi), expected_phi, rtol=1e-5, atol=1e-5 * np.abs(expected_phi).max()
        )


def test_a_padded_batch_with_its_mask_gives_the_unpadded_outputs():
    # Token ids, 0 = padding: Embedding(mask_zero=True) passes the mask on.
    ids = np.array([[5, 3, 9, 0, 0, 0], [2, 7, 1, 4, 8, 6]], "int32")
    tokens = keras.Input((None,), dtype="int32")
    routed = VectorRouting(3, 4, iterations=3)(
        keras.layers.Embedding(10, 8, mask_zero=True)(tokens)
    )
    model = keras.Model(tokens, routed)
    padded = to_numpy(model(ids))
    np.testing.assert_allclose(padded[0], to_numpy(model(ids[:1, :3]))[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(padded[1], to_numpy(model(ids[1:]))[0], rtol=1e-5, atol=1e-6)


def test_mask_argument_drops_inputs_whatever_they_hold():
    layer = VectorRouting(3, 4)
    keep = np.array([[True] * 4 + [False] * 2, [True] * 6])
    other = X.copy()
    other[0, 4:] = 1e4
    outputs, phi = layer(other, mask=keep, return_coefficients=True)
    np.testing.assert_allclose(to_numpy(outputs)[0], to_numpy(layer(X[:1, :4]))[0], atol=1e-5)
    assert np.all(to_numpy(phi)[0, 4:] == 0)


def test_a_sequence_with_nothing_kept_gives_zeros_and_finite_gradients():
    layer = VectorRouting(3, 4)
    keep = np.array([[False] * 6, [True] * 6])
    x = keras.ops.convert_to_tensor(X)
    outputs = to_numpy(layer(x, mask=keep))
    assert np.all(outputs[0] == 0) and np.all(np.isfinite(outputs))
    grads = gradients(lambda t: keras.ops.sum(layer(t["x"], mask=keep)), {"x": x}, ["x"])
    assert np.all(np.isfinite(to_numpy(grads["x"])))


@pytest.mark.parametrize("scale", [0.0, 1e4])
def test_zero_and_huge_inputs_stay_finite(scale):
    layer = VectorRouting(3, 4, iterations=3)
    x = keras.ops.convert_to_tensor(X * scale)
    assert np.all(np.isfinite(to_numpy(layer(x))))
    grads = gradients(lambda t: keras.ops.sum(layer(t["x"]) ** 2), {"x": x}, ["x"])
    assert np.all(np.isfinite(to_numpy(grads["x"])))


def test_any_length_in_one_model():
    layer = VectorRouting(2, 3)
    assert tuple(layer(keras.Input((None, 4))).shape) == (None, 2, 3)
    assert tuple(layer(X[:, :2]).shape) == (2, 2, 3)
    assert tuple(layer(np.ones((1, 50, 4), "float32")).shape) == (1, 2, 3)


def test_coefficients_are_a_second_output_of_a_functional_model():
    inputs = keras.Input((None, 4))
    outputs, phi = VectorRouting(3, 5)(inputs, return_coefficients=True)
    assert tuple(phi.shape) == (None, None, 3)
    model = keras.Model(inputs, [outputs, phi])
    assert to_numpy(model(X)[1]).shape == (2, 6, 3)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_capsules": 0, "capsule_dim": 4}, "Received: num_capsules=0"),
        ({"num_capsules": 2, "capsule_dim": 2.5}, "Received: capsule_dim=2.5"),
        ({"num_capsules": 2, "capsule_dim": 4, "iterations": 0}, "Received: iterations=0"),
        ({"num_capsules": 2, "capsule_dim": 4, "num_inputs": -1}, "Received: num_inputs=-1"),
        ({"num_capsules": 2, "capsule_dim": 4, "normalize": "yes"}, "normalize"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        VectorRouting(**kwargs)


def test_bad_input_shapes_are_named_at_build():
    with pytest.raises(ValueError, match="num_inputs=5"):
        VectorRouting(2, 4, num_inputs=5).build((None, 6, 4))
    with pytest.raises(ValueError, match="input_dim"):
        VectorRouting(2, 4).build((None, 6, None))


def test_a_state_dict_of_other_sizes_is_named(tmp_path):
    layer = VectorRouting(4, 3)
    layer.build((None, None, 4))
    state = _state_dict(FIXTURES / "vector_routing_any.pt")
    convert.authors_weights(state, layer)  # the right sizes load
    with pytest.raises(ValueError, match="W_F2 has shape"):
        convert.authors_weights({**state, "W_F2": np.zeros((4, 5))}, layer)
    with pytest.raises(ValueError, match="lacks"):
        convert.authors_weights({k: v for k, v in state.items() if k != "W_A"}, layer)
    with pytest.raises(ValueError, match="Unexpected key beta_use"):
        convert.authors_weights({**state, "beta_use": np.zeros((7, 4))}, layer)
    with pytest.raises(ValueError, match="prefix='head.'"):
        convert.authors_weights(state, layer, prefix="head.")
    nested = {f"head.{k}": v for k, v in state.items()}
    assert set(convert.authors_weights(nested, layer, prefix="head.")) == {
        v.name for v in layer.weights
    }


def _state_dict(path):
    return kc.convert.torch_zip.read_state_dict(path)


@pytest.mark.one_backend("torch")  # what it learns: tests/test_learning.py
def test_learns_which_keyword_a_sequence_holds():
    # Sequences of 4-12 tokens of noise (ids 4-29), padded with 0; one of the
    # keywords 1, 2, 3 somewhere in each: its class.
    rng = np.random.default_rng(0)
    count, length = 384, 12
    ids = np.zeros((count, length), "int32")
    labels = rng.integers(0, 3, count)
    for row, label in enumerate(labels):
        n = rng.integers(4, length + 1)
        ids[row, :n] = rng.integers(4, 30, n)
        ids[row, rng.integers(0, n)] = label + 1
    keras.utils.set_random_seed(0)
    tokens = keras.Input((length,), dtype="int32")
    x = keras.layers.Embedding(30, 16, mask_zero=True)(tokens)
    x = VectorRouting(3, 8)(x)
    scores = keras.layers.Dense(3)(keras.layers.Flatten()(x))
    model = keras.Model(tokens, scores)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    history = model.fit(ids, labels, batch_size=32, epochs=12, verbose=0).history
    assert history["loss"][-1] < 0.5 * history["loss"][0], history["loss"]
    assert history["accuracy"][-1] > 0.9, history["accuracy"]
