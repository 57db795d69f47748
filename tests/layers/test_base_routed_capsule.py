"""RoutedCapsule: each layer checks its router once, when it is made (the
layer's needs against the router's declared abilities), and the vector
layers keep the length contract (a pose's length is its activation) with
every registered router."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules import routing
from tests.test_case import forward, to_numpy


class LogitRouting(kc.Router):
    """Logit activations but no variances: what `HeinsenCapsule(
    return_variances=True)` must refuse (no registered router is one)."""

    logit_activations = True

    def route(self, votes, activations):
        poses = keras.ops.mean(votes, axis=1)
        coefficients = keras.ops.ones_like(votes[..., 0]) / votes.shape[2]
        return poses, keras.ops.sum(poses, axis=-1), coefficients


# Every router the layers may be given: the registered names, the router
# that has no name and the test's own.
ROUTERS = {
    **{name: (lambda n=name: n) for name in routing.names()},
    "QuaternionRouting": kc.QuaternionRouting,
    "LogitRouting": LogitRouting,
}

VECTOR_LAYERS = {
    "Capsule": lambda r, **k: kc.Capsule(2, 4, router=r, **k),
    "ConvCapsule1D": lambda r, **k: kc.ConvCapsule1D(2, 4, 2, router=r, **k),
    "ConvCapsule2D": lambda r, **k: kc.ConvCapsule2D(2, 4, 2, router=r, **k),
    "ConvCapsule3D": lambda r, **k: kc.ConvCapsule3D(2, 4, 2, router=r, **k),
    "LocalCapsule2D": lambda r, **k: kc.LocalCapsule2D(2, 4, 3, 1, router=r, **k),
    "LocalDeconvCapsule2D": lambda r, **k: kc.LocalDeconvCapsule2D(2, 4, 2, 2, router=r, **k),
}
MATRIX_LAYERS = {
    "ConvMatrixCapsule": lambda r: kc.ConvMatrixCapsule(2, router=r),
    "ClassMatrixCapsule": lambda r: kc.ClassMatrixCapsule(2, router=r),
}
LAYERS = {
    **VECTOR_LAYERS,
    **MATRIX_LAYERS,
    "HeinsenCapsule": lambda r: kc.HeinsenCapsule(2, 2, router=r),
    "HeinsenCapsule-variances": lambda r: kc.HeinsenCapsule(2, 2, router=r, return_variances=True),
    "QuaternionCapsule": lambda r: kc.QuaternionCapsule(2, router=r),
}
LOGIT_ROUTERS = {"heinsen", "LogitRouting"}  # the routers whose activations are logits


def refusal(layer, router):
    """The start of the error `layer` gives `router`, or `None` (taken): the
    table of which layer takes which router, written out."""
    if layer in VECTOR_LAYERS:  # every router of vectors; logits become probabilities
        return "routes vector poses" if router == "QuaternionRouting" else None
    if layer in MATRIX_LAYERS:  # flattened matrices, activations that are probabilities
        if router == "QuaternionRouting":
            return "routes matrix poses"
        return "activations are probabilities" if router in LOGIT_ROUTERS else None
    if layer.startswith("HeinsenCapsule"):  # matrices and logit scores
        if router == "QuaternionRouting":
            return "routes matrix poses"
        if router not in LOGIT_ROUTERS:
            return "activations are logits"
        if layer.endswith("variances") and router != "heinsen":
            return "needs a router that returns its variances"
        return None
    # QuaternionCapsule: rotations, which only quaternion routing averages.
    return None if router == "QuaternionRouting" else "routes quaternion poses"


PAIRS = [(layer, router) for layer in sorted(LAYERS) for router in sorted(ROUTERS)]


@pytest.mark.parametrize("layer, router", PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_each_layer_takes_the_routers_that_fit_and_names_the_others(layer, router):
    expected = refusal(layer, router)
    if expected is None:
        assert LAYERS[layer](ROUTERS[router]()).router is not None
        return
    with pytest.raises(ValueError) as info:
        LAYERS[layer](ROUTERS[router]())
    message = str(info.value)
    name = layer.split("-")[0]
    router_class = type(routing.get(ROUTERS[router]())).__name__
    assert message.startswith(f"{name} {expected}") or message.startswith(f"{name}'s {expected}"), (
        message
    )
    # Both named: the layer, and the router with its config.
    assert f"Received: router={router_class}(" in message, message


def test_the_error_shows_the_routers_config():
    with pytest.raises(ValueError, match=r"router=DynamicRouting\(iterations=2, "):
        kc.QuaternionCapsule(2, router=kc.DynamicRouting(iterations=2))


def test_the_refused_routers_are_refused_as_configs_too():
    with pytest.raises(ValueError, match="ConvMatrixCapsule's activations are probabilities"):
        kc.ConvMatrixCapsule(2, router={"class_name": "heinsen", "config": {"iterations": 1}})


# ---- the length contract ---------------------------------------------------------

# Tiny children of each vector layer: (batch, ..., types, dim).
CHILDREN = {
    "Capsule": (2, 5, 3),
    "ConvCapsule1D": (2, 4, 2, 3),
    "ConvCapsule2D": (2, 3, 3, 2, 3),
    "ConvCapsule3D": (2, 3, 3, 3, 2, 3),
    "LocalCapsule2D": (2, 4, 4, 2, 3),
    "LocalDeconvCapsule2D": (2, 3, 3, 2, 3),
}
# The routers whose poses the vector layers return as they are, the
# length contract's exceptions (`Router.pose_length = "kept"`, stated in
# `RoutedCapsule`): EM's Gaussian means and self-routing's weighted means.
# Every other router's pose lengths are its activations.
KEPT = {"em", "self_routing"}


def test_the_routers_whose_pose_lengths_are_kept_are_the_stated_ones():
    kept = {n for n in routing.names() if routing.get(n).pose_length == "kept"}
    assert kept == KEPT


LENGTH_CASES = [
    (layer, name) for layer in sorted(VECTOR_LAYERS) for name in routing.names() if name not in KEPT
]


@pytest.mark.parametrize("layer, router", LENGTH_CASES, ids=[f"{a}-{b}" for a, b in LENGTH_CASES])
def test_a_vector_pose_length_is_its_activation(layer, router):
    keras.utils.set_random_seed(0)
    capsules = VECTOR_LAYERS[layer](router, return_activations=True)
    rng = np.random.default_rng(0)
    children = rng.normal(size=CHILDREN[layer]).astype("float32")
    children *= 0.5 / np.linalg.norm(children, axis=-1, keepdims=True)
    capsules.build(children.shape)
    poses, activations = (to_numpy(t) for t in forward(capsules, children))
    lengths = np.linalg.norm(poses, axis=-1)
    # Activations are safe norms, sqrt(|s|^2 + 1e-7), or poses are rescaled
    # by one: that epsilon moves a length by less than 5e-6 above 0.01, and
    # by sqrt(1e-7) at most near 0.
    alive = activations > 0.01
    np.testing.assert_allclose(lengths[alive], activations[alive], atol=1e-5, rtol=1e-5)
    assert np.abs(lengths - activations).max() <= 1e-7**0.5 + 1e-6
    assert alive.mean() > 0.5, activations
    assert np.all(activations >= 0) and np.all(activations < 1), activations


@pytest.mark.parametrize("router", sorted(KEPT))
def test_the_exceptions_poses_are_the_routers_own(router):
    keras.utils.set_random_seed(0)
    capsules = kc.Capsule(2, 4, router=router, return_activations=True)
    children = np.random.default_rng(0).normal(size=CHILDREN["Capsule"]).astype("float32")
    capsules.build(children.shape)
    poses, activations = (to_numpy(t) for t in capsules(children))
    own = [to_numpy(t) for t in capsules.router(capsules.votes(children))]
    np.testing.assert_allclose(poses, own[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(activations, own[1], rtol=1e-6, atol=1e-6)
    assert np.all(activations >= 0) and np.all(activations <= 1), activations
