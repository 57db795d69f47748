"""A new user's first run: TFDS downloads into an empty data dir.

The network is cut at the HTTP layer (every request fails at once), so the
run must end in the examples' `DatasetUnavailableError` caused by a
connection error, in seconds (before TFDS's minutes of retries), naming
the way to prepare the dataset offline. An `ImportError` on TFDS's
download path means the install misses a package that TFDS imports lazily
there.
"""

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import BACKEND
from tests.examples.test_scripts import EXAMPLES, ROOT, example

# Run before anything else in a process: every HTTP(S) request fails at once
# (no DNS look-up, no retries with back-off).
NO_NETWORK = """
import requests

def _refuse(self, request, *args, **kwargs):
    raise requests.exceptions.ConnectionError(f"network disabled for the test: {request.url}")

requests.adapters.HTTPAdapter.send = _refuse
"""


def _causes(error):
    error = error.__cause__
    while error is not None:
        yield error
        error = error.__cause__ or error.__context__


def _no_network(monkeypatch):
    import requests

    patched = {}
    exec(NO_NETWORK.replace("requests.adapters.HTTPAdapter.send = _refuse", ""), patched)
    monkeypatch.setattr(requests.adapters.HTTPAdapter, "send", patched["_refuse"])


@pytest.mark.parametrize("name", ["mnist", "smallnorb"])
def test_first_download_fails_on_the_network_not_on_an_import(name, tmp_path, monkeypatch):
    """TFDS's own download path (the examples' connection check passed)."""
    import requests

    data = example("data")
    _no_network(monkeypatch)
    monkeypatch.setattr(data, "connection_error", lambda name: None)
    with pytest.raises(data.DatasetUnavailableError) as raised:
        data.load_split(name, "train", data_dir=str(tmp_path / "empty"), download=True)
    error = raised.value
    causes = list(_causes(error))
    assert not [e for e in causes if isinstance(e, ImportError)], causes
    assert any(isinstance(e, requests.exceptions.ConnectionError) for e in causes), causes
    assert error.reason == "network", str(error)
    assert "no network connection" in str(error)
    assert "TFDS_DATA_DIR" in str(error) and f"tfds build {name}" in str(error)


# The offline path each dataset's error names.
OFFLINE = {
    "mnist": "examples/prepare_mnist_offline.py mnist.npz DIR",
    "smallnorb": "examples/prepare_tfds_offline.py smallnorb DIR",
    "imdb_reviews": "examples/prepare_tfds_offline.py imdb_reviews DIR",
    "glue/sst2": "examples/prepare_tfds_offline.py glue/sst2 DIR",
}


@pytest.mark.parametrize("name", sorted(OFFLINE))
def test_offline_fails_in_seconds_naming_the_offline_path(name, tmp_path, monkeypatch):
    """No network and nothing prepared: the error comes from the examples'
    one-request check, before TFDS starts its download with retries."""
    import tensorflow_datasets as tfds

    data = example("data")
    _no_network(monkeypatch)

    def load(*args, **kwargs):
        raise AssertionError("tfds.load was called")

    monkeypatch.setattr(tfds, "load", load)
    start = time.perf_counter()
    with pytest.raises(data.DatasetUnavailableError) as raised:
        data.load_split(name, "train", data_dir=str(tmp_path / "empty"))
    assert time.perf_counter() - start < 5
    message = str(raised.value)
    assert raised.value.reason == "network", message
    assert "cannot be reached" in message and "no network connection" in message
    assert OFFLINE[name] in message and "--smoke" in message and "TFDS_DATA_DIR" in message


def test_mock_data_needs_no_network(monkeypatch):
    data = example("data")
    _no_network(monkeypatch)
    with data.mock_data(4):
        assert len(list(data.load_split("mnist", "train"))) == 4


def test_missing_module_names_the_package_to_install():
    data = example("data")
    try:
        raise ModuleNotFoundError(
            "No module named 'importlib_resources'", name="importlib_resources"
        )
    except ModuleNotFoundError as cause:
        error = data._unavailable("mnist", "train", None, cause)
    assert error.reason == "missing_module"
    assert "pip install importlib-resources" in str(error)
    assert "network" not in str(error)


def test_main_command_on_first_run_ends_with_the_network_message(tmp_path):
    """The README's main command (one step of it) in a fresh interpreter."""
    script = f"{EXAMPLES}/mnist_efficient_capsnet.py"
    argv = [
        script,
        "--epochs",
        "1",
        "--steps-per-epoch",
        "1",
        "--data-dir",
        str(tmp_path / "empty"),
        "--output-dir",
        str(tmp_path / "out"),
    ]
    code = (
        "import sys, runpy\n"
        + NO_NETWORK
        + f"sys.argv = {argv!r}\n"
        + f"sys.path.insert(0, {EXAMPLES!r})\n"
        + "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
    )
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("data.DatasetUnavailableError:") or "DatasetUnavailableError" in last, (
        result.stderr[-3000:]
    )
    assert "no network connection" in last and "TFDS_DATA_DIR" in last, last
    assert "examples/prepare_mnist_offline.py" in last, last
    assert "ModuleNotFoundError" not in result.stderr and "ImportError" not in result.stderr


def _env():
    return dict(os.environ, PYTHONPATH=ROOT, KERAS_BACKEND=BACKEND)


def test_offline_preparation_from_a_local_npz(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    arrays = {
        f"x_{s}": rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        for s, n in (("train", 12), ("test", 6))
    }
    arrays.update({f"y_{s}": rng.integers(0, 10, n) for s, n in (("train", 12), ("test", 6))})
    np.savez(tmp_path / "mnist.npz", **arrays)
    data_dir = str(tmp_path / "tfds")
    example("prepare_mnist_offline").main([str(tmp_path / "mnist.npz"), data_dir])
    data = example("data")
    # Prepared: no connection check, no download.
    monkeypatch.setattr(data, "connection_error", None)
    images, labels = next(iter(data.mnist("test", 6, None, data_dir, download=True)))
    # TFDS stores the examples in its own (hashed) order.
    pixels = np.round(np.asarray(images)[..., 0] * 255.0).astype(np.uint8)
    read = sorted(zip(np.asarray(labels).tolist(), [im.tobytes() for im in pixels]))
    written = sorted(zip(arrays["y_test"].tolist(), [im.tobytes() for im in arrays["x_test"]]))
    assert read == written
    with pytest.raises(ValueError, match="x_train"):
        np.savez(tmp_path / "bad.npz", **dict(arrays, x_train=arrays["x_train"][:, :27]))
        example("prepare_mnist_offline").read_npz(tmp_path / "bad.npz")


def test_mock_data_logs_no_expected_warnings(caplog):
    """--smoke's fake TFDS: no warning about the mock's made-up data dir, no
    deprecated TFDS field read; a real missing metadata file still warns."""
    import logging

    data = example("data")
    with caplog.at_level(logging.WARNING), data.mock_data(4):
        list(data.load_split("mnist", "train"))
        list(data.load_split("glue/sst2", "validation"))
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    record = logging.LogRecord("absl", logging.WARNING, "", 0, "Variant folder %s has no %s",
                               (ROOT, "dataset_info.json"), None)  # fmt: skip
    assert data._MockDataDirFilter().filter(record)
