"""keras_capsules.diagnostics: the routing coefficients of every routed
layer of a trained or loaded model, and their figure."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules import diagnostics
from tests.test_case import to_numpy


def _two_routings():
    tokens = keras.Input((None,), dtype="int32")
    embedded = keras.layers.Embedding(20, 8, mask_zero=True)(tokens)
    parts = kc.VectorRouting(4, 6, name="parts")(embedded)
    classes = kc.Capsule(3, 5, name="classes")(parts)
    return keras.Model(tokens, kc.Length()(classes))


def _tokens(seed=0):
    tokens = np.random.default_rng(seed).integers(1, 20, size=(3, 7))
    tokens[:, 5:] = 0  # padding
    return tokens


def test_every_routed_layer_of_a_trained_model_in_layer_order():
    model = _two_routings()
    model.compile(optimizer="adam", loss="mse")
    model.fit(_tokens(1), np.full((3, 3), 0.5), verbose=0)
    coefficients = diagnostics.routing_coefficients(model, _tokens())
    assert list(coefficients) == ["parts", "classes"]
    assert coefficients["parts"].shape == (3, 7, 4)
    assert coefficients["classes"].shape == (3, 4, 3)
    # Dynamic routing: each child splits its vote over the parents.
    np.testing.assert_allclose(coefficients["classes"].sum(-1), 1.0, atol=1e-5)
    # The mask flows as in the model: padding gets no credit, and the
    # padded batch routes as the unpadded one.
    assert np.all(coefficients["parts"][:, 5:] == 0)
    unpadded = diagnostics.routing_coefficients(model, _tokens()[:, :5])
    np.testing.assert_allclose(unpadded["parts"], coefficients["parts"][:, :5], atol=1e-6)
    np.testing.assert_allclose(unpadded["classes"], coefficients["classes"], atol=1e-6)


def test_the_same_as_calling_each_layer_with_return_coefficients():
    model = keras.Sequential(
        [keras.Input((6, 4)), kc.Capsule(3, 5, name="a"), kc.Capsule(2, 4, name="b"), kc.Length()]
    )
    x = np.random.default_rng(2).normal(size=(2, 6, 4)).astype("float32")
    coefficients = diagnostics.routing_coefficients(model, x)
    first, second = model.layers[0], model.layers[1]
    poses, expected_a = first(x, return_coefficients=True)
    expected_b = second(poses, return_coefficients=True)[1]
    np.testing.assert_allclose(coefficients["a"], to_numpy(expected_a), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(coefficients["b"], to_numpy(expected_b), rtol=1e-5, atol=1e-7)


def test_a_loaded_model_and_a_nested_one(tmp_path):
    model = _two_routings()
    before = diagnostics.routing_coefficients(model, _tokens())
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    after = diagnostics.routing_coefficients(loaded, _tokens())
    for name in before:
        np.testing.assert_allclose(after[name], before[name], rtol=1e-6, atol=1e-7)
    inputs = keras.Input((6, 4))
    inner = keras.Model(inputs, kc.Capsule(3, 5, name="inner_caps")(inputs), name="inner")
    outer_inputs = keras.Input((6, 4))
    nested = keras.Model(
        outer_inputs, kc.Length()(kc.Capsule(2, 3, name="top")(inner(outer_inputs)))
    )
    coefficients = diagnostics.routing_coefficients(nested, np.ones((2, 6, 4), "float32"))
    assert {k: v.shape for k, v in coefficients.items()} == {
        "inner/inner_caps": (2, 6, 3),
        "top": (2, 3, 2),
    }


def test_a_ready_classifier():
    model = kc.CapsNet(
        (20, 20, 1),
        3,
        conv_filters=4,
        primary_capsules=2,
        primary_dim=4,
        capsule_dim=4,
        decoder_units=(8,),
    )
    images = np.random.default_rng(3).uniform(size=(2, 20, 20, 1)).astype("float32")
    coefficients = diagnostics.routing_coefficients(model, images)
    np.testing.assert_allclose(
        coefficients["class_capsules"], to_numpy(model.routing_coefficients(images)), rtol=1e-6
    )


def test_models_it_cannot_read():
    class Subclassed(keras.Model):
        def __init__(self):
            super().__init__()
            self.capsules = kc.Capsule(2, 3)

        def call(self, x):
            return self.capsules(x)

    with pytest.raises(ValueError, match="Received: model of class Subclassed"):
        diagnostics.routing_coefficients(Subclassed(), np.ones((1, 4, 3), "float32"))
    inputs = keras.Input((4,))
    dense = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    with pytest.raises(ValueError, match="no routed layer"):
        diagnostics.routing_coefficients(dense, np.ones((1, 4), "float32"))
    with pytest.raises(ValueError, match="must be a keras.Model"):
        diagnostics.routing_coefficients("model", None)


def test_routing_figure():
    pytest.importorskip("matplotlib")
    c = np.random.default_rng(4).dirichlet(np.ones(3), size=(5, 8)).astype("float32")
    figure = diagnostics.routing_figure(c, child_types=4, parent_names=["a", "b", "c"])
    image = figure.axes[0].images[0].get_array()
    np.testing.assert_allclose(image, c.mean(0).reshape(-1, 4, 3).mean(0), rtol=1e-6)
    assert [t.get_text() for t in figure.axes[0].get_xticklabels()] == ["a", "b", "c"]
    with pytest.raises(ValueError, match=r"Received: coefficients.shape=\(8, 3\)"):
        diagnostics.routing_figure(c[0])
    with pytest.raises(ValueError, match="Received: child_types=3"):
        diagnostics.routing_figure(c, child_types=3)
