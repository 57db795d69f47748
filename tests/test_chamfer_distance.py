"""ChamferDistance: the float64 reference in chunks of any size, weights and
reductions, half-precision inputs, errors, saving, and a cloud that learns
its shape. Gradients: the parity matrix."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules.losses import ChamferDistance
from tests.reference.point_cloud import chamfer_distance
from tests.test_case import to_numpy

RNG = np.random.default_rng(0)
P = RNG.normal(size=(3, 10, 3)).astype("float32")
Q = RNG.normal(size=(3, 6, 3)).astype("float32")


@pytest.mark.parametrize("chunk_size", [None, 1, 3, 4, 10, 512])
def test_matches_float64_reference_in_chunks_of_any_size(chunk_size):
    loss = ChamferDistance(chunk_size, reduction=None)
    expected = chamfer_distance(P.astype("float64"), Q.astype("float64"))
    np.testing.assert_allclose(to_numpy(loss(P, Q)), expected, rtol=1e-5)


def test_reduction_and_sample_weight():
    per_cloud = chamfer_distance(P.astype("float64"), Q.astype("float64"))
    weights = np.array([1.0, 0.0, 2.0], "float32")
    loss = ChamferDistance()
    np.testing.assert_allclose(float(to_numpy(loss(P, Q))), per_cloud.mean(), rtol=1e-5)
    weighted = float(to_numpy(loss(P, Q, sample_weight=weights)))
    np.testing.assert_allclose(weighted, (per_cloud * weights).sum() / 3, rtol=1e-5)


def test_identical_clouds_give_zero_and_half_precision_stays_finite():
    assert float(to_numpy(ChamferDistance()(P, P))) < 1e-6
    big = (P * 300).astype("float16")
    value = to_numpy(ChamferDistance(reduction=None)(big, big[:, ::-1]))
    assert np.all(np.isfinite(value)) and np.all(value < 1e-2 * 300**2)


def test_errors_are_named():
    with pytest.raises(ValueError, match="chunk_size=0"):
        ChamferDistance(chunk_size=0)
    with pytest.raises(ValueError, match=r"y_true.shape=\(3, 30\)"):
        ChamferDistance()(P.reshape(3, 30), Q)


def test_compiled_model_saves_and_loads_with_safe_mode(tmp_path):
    model = keras.Sequential(
        [keras.Input((1,)), keras.layers.Dense(6 * 3), keras.layers.Reshape((6, 3))]
    )
    model.compile(optimizer="adam", loss=kc.losses.ChamferDistance(chunk_size=4))
    model.fit(np.zeros((2, 1)), P[:2, :6], verbose=0)
    path = tmp_path / "cloud.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded.loss, ChamferDistance) and loaded.loss.chunk_size == 4


def test_a_generated_cloud_learns_its_shape():
    # 32 points from a code of one number: a circle for 0, a line for 1.
    angles = np.linspace(0, 2 * np.pi, 32, endpoint=False)
    circle = np.stack([np.cos(angles), np.sin(angles), 0 * angles], -1)
    line = np.stack([np.linspace(-1, 1, 32), 0 * angles, 0 * angles], -1)
    codes = np.array([[0.0], [1.0]] * 16, "float32")
    targets = np.stack([circle, line] * 16).astype("float32")
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((1,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(32 * 3),
            keras.layers.Reshape((32, 3)),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=ChamferDistance(chunk_size=8))
    losses = model.fit(codes, targets, batch_size=8, epochs=40, verbose=0).history["loss"]
    assert losses[-1] < 0.05 * losses[0], losses
