"""`.keras` files saved by keras-capsules 0.1.0 (tests/fixtures/v0_1_0,
made by 0.1.0's own code: tests/fixtures/README.md): they do not load as
they are, and `convert.keras_v0_1.upgrade` makes them load and compute
what they computed, with their optimizer state."""

import json
import pathlib
import zipfile

import keras
import numpy as np
import pytest

from keras_capsules.convert import keras_v0_1
from tests.test_case import as_list, forward

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "v0_1_0"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())["fixtures"]


def _outputs(model, entry, data):
    inputs = [data[name] for name in sorted(entry["inputs"])]
    x = inputs if len(inputs) > 1 else inputs[0]
    outputs = {}
    # One jitted call on JAX each (forward): eager calls compile every op.
    flat = keras.tree.flatten(forward(model, x, training=False))
    outputs.update({f"output_{i}": y for i, y in enumerate(flat)})
    if "poses" in data:
        outputs["poses"] = forward(model, x, training=False, return_poses=True)[1]
    if "reconstruction" in data:
        outputs["reconstruction"] = model.reconstruct(x)
    return {k: keras.ops.convert_to_numpy(v) for k, v in outputs.items()}


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_an_upgraded_file_loads_and_computes_what_it_did(name, tmp_path):
    entry = MANIFEST[name]
    old = FIXTURES / entry["file"]
    with pytest.raises((TypeError, ValueError)):  # 0.1.0's configs name removed arguments
        keras.saving.load_model(old, safe_mode=True)
    new = keras_v0_1.upgrade(old, tmp_path / "upgraded.keras")
    config = zipfile.ZipFile(new).read("config.json").decode()
    for removed in ('"remat"', '"implementation"', '"backward"', "StridedConv2D", "Backbone"):
        assert removed not in config, removed
    model = keras.saving.load_model(new, safe_mode=True)
    data = np.load(FIXTURES / entry["data"])
    actual = _outputs(model, entry, data)
    # Float32 sums in another order round differently: another backend, or
    # TensorFlow with another thread count (HeinsenCapsNet's scores on TF:
    # up to 1.2e-5 of their scale; its poses on JAX: 3e-5; its preset's
    # float64 comparison 1.2e-5 each).
    scale = 1e-4
    for key in [k for k in data.files if not k.startswith("input_")]:
        expected = data[key]
        np.testing.assert_allclose(
            actual[key], expected, rtol=1e-5, atol=scale * np.abs(expected).max(), err_msg=key
        )
    # Compiled as saved, with the optimizer's state after its one step.
    assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == 1
    weights = [v for v in model.optimizer.variables if "iteration" not in v.path]
    assert any(np.abs(keras.ops.convert_to_numpy(v)).max() > 0 for v in weights)
    assert len(as_list(model.trainable_weights)) > 0


def test_upgrade_refuses_what_is_not_a_keras_file(tmp_path):
    text = tmp_path / "notes.keras"
    text.write_text("not a zip")
    with pytest.raises(ValueError, match="is not a `.keras` file"):
        keras_v0_1.upgrade(text, tmp_path / "out.keras")
    with pytest.raises(ValueError, match="new_path"):
        keras_v0_1.upgrade(text, text)


def test_upgrade_config_moves_iterations_into_the_router():
    old = {
        "module": "keras_capsules.models.matrix_capsnet",
        "class_name": "MatrixCapsNet",
        "config": {"A": 4, "B": 2, "C": 2, "D": 3, "iterations": 2, "router": None},
        "registered_name": "keras_capsules>MatrixCapsNet",
    }
    config = keras_v0_1.upgrade_config(old)["config"]
    assert [config[k] for k in ("conv_filters", "conv_capsules2")] == [4, 3]
    assert config["router"]["class_name"] == "EMRouting"
    assert config["router"]["config"] == {"iterations": 2}
    assert "iterations" not in config
