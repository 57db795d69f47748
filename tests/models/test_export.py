"""keras_capsules.models.export: the packages each (backend, format) pair
needs, named with the install line before Keras starts, and the raw
torch.export error of a SavedModel with a dynamic batch on torch, turned
into one that says what to do."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules.models import export
from tests.conftest import BACKEND
from tests.test_export import UNSUPPORTED


def without(monkeypatch, *modules):
    """`export.installed` reports `modules` as not installed."""
    real = export.installed
    monkeypatch.setattr(export, "installed", lambda m: m not in modules and real(m))


@pytest.mark.parametrize(
    "backend, missing, words",
    [
        ("tensorflow", ("onnx",), ["onnx on the tensorflow backend", "tf2onnx and onnx"]),
        ("tensorflow", ("tf2onnx", "onnx"), ["not installed: tf2onnx, onnx"]),
        ("jax", ("jax2onnx",), ["onnx on the jax backend", "pip install jax2onnx"]),
        ("torch", ("onnx",), ["onnx on the torch backend", "pip install onnx"]),
    ],
)
def test_a_missing_converter_is_named_with_its_install_line(monkeypatch, backend, missing, words):
    without(monkeypatch, *missing)
    with pytest.raises(ImportError) as info:
        export.check_export("onnx", backend)
    message = str(info.value)
    for part in [*words, f"pip install {' '.join(missing)}", 'pip install -e ".[export]"']:
        assert part in message, (part, message)


def test_a_saved_model_on_torch_without_torch_xla_says_to_export_onnx(monkeypatch):
    without(monkeypatch, "torch_xla")
    with pytest.raises(ImportError) as info:
        export.check_export("tf_saved_model", "torch")
    message = str(info.value)
    parts = ["torch_xla", "not installed: torch-xla", 'format="onnx"', "format='tf_saved_model'"]
    for part in parts:
        assert part in message, (part, message)


@pytest.mark.parametrize("fmt", ["tf_saved_model", "onnx", "litert"])
def test_the_pairs_keras_exports_here_pass(fmt):
    # tests/test_export.py exports every pair it does not skip: a wrong
    # module name in REQUIREMENTS would refuse one of them.
    if (BACKEND, fmt) in UNSUPPORTED:
        pytest.skip(UNSUPPORTED[BACKEND, fmt])
    export.check_export(fmt)
    assert export.missing_packages(fmt) == []


def test_other_errors_pass_through():
    with pytest.raises(KeyError, match="other"):
        with export.export_errors("tf_saved_model"):
            raise KeyError("other")


@pytest.mark.skipif(BACKEND != "torch", reason="Keras writes this SavedModel on torch only")
def test_a_dynamic_batch_saved_model_on_torch_names_the_fix(tmp_path):
    # Keras 3.15 calls torch.export (before torch_xla) with dynamic_shapes
    # that do not match the layer's inputs whenever the batch is None.
    images = keras.Input((6, 6, 1))
    x = kc.PrimaryCapsule(2, 4, 3, strides=2)(images)
    model = keras.Model(images, kc.Length()(kc.Capsule(2, 4)(x)))
    model(np.zeros((2, 6, 6, 1), "float32"))
    with pytest.raises(ValueError) as info:
        with export.export_errors("tf_saved_model"):
            model.export(str(tmp_path / "saved_model"), verbose=False)
    message = str(info.value)
    for part in ["fixed input shape", "input_signature=[keras.InputSpec(", 'format="onnx"']:
        assert part in message, (part, message)
    assert "dynamic_shapes" in str(info.value.__cause__)


def test_a_ready_model_checks_before_keras_exports(monkeypatch, tmp_path):
    # CapsuleTask.export runs check_export first: with the converter of the
    # format missing, the error names it before Keras starts writing.
    missing = {"tensorflow": "tf2onnx", "jax": "jax2onnx", "torch": "onnx"}[BACKEND]
    without(monkeypatch, missing)
    model = kc.models.PointCapsNet(
        num_points=16, primary_capsules=8, primary_dim=4, latent_capsules=4, latent_dim=4
    )
    with pytest.raises(ImportError, match=f"not installed: {missing}"):
        model.export(tmp_path / "m.onnx", format="onnx")
    assert not (tmp_path / "m.onnx").exists()
