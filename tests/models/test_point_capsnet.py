"""PointCapsNet (Zhao et al., 2019): the authors' module (fixture) gives the
same capsules and points, their parameter count, training on generated
shapes with compile()'s defaults, clouds of any size and masks, saving,
mixed precision, bad inputs; its primary capsules on their own
(`PatchDecoder`: tests/layers/test_patch_decoder.py)."""

import pathlib

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules.convert import point_capsnet as convert
from keras_capsules.layers import PointPrimaryCapsule
from keras_capsules.models import PointCapsNet
from tests.test_case import BACKEND, LayerTestCase, round_trip, to_numpy

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
SMALL = dict(num_points=64, primary_capsules=1024, primary_dim=2, latent_capsules=8, latent_dim=8)
TINY = dict(num_points=32, primary_capsules=16, primary_dim=4, latent_capsules=4, latent_dim=8)


def shapes(count, points=64, seed=0):
    """Clouds `(count, points, 3)` on the surface of a sphere, a cube or a
    cylinder (label 0, 1, 2), randomly rotated and scaled."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, count)
    clouds = np.empty((count, points, 3))
    for n, label in enumerate(labels):
        if label == 0:
            p = rng.normal(size=(points, 3))
            p /= np.linalg.norm(p, axis=1, keepdims=True)
        elif label == 1:
            p = rng.uniform(-1, 1, (points, 3))
            axis = rng.integers(0, 3, points)
            p[np.arange(points), axis] = rng.choice([-1.0, 1.0], points)
        else:
            angle = rng.uniform(0, 2 * np.pi, points)
            p = np.stack([np.cos(angle), np.sin(angle), rng.uniform(-1, 1, points)], -1)
        rotation, _ = np.linalg.qr(rng.normal(size=(3, 3)))
        clouds[n] = 0.7 * rng.uniform(0.8, 1.0) * p @ rotation
    return clouds.astype("float32"), labels


def _authors_model():
    model = PointCapsNet(**SMALL)
    return convert.load_authors_weights(model, FIXTURES / "point_capsnet_small.pt")


def test_the_authors_module_gives_the_same_capsules_and_points():
    # Their PointCapsNet at small sizes, in float64, with calibrated batch
    # statistics and their decoder's grid recorded (tests/fixtures/README.md).
    data = np.load(FIXTURES / "point_capsnet_small.npz")
    model = _authors_model()
    latent = to_numpy(model.encode(data["points"]))
    expected = data["latent_capsules"]
    np.testing.assert_allclose(latent, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    points = to_numpy(model.decode(expected.astype("float32"), grid=data["grid"]))
    np.testing.assert_allclose(points, data["reconstruction"], rtol=1e-5, atol=1e-5)


def test_a_state_dict_of_other_sizes_is_named():
    state = kc.convert.torch_zip.read_state_dict(FIXTURES / "point_capsnet_small.pt")
    model = PointCapsNet(**SMALL)
    model.build((None, 64, 3))
    with pytest.raises(ValueError, match="lacks latent_caps_layer.W"):
        convert.authors_weights(
            {k: v for k, v in state.items() if k != "latent_caps_layer.W"}, model
        )
    with pytest.raises(ValueError, match="Unexpected keys"):
        convert.authors_weights({**state, "extra.weight": np.zeros(3)}, model)
    other = PointCapsNet(**{**SMALL, "latent_dim": 4})
    other.build((None, 64, 3))
    with pytest.raises(ValueError, match="has shape"):
        convert.authors_weights(state, other)


@pytest.mark.skipif(BACKEND != "torch", reason="the counts do not depend on the backend")
def test_the_default_model_has_the_authors_parameter_count():
    # 67 M transforms to draw: ~25 s on JAX, ~3 s on torch.
    model = PointCapsNet()
    model.build((None, 2048, 3))
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    running = sum(int(np.prod(w.shape)) for w in model.non_trainable_weights)
    assert (trainable, running) == (69_502_784, 40_512)


@pytest.mark.one_backend("jax")  # what it learns: tests/test_learning.py
def test_the_autoencoder_learns_generated_shapes_with_the_defaults():
    clouds, _ = shapes(64, points=32)
    keras.utils.set_random_seed(0)
    model = PointCapsNet(**TINY, seed=0)
    model.compile()
    # Adam at 1e-3 (compile's default): measured 0.279 -> 0.184 in 12
    # epochs of 8 steps, 0.162 after 20, falling steadily.
    losses = model.fit(clouds, clouds, batch_size=8, epochs=12, verbose=0).history["loss"]
    assert np.all(np.isfinite(losses))
    assert np.mean(losses[-2:]) < 0.75 * losses[0], losses


def test_any_number_of_points_and_a_mask_of_padded_ones():
    model = _authors_model()
    clouds, _ = shapes(2, points=50, seed=1)
    padded = np.concatenate([clouds, np.full((2, 14, 3), 5.0, "float32")], axis=1)
    mask = np.arange(64)[None] < np.array([[50], [50]])
    np.testing.assert_allclose(
        to_numpy(model.encode(padded, mask=mask)), to_numpy(model.encode(clouds)), atol=1e-5
    )
    assert tuple(model.encode(clouds[:, :7]).shape) == (2, 8, 8)


def test_saves_and_loads_with_safe_mode():
    model = PointCapsNet(**TINY, router={"class_name": "dynamic", "config": {"iterations": 2}})
    clouds, _ = shapes(4, points=32)
    expected = to_numpy(model.encode(clouds))
    loaded = round_trip(model)
    assert isinstance(loaded, PointCapsNet) and loaded.latent.router.iterations == 2
    np.testing.assert_allclose(to_numpy(loaded.encode(clouds)), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_trains_finite(policy):
    clouds, _ = shapes(8, points=32)
    model = PointCapsNet(**TINY, dtype=policy)
    model.compile(jit_compile=BACKEND == "jax")
    loss = model.fit(clouds, clouds, batch_size=8, epochs=1, verbose=0).history["loss"]
    assert np.all(np.isfinite(loss))


@pytest.mark.parametrize(
    "kwargs, shape, message",
    [
        ({}, (None, 32, 2), r"points_shape=\(None, 32, 2\)"),
        ({"num_points": 30}, None, "num_points=30, latent_capsules=4"),
        ({"primary_dim": 0}, None, "primary_dim=0"),
    ],
)
def test_bad_inputs_are_named(kwargs, shape, message):
    with pytest.raises(ValueError, match=message):
        model = PointCapsNet(**{**TINY, **kwargs})
        model.build(shape)


class TestPointLayers(LayerTestCase):
    def test_point_primary_capsule(self):
        self.run_layer_test(
            PointPrimaryCapsule,
            {"num_capsules": 8, "capsule_dim": 4},
            np.random.default_rng(0).normal(size=(2, 10, 6)).astype("float32"),
            (2, 8, 4),
            expected_num_trainable_weights=4,
            expected_num_non_trainable_weights=2,
        )


def test_point_primary_capsules_ignore_the_order_of_the_points():
    layer = PointPrimaryCapsule(8, 4)
    x = np.random.default_rng(0).normal(size=(2, 10, 6)).astype("float32")
    np.testing.assert_allclose(
        to_numpy(layer(x[:, ::-1])), to_numpy(layer(x)), rtol=1e-5, atol=1e-6
    )
