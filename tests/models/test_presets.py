"""The preset registry and `from_preset`'s checks of what it is given.

The presets' outputs against the authors' are tested beside each model
(tests/models/test_heinsen_capsnet.py, tests/models/test_efficient_capsnet.py).
"""

import os
import pathlib
import subprocess
import sys

import keras
import pytest

from keras_capsules import models
from keras_capsules.models import presets
from tests.conftest import BACKEND, authors_weights

FIELDS = {"url", "sha256", "license", "source", "paper", "paper_accuracy", "parameters"}


def test_list_presets_names_source_license_accuracy():
    listed = models.list_presets()
    assert set(listed) == {"heinsen_smallnorb", "efficient_capsnet_smallnorb"}
    for name, info in listed.items():
        assert FIELDS <= set(info), name
        assert len(info["sha256"]) == 64 and info["url"].startswith("https://github.com/")
        assert info["source"].split("@")[1] in info["url"]  # pinned at the commit
    listed["heinsen_smallnorb"]["license"] = "changed"
    assert models.list_presets()["heinsen_smallnorb"]["license"] == "MIT"


def test_class_list_presets_keeps_its_own():
    assert set(models.EfficientCapsNet.list_presets()) == {"efficient_capsnet_smallnorb"}
    assert models.CapsNet.list_presets() == {}


def test_unknown_preset_names_the_valid_ones():
    with pytest.raises(ValueError, match="heinsen_smallnorb.*Received: preset='capsnet_mnist'"):
        models.from_preset("capsnet_mnist")
    with pytest.raises(ValueError, match="Received: preset=3"):
        models.from_preset(3)


def test_weights_that_are_not_the_authors_file_are_refused(tmp_path):
    other = tmp_path / "efficient_capsnet_SMALLNORB.h5"
    other.write_bytes(b"fine-tuned elsewhere")
    with pytest.raises(ValueError, match="unchanged efficient_capsnet_SMALLNORB.h5.*sha256"):
        models.from_preset("efficient_capsnet_smallnorb", weights=other)
    with pytest.raises(ValueError, match="not a file"):
        models.from_preset("heinsen_smallnorb", weights=tmp_path / "absent.pt")


def test_a_damaged_keras_file_is_named(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    good = tmp_path / "good.keras"
    model.save(good)
    whole = good.read_bytes()
    for name, content in (("truncated", whole[: len(whole) // 2]), ("garbage", b"not a zip")):
        path = tmp_path / f"{name}.keras"
        path.write_bytes(content)
        with pytest.raises(ValueError, match=f"{path} is not a readable `.keras` file"):
            models.from_preset(str(path))
    assert isinstance(models.from_preset(str(good)), keras.Sequential)


def test_preset_of_another_class_is_refused():
    with pytest.raises(ValueError, match="is a HeinsenCapsNet, not a EfficientCapsNet"):
        models.EfficientCapsNet.from_preset("heinsen_smallnorb")


def test_download_checks_the_pinned_hash(tmp_path, monkeypatch):
    # A file:// origin stands in for GitHub: get_file downloads and checks it.
    fake = tmp_path / "smallNORB_pretrained_model_state_dict.pt"
    fake.write_bytes(b"not the authors' file")
    spec, cls = presets._REGISTRY["heinsen_smallnorb"]
    monkeypatch.setitem(
        presets._REGISTRY,
        spec.name,
        (presets.dataclasses.replace(spec, url=pathlib.Path(fake).as_uri()), cls),
    )
    with pytest.raises(ValueError, match="(?i)hash"):
        models.from_preset("heinsen_smallnorb", cache_dir=str(tmp_path / "cache"))


@pytest.mark.parametrize("origin", ["http://127.0.0.1:9", "missing-file"])
def test_a_failed_download_names_the_file_and_weights_path(tmp_path, monkeypatch, origin):
    # Port 9 refuses the connection at once; a missing file:// is a URL error too.
    spec, cls = presets._REGISTRY["heinsen_smallnorb"]
    if origin == "missing-file":
        url = (tmp_path / "absent" / spec.file_name).as_uri()
    else:
        url = f"{origin}/{spec.file_name}"
    monkeypatch.setitem(
        presets._REGISTRY, spec.name, (presets.dataclasses.replace(spec, url=url), cls)
    )
    with pytest.raises(ConnectionError) as raised:
        models.from_preset("heinsen_smallnorb", cache_dir=str(tmp_path / "cache"))
    message = str(raised.value)
    for part in (spec.file_name, url, "weights=PATH", spec.sha256, spec.source):
        assert part in message, (part, message)


@pytest.mark.skipif(BACKEND != "torch", reason="the same numbers on every backend: run on torch")
@pytest.mark.parametrize("name", sorted(models.list_presets()))
def test_listed_parameters_are_the_models(name):
    spec = models.list_presets()[name]
    model = getattr(models, spec["model"])(**spec["config"])
    assert model.count_params() == spec["parameters"]


def test_each_model_registers_its_presets_beside_it():
    assert {name: spec["model"] for name, spec in models.list_presets().items()} == {
        "efficient_capsnet_smallnorb": "EfficientCapsNet",
        "heinsen_smallnorb": "HeinsenCapsNet",
    }
    spec, cls = presets._REGISTRY["heinsen_smallnorb"]
    with pytest.raises(ValueError, match="is for HeinsenCapsNet"):
        presets.register_presets([spec], models.EfficientCapsNet)
    other = presets.dataclasses.replace(spec, description="another")
    with pytest.raises(ValueError, match="Another preset is registered as 'heinsen_smallnorb'"):
        presets.register_presets([other], cls)
    presets.register_presets([spec], cls)  # the same again: nothing changes


HEINSEN_WEIGHTS, needs_heinsen_weights = authors_weights(
    "heinsen2019_smallNORB_pretrained_model_state_dict.pt"
)
WITHOUT_TORCH = """
import sys
sys.modules["torch"] = None  # any import of torch now fails
import numpy as np
import keras_capsules as kc
fixture = np.load(sys.argv[2])
model = kc.models.from_preset("heinsen_smallnorb", weights=sys.argv[1])
scores = model.predict((fixture["images"] / 255.0).astype("float32"), verbose=0)
error = np.abs(scores - fixture["a_out"]).max() / np.abs(fixture["a_out"]).max()
assert error < 1e-4 and (scores.argmax(-1) == fixture["a_out"].argmax(-1)).all(), error
print("torch absent, max difference", error)
"""


@pytest.mark.skipif(
    BACKEND != "tensorflow", reason="torch-free loading is backend code: once, without torch"
)
@needs_heinsen_weights
def test_the_pytorch_preset_loads_without_torch():
    root = pathlib.Path(__file__).resolve().parents[2]
    fixture = root / "tests" / "fixtures" / "heinsen_smallnorb.npz"
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH, HEINSEN_WEIGHTS, str(fixture)],
        env=dict(os.environ, KERAS_BACKEND=BACKEND, PYTHONPATH=str(root)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0 and "torch absent" in result.stdout, result.stderr[-3000:]
