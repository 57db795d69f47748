"""`.keras` files saved by keras-capsules 0.2.0 (tests/fixtures/v0_2_0,
made by tests/fixtures/make_v0_2_0_fixtures.py) load with `safe_mode=True`,
give the outputs they gave, and train as loaded: arguments renamed in
0.3.0, class capsules saved as `digit_capsules` (renamed `class_capsules`)
and losses compiled sparse in 0.2.0 included.

Each file is loaded on one backend per suite run (`one_backend`, picked by
a hash of the test's id, so the seven files spread over the three
backends): reading a file is Keras-level code, and loading a `.keras` file
on every backend is tests/test_portability.py's contract.
ON_EVERY_BACKEND=1 loads each on every backend."""

import pathlib
import warnings

import keras
import numpy as np
import pytest

import keras_capsules  # noqa: F401  (registers the classes the files name)
from tests.conftest import on_torch
from tests.test_case import forward, to_numpy

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "v0_2_0"
NAMES = sorted(p.stem for p in FIXTURES.glob("*.keras"))


def test_the_fixtures_are_there():
    assert NAMES == [
        "capsnet",
        "capsule_image_classifier",
        "efficient_capsnet",
        "heinsen_capsnet",
        "point_capsule_classifier",
        "quaternion_capsule_classifier",
        "vector_routing",
    ]


# The point-cloud classifiers' files on torch: compiling their training step
# took 8-22 s on TensorFlow and JAX.
ON_TORCH = {"point_capsule_classifier", "quaternion_capsule_classifier"}


@pytest.mark.one_backend
@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=on_torch) if n in ON_TORCH else n for n in NAMES],
)
def test_loads_computes_and_trains_as_saved(name):
    data = np.load(FIXTURES / f"{name}.npz")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the old names, as saved
        model = keras.saving.load_model(FIXTURES / f"{name}.keras", safe_mode=True)
    outputs = to_numpy(forward(model, data["x"], training=False))
    np.testing.assert_allclose(outputs, data["outputs"], rtol=1e-5, atol=1e-6)
    assert model.compiled
    if keras.backend.backend() == "torch" and model.jit_compile is True:
        # 0.2.0 saved what compile("auto") resolved to on TensorFlow (XLA on):
        # on torch that is torch.compile, about a minute a model here. Files
        # saved by 0.3.0 keep "auto" (tests/models/test_ready_models.py).
        model.jit_compile = False
    steps = int(to_numpy(model.optimizer.iterations))
    history = model.fit(data["x"], data["y"], batch_size=len(data["x"]), verbose=0).history
    assert (
        np.isfinite(history["loss"][0]) and int(to_numpy(model.optimizer.iterations)) == steps + 1
    )
    if name != "vector_routing":  # a ready model: its metric, on one-hot targets
        assert "accuracy" in history, history
