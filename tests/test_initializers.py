"""The layers' default initializers start capsules alive (lengths near the
squash's knee) whatever their inputs' scale and whatever the router."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from tests.test_case import to_numpy


def _unit_directions(rng, shape, length=0.5):
    x = rng.normal(size=shape)
    return (length * x / np.linalg.norm(x, axis=-1, keepdims=True)).astype("float32")


@pytest.mark.parametrize("scale", [1e-3, 0.02, 1.0])
def test_primary_capsules_start_near_the_knee_at_any_input_scale(scale):
    keras.utils.set_random_seed(0)
    features = np.abs(np.random.default_rng(0).normal(size=(4, 9, 9, 32))) * scale
    lengths = np.linalg.norm(to_numpy(kc.PrimaryCapsule(8, 8, 3, strides=2)(features)), axis=-1)
    assert 0.3 < lengths.mean() < 0.8, lengths.mean()
    assert lengths.min() > 0.05


@pytest.mark.parametrize("router", kc.routing.names())
def test_routed_capsules_start_alive_with_every_router(router):
    keras.utils.set_random_seed(0)
    poses = _unit_directions(np.random.default_rng(0), (4, 288, 8))
    lengths = to_numpy(kc.Length()(kc.Capsule(10, 16, router=router)(poses)))
    # The attention routers' coefficients already follow the votes'
    # agreement with their sum at initialisation, so their parents start
    # longer (~0.9-0.97 here, with 288 children), still below 1.
    assert 0.05 < lengths.mean() < 0.98, lengths.mean()
    # The length contract's exceptions return unscaled means (`RoutedCapsule`).
    assert lengths.max() < 1.0 or kc.routing.get(router).pose_length == "kept"


@pytest.mark.parametrize("router", kc.routing.names())
def test_conv_capsules_start_alive_with_every_router(router):
    keras.utils.set_random_seed(0)
    poses = _unit_directions(np.random.default_rng(0), (2, 6, 6, 8, 8))
    layer = kc.ConvCapsule2D(8, 8, 3, router=router)
    lengths = to_numpy(kc.Length()(layer(poses)))
    assert 0.05 < lengths.mean() < 0.95, lengths.mean()


def test_default_transforms_have_the_derived_stddev():
    keras.utils.set_random_seed(0)
    layer = kc.Capsule(10, 16)
    layer.build((None, 1152, 8))
    expected = kc.routing.DynamicRouting().vote_stddev(1152, 10, 16) / kc.initializers.INPUT_LENGTH
    assert np.std(to_numpy(layer.kernel)) == pytest.approx(expected, rel=0.02)
    em = kc.Capsule(10, 16, router="em")
    em.build((None, 1152, 8))
    assert np.std(to_numpy(em.kernel)) == pytest.approx(2.0, rel=0.02)  # unit-variance votes


def test_explicit_initializers_are_kept_and_the_default_stays_none_in_config():
    layer = kc.Capsule(3, 4, kernel_initializer="zeros")
    layer.build((None, 6, 4))
    assert not np.any(to_numpy(layer.kernel))
    primary = kc.PrimaryCapsule(2, 4, 3, kernel_initializer="ones", bias_initializer="zeros")
    primary.build((None, 5, 5, 1))
    assert np.all(to_numpy(primary.kernel) == 1) and not np.any(to_numpy(primary.bias))
    config = kc.Capsule(3, 4).get_config()
    assert config["kernel_initializer"] is None
    restored = kc.Capsule.from_config(config)
    restored.build((None, 6, 4))
    assert np.std(to_numpy(restored.kernel)) > 0.1


def test_fixed_length_poses_take_the_activations_length():
    keras.utils.set_random_seed(0)
    poses = _unit_directions(np.random.default_rng(0), (3, 24, 8))
    layer = kc.Capsule(4, 8, router="inverted_dot_product", return_activations=True)
    parent_poses, activations = (to_numpy(t) for t in layer(poses))
    np.testing.assert_allclose(np.linalg.norm(parent_poses, axis=-1), activations, rtol=1e-4)
    assert np.all((activations > 0) & (activations < 1))
    # The router alone returns Tsai et al.'s layer-normalised poses.
    router_poses = to_numpy(layer.router(layer.votes(poses))[0])
    np.testing.assert_allclose(router_poses.mean(axis=-1), 0.0, atol=1e-5)


def test_matrix_capsules_start_with_every_em_layer_near_its_midpoint():
    # With Keras's glorot_uniform the votes' variance fell below EM's floor
    # and the activations rose layer by layer to 0.998 (the model then
    # stayed at chance).
    keras.utils.set_random_seed(0)
    model = kc.MatrixCapsNet(
        (20, 20, 2),
        4,
        conv_filters=8,
        primary_capsules=4,
        conv_capsules1=4,
        conv_capsules2=4,
        router={"class_name": "em", "config": {"iterations": 2}},
    )
    images = np.random.default_rng(0).normal(size=(4, 20, 20, 2)).astype("float32")
    net = model.network
    outputs = keras.Model(net.input, [layer.output for layer in net.layers[2:]])(images)
    for layer, (poses, activations) in zip(net.layers[2:], outputs):
        activations = to_numpy(activations)
        assert 0.3 < activations.mean() < 0.8, (layer.name, activations.mean())
        if layer is not net.layers[-1]:  # the poses the next layer receives
            assert 0.1 < to_numpy(poses).std() < 0.4, (layer.name, to_numpy(poses).std())
