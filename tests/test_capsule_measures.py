"""keras_capsules.capsule_measures against float64 references written here
on hand-made coefficients, and diagnostics.capsule_statistics on every kind
of routed layer (each backend, mixed precision)."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules import capsule_measures as measures
from keras_capsules import diagnostics
from tests.models.builders import tiny_capsnet

RNG = np.random.default_rng(0)


def _reference_entropy(c):
    total = 0.0
    for child in c.reshape(-1, c.shape[-1]):
        p = child / child.sum()
        total += -sum(x * np.log(x) for x in p if x > 0) / np.log(len(p))
    return total / (c.shape[0] * c.shape[1])


def test_entropy_tree_fraction_and_spread_match_their_references():
    c = RNG.dirichlet(np.full(5, 0.3), size=(6, 7))  # (batch, children, parents)
    assert np.isclose(measures.normalized_entropy(c), _reference_entropy(c), rtol=1e-12)
    assert measures.normalized_entropy(np.eye(5)[None]) == 0.0
    assert np.isclose(measures.normalized_entropy(np.full((2, 3, 5), 0.2)), 1.0)
    expected_tree = np.mean([[max(child) > 0.5 for child in sample] for sample in c])
    assert measures.tree_fraction(c) == expected_tree
    expected_spread = np.mean(
        [[np.std(c[:, i, j]) for j in range(5)] for i in range(7)]
    )  # fmt: skip
    assert np.isclose(measures.coefficient_spread(c), expected_spread, rtol=1e-12)
    # Read per child whichever axis the router normalised: scaling a
    # child's row changes nothing.
    scaled = c * RNG.uniform(0.1, 3.0, size=(6, 7, 1))
    assert np.isclose(measures.normalized_entropy(scaled), measures.normalized_entropy(c))


def test_starvation_children_per_parent_and_consistency_on_a_hand_made_parse():
    # 4 inputs, 3 children, 3 parents: parent 2 never wakes; children 0, 1
    # choose parent 0 for class 0 and parent 1 for class 1, child 2 always
    # parent 1.
    strong = {0: [0.8, 0.1, 0.1], 1: [0.1, 0.8, 0.1]}
    labels = np.array([0, 0, 1, 1])
    c = np.array([[strong[k], strong[k], strong[1]] for k in labels])
    a = np.array([[0.9, 0.5, 0.001], [0.9, 0.5, 0.0], [0.2, 0.9, 0.005], [0.3, 0.8, 0.009]])
    assert measures.starved_fraction(a, 0.01) == pytest.approx(1 / 3)
    assert measures.starved_fraction(a, 0.0001) == 0.0
    # Class 0 inputs: parent 0 collects 2 children, parent 1 one; class 1:
    # parent 1 collects 3, parent 0 (active) none.
    assert measures.children_per_active_parent(c, a) == pytest.approx(
        (2 + 1 + 2 + 1 + 0 + 3 + 0 + 3) / 8
    )
    assert measures.parent_consistency(c, labels) == 1.0
    shuffled = c.copy()
    shuffled[1, 0] = strong[1]  # child 0 of one class-0 input changes parent
    assert measures.parent_consistency(shuffled, labels) == pytest.approx((5 / 6 + 1) / 2)
    assert np.isnan(measures.children_per_active_parent(c, np.zeros((4, 3))))


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="coefficients"):
        measures.normalized_entropy(np.ones((2, 3)))
    with pytest.raises(ValueError, match="activations"):
        measures.children_per_active_parent(np.ones((2, 3, 4)), np.ones((2, 3)))
    with pytest.raises(ValueError, match="labels"):
        measures.parent_consistency(np.ones((2, 3, 4)), [0, 1, 1])


def _every_routed_layer(dtype=None):
    images = keras.Input((10, 10, 3))
    x = kc.layers.PrimaryCapsule(4, 4, 3, strides=2, dtype=dtype)(images)
    x = keras.layers.Reshape((4, 4, 4, 4))(x)  # a 4 x 4 grid of 4 types
    x = kc.layers.ConvCapsule2D(3, 4, 3, router=kc.DynamicRouting(2), dtype=dtype, name="conv")(x)
    x = keras.layers.Reshape((-1, 4))(x)
    x = kc.layers.Capsule(5, 4, dtype=dtype, name="vector")(x)
    vector = kc.layers.VectorRouting(3, 4, dtype=dtype, name="vector_routing")(x)
    scores = kc.layers.Length(dtype=dtype)(
        kc.layers.Capsule(2, 4, dtype=dtype, name="classes")(vector)
    )
    matrix = kc.layers.PrimaryMatrixCapsule(2, dtype=dtype)(keras.layers.Conv2D(4, 3)(images))
    matrix = kc.layers.ConvMatrixCapsule(2, 3, router=kc.EMRouting(2), dtype=dtype, name="em")(
        matrix
    )
    classes = kc.layers.ClassMatrixCapsule(
        2, router=kc.EMRouting(2), dtype=dtype, name="em_classes"
    )(matrix)
    return keras.Model(images, [scores, classes[1]])


@pytest.mark.parametrize("dtype", [None, "mixed_float16"])
def test_statistics_of_every_routed_layer_are_the_measures_of_its_coefficients(dtype):
    keras.utils.set_random_seed(0)
    model = _every_routed_layer(dtype)
    x = RNG.uniform(size=(6, 10, 10, 3)).astype("float32")
    labels = np.array([0, 1, 0, 1, 0, 1])
    stats = diagnostics.capsule_statistics(model, x, labels=labels)
    coefficients = diagnostics.routing_coefficients(model, x)
    assert list(stats) == list(coefficients)
    assert set(stats) == {"conv", "vector", "vector_routing", "classes", "em", "em_classes"}
    for name, row in stats.items():
        c = coefficients[name].reshape(6, -1, coefficients[name].shape[-1])
        assert row["coefficient_entropy"] == pytest.approx(measures.normalized_entropy(c), abs=1e-6)
        assert row["tree_fraction"] == pytest.approx(measures.tree_fraction(c))
        assert 0 <= row["parent_consistency"] <= 1, name
        assert np.isfinite(row["pose_length_mean"]) and row["pose_length_std"] >= 0, name
        if name == "vector_routing":  # normalised outputs: no activations
            assert np.isnan(row["starved_fraction"])
            continue
        assert 0 <= row["starved_fraction"] <= 1 and 0 <= row["active_fraction"] <= 1, name
        quantiles = row["activation_quantiles"]
        assert quantiles == sorted(quantiles) and 0 <= quantiles[0] and quantiles[-1] <= 1, name
    # A vector capsule's activation is its length.
    assert stats["classes"]["activation_mean"] == pytest.approx(
        stats["classes"]["pose_length_mean"], rel=1e-6
    )


def test_statistics_need_a_graph_model():
    class Sub(keras.Model):
        def call(self, x):
            return x

    with pytest.raises(ValueError, match="functional and built Sequential models, and the ready"):
        diagnostics.capsule_statistics(Sub(), np.zeros((1, 2)))


def test_a_ready_classifier_gives_its_class_capsules():
    keras.utils.set_random_seed(0)
    model = tiny_capsnet()
    x = RNG.uniform(size=(5, 20, 20, 1)).astype("float32")
    stats = diagnostics.capsule_statistics(model, x, labels=[0, 1, 2, 0, 1], batch_size=2)
    c = keras.ops.convert_to_numpy(model.routing_coefficients(x))
    assert list(stats) == ["class_capsules"]
    row = stats["class_capsules"]
    assert row["coefficient_entropy"] == pytest.approx(measures.normalized_entropy(c), abs=1e-6)
    # The class capsules' activations are their lengths (the scores up to
    # the epsilon of Length's square root).
    scores = keras.ops.convert_to_numpy(model.predict(x, verbose=0))
    lengths = np.sqrt(np.maximum(scores.astype("float64") ** 2 - 1e-7, 0.0))
    assert row["activation_mean"] == pytest.approx(row["pose_length_mean"], rel=1e-9)
    assert row["activation_mean"] == pytest.approx(float(lengths.mean()), rel=1e-2, abs=1e-6)


def test_iteration_change_matches_its_reference():
    p = RNG.dirichlet(np.ones(4), size=(3, 5))
    q = RNG.dirichlet(np.ones(4), size=(3, 5))
    expected = np.mean([[0.5 * sum(abs(a - b) for a, b in zip(pc, qc)) for pc, qc in zip(ps, qs)]
                        for ps, qs in zip(p, q)])  # fmt: skip
    assert measures.iteration_change(p, q) == pytest.approx(expected, rel=1e-12)
    assert measures.iteration_change(p, p) == 0.0
    assert measures.iteration_change(np.eye(4)[None], np.eye(4)[None, ::-1]) == 1.0
    with pytest.raises(ValueError, match="same shape"):
        measures.iteration_change(p, q[:, :4])


def test_coefficient_change_is_the_last_iterations_move():
    """With `iteration_change=True`, each iterating router's last step:
    the distance between the coefficients of its layer (3 iterations) and
    those of the same layer run for 2 on the same inputs (the layers below
    at their full iterations); NaN for a single-pass router."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6, 4))
    x = kc.layers.Capsule(5, 4, router=kc.DynamicRouting(3), name="dynamic")(inputs)
    x = kc.layers.Capsule(4, 4, router=kc.DynamicRouting(3), name="dynamic_2")(x)
    x = kc.layers.Capsule(3, 4, router="self_attention", name="attention")(x)
    model = keras.Model(inputs, kc.layers.Length()(x))
    x = RNG.normal(size=(4, 6, 4)).astype("float32")
    stats = diagnostics.capsule_statistics(model, x, iteration_change=True)
    last = diagnostics.routing_coefficients(model, x)
    for name in ("dynamic", "dynamic_2"):
        model.get_layer(name).router.iterations = 2
        before = diagnostics.routing_coefficients(model, x)[name]
        model.get_layer(name).router.iterations = 3
        expected = measures.iteration_change(last[name], before)
        assert expected > 0
        assert stats[name]["coefficient_change"] == pytest.approx(expected, rel=1e-4, abs=1e-7)
    assert np.isnan(stats["attention"]["coefficient_change"])
    # The model itself is unchanged: its routers run their own iterations.
    assert model.get_layer("dynamic").router.iterations == 3
    assert "coefficient_change" not in diagnostics.capsule_statistics(model, x)["dynamic"]


def test_a_ready_classifiers_coefficient_change():
    keras.utils.set_random_seed(0)
    model = tiny_capsnet()
    x = RNG.uniform(size=(3, 20, 20, 1)).astype("float32")
    row = diagnostics.capsule_statistics(model, x, iteration_change=True)["class_capsules"]
    assert 0 <= row["coefficient_change"] <= 1
