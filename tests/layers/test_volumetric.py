"""PrimaryCapsule3D and ConvCapsule3D: the layer harness, a float64 3-D
convolution, both convolution forms, windows, a volumetric model that
learns, errors. (Float64 parity with every backend's gradients:
tests/parity/cases_volumetric.py.)"""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules.layers import ConvCapsule3D, PrimaryCapsule3D
from keras_capsules.routing import DynamicRouting
from tests.reference.conv import conv3d
from tests.test_case import LayerTestCase, to_numpy

RNG = np.random.default_rng(0)
VOLUMES = RNG.normal(size=(2, 7, 6, 5, 2)).astype("float32")
GRID = RNG.normal(size=(2, 4, 4, 4, 2, 3)).astype("float32")
DYNAMIC2 = keras.saving.serialize_keras_object(DynamicRouting(iterations=2))


class TestPrimaryCapsule3D(LayerTestCase):
    def test_weight_arguments(self):
        self.run_weight_arguments_test(
            PrimaryCapsule3D,
            {"num_capsules": 2, "capsule_dim": 3, "kernel_size": 3},
            VOLUMES,
            {"kernel": ["kernel"], "bias": ["bias"]},
        )

    def test_layer(self):
        self.run_layer_test(
            PrimaryCapsule3D,
            {"num_capsules": 2, "capsule_dim": 4, "kernel_size": 3, "strides": 2},
            VOLUMES,
            (2, 3 * 2 * 2 * 2, 4),
            expected_num_trainable_weights=2,
            expected_num_non_trainable_weights=0,
        )

    @pytest.mark.parametrize("implementation", ["conv", "matmul", "auto"])
    @pytest.mark.parametrize("padding", ["valid", "same"])
    def test_matches_float64_convolution(self, implementation, padding):
        layer = PrimaryCapsule3D(
            2, 3, (3, 2, 3), strides=(2, 1, 2), padding=padding, grid=True, squash=False,
            implementation=implementation,
        )  # fmt: skip
        out = to_numpy(layer(VOLUMES))
        y = conv3d(VOLUMES.astype("float64"), to_numpy(layer.kernel), (2, 1, 2), padding)
        expected = (y + to_numpy(layer.bias)).reshape(*y.shape[:4], 2, 3)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)

    def test_grid_feeds_conv_capsules_and_flat_feeds_capsule(self):
        x = keras.Input((8, 8, 8, 1))
        grid = PrimaryCapsule3D(4, 8, 3, strides=2, grid=True)(x)
        assert tuple(grid.shape) == (None, 3, 3, 3, 4, 8)
        assert tuple(ConvCapsule3D(2, 6, 3)(grid).shape) == (None, 1, 1, 1, 2, 6)
        flat = PrimaryCapsule3D(4, 8, 3, strides=2)(x)
        assert tuple(kc.Capsule(5, 6)(flat).shape) == (None, 5, 6)

    def test_starts_near_the_knee(self):
        keras.utils.set_random_seed(0)
        lengths = np.linalg.norm(to_numpy(PrimaryCapsule3D(8, 8, 3)(VOLUMES * 1e-3)), axis=-1)
        assert 0.3 < lengths.mean() < 0.8, lengths.mean()

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            ({"num_capsules": 0}, "num_capsules=0"),
            ({"kernel_size": (3, 3)}, r"kernel_size=\(3, 3\)"),
            ({"strides": 0}, "strides=0"),
            ({"padding": "causal"}, "padding='causal'"),
            ({"implementation": "hybrid"}, "implementation='hybrid'"),
            ({"grid": "yes"}, "grid='yes'"),
        ],
    )
    def test_errors(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            PrimaryCapsule3D(**{"num_capsules": 2, "capsule_dim": 4, "kernel_size": 3, **kwargs})

    def test_input_errors(self):
        with pytest.raises(ValueError, match="ndim=5"):
            PrimaryCapsule3D(2, 4, 3)(keras.Input((9, 9, 3)))
        with pytest.raises(ValueError, match="kernel_size"):
            PrimaryCapsule3D(2, 4, 6)(keras.Input((5, 9, 9, 1)))
        with pytest.raises(ValueError, match="known channels"):
            PrimaryCapsule3D(2, 4, 3).build((None, 9, 9, 9, None))


class TestConvCapsule3D(LayerTestCase):
    def test_weight_arguments(self):
        self.run_weight_arguments_test(
            ConvCapsule3D,
            {"num_capsules": 2, "capsule_dim": 3, "kernel_size": 2},
            GRID,
            {"kernel": ["kernel"]},
        )

    def test_layer(self):
        self.run_layer_test(
            ConvCapsule3D,
            {"num_capsules": 2, "capsule_dim": 3, "kernel_size": 2, "strides": 2,
             "padding": "same", "router": DYNAMIC2},
            GRID,
            (2, 2, 2, 2, 2, 3),
            expected_num_trainable_weights=1,
            expected_num_non_trainable_weights=0,
        )  # fmt: skip

    def test_windows_route_independently(self):
        layer = ConvCapsule3D(2, 3, 2, strides=2)
        out = to_numpy(layer(GRID))
        changed = GRID.copy()
        changed[:, 2:, 2:, 2:] = 5.0  # only the last window along every axis
        out_changed = to_numpy(layer(changed))
        np.testing.assert_allclose(out_changed[:, :1], out[:, :1], rtol=1e-6)
        assert not np.allclose(out_changed[:, 1, 1, 1], out[:, 1, 1, 1])

    def test_input_errors(self):
        with pytest.raises(ValueError, match="types, dim"):
            ConvCapsule3D(2, 3, 2)(keras.Input((4, 4, 4, 3)))
        with pytest.raises(ValueError, match="kernel_size"):
            ConvCapsule3D(2, 3, 5)(keras.Input((4, 4, 4, 2, 3)))


def blobs(count, size=12, seed=0):
    """Noisy volumes holding nothing (label 0), a bright cube (label 1) or a
    bright ball (label 2) of radius 2-3 at a random place."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, count)
    grid = np.stack(np.meshgrid(*[np.arange(size)] * 3, indexing="ij"), -1)
    volumes = rng.normal(0, 0.3, (count, size, size, size, 1)).astype("float32")
    for n, label in enumerate(labels):
        if label == 0:
            continue
        centre, radius = rng.uniform(3, size - 3, 3), rng.uniform(2, 3)
        offset = np.abs(grid - centre)
        inside = (
            offset.max(-1) <= radius if label == 0 else np.linalg.norm(offset, axis=-1) <= radius
        )
        volumes[n, inside, 0] += 1.0
    return volumes, labels


@pytest.mark.one_backend("torch")  # what it learns: tests/test_learning.py
def test_a_volumetric_capsule_network_learns():
    keras.utils.set_random_seed(0)
    x = keras.Input((12, 12, 12, 1))
    h = keras.layers.Conv3D(8, 3, activation="relu")(x)
    grid = PrimaryCapsule3D(4, 4, 3, strides=2, grid=True)(h)
    caps = ConvCapsule3D(4, 6, 2, strides=2)(grid)
    scores = kc.Length()(kc.Capsule(3, 8)(keras.layers.Reshape((-1, 6))(caps)))
    model = keras.Model(x, scores)
    model.compile(optimizer="adam", loss=kc.MarginLoss(), metrics=["accuracy"])
    volumes, labels = blobs(96)
    history = model.fit(volumes, labels, batch_size=16, epochs=10, verbose=0).history
    assert history["loss"][-1] < 0.6 * history["loss"][0], history["loss"]
