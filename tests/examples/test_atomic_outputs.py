"""The examples' outputs are replaced whole: a failed or killed save leaves
the previous file (examples/atomic.py)."""

import json
import os
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

from tests.examples.test_scripts import EXAMPLES, ROOT, example, same_on_every_backend


@same_on_every_backend
def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary(tmp_path):
    atomic = example("atomic")
    path = tmp_path / "metrics.json"
    atomic.write_json(path, {"accuracy": 0.5})
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic.replacing(path) as temporary:
            with open(temporary, "w") as f:
                f.write('{"accura')
            raise RuntimeError("disk full")
    assert json.loads(path.read_text()) == {"accuracy": 0.5}
    assert sorted(os.listdir(tmp_path)) == ["metrics.json"]
    atomic.write_json(path, {"accuracy": 0.75})
    assert json.loads(path.read_text()) == {"accuracy": 0.75}
    assert sorted(os.listdir(tmp_path)) == ["metrics.json"]


# Saves a 20 M-parameter model (80 MB) once, says so, then saves it again
# and again with other weights until it is killed.
SAVER = """
import sys
sys.path.insert(0, {examples!r})
import atomic, keras, numpy as np
model = keras.Sequential([keras.Input((2000,)), keras.layers.Dense(10_000)])
model.layers[0].kernel.assign(np.full((2000, 10_000), 1.0, "float32"))
atomic.save_model(model, {path!r})
print("saved", flush=True)
while True:
    model.layers[0].kernel.assign(np.full((2000, 10_000), 2.0, "float32"))
    atomic.save_model(model, {path!r})
"""


@same_on_every_backend
def test_a_kill_during_a_large_save_leaves_the_previous_model(tmp_path):
    path = str(tmp_path / "model.keras")
    env = dict(os.environ, PYTHONPATH=ROOT)
    code = SAVER.format(examples=EXAMPLES, path=path)
    process = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout.readline().strip() == "saved"
        time.sleep(1.5)  # into the later saves
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    leftovers = [name for name in os.listdir(tmp_path) if name != "model.keras"]
    # Killed mid-save: its partial file is there, beside the whole old one.
    assert len(leftovers) <= 1 and all(".partial-" in name for name in leftovers), leftovers
    model = keras.saving.load_model(path, safe_mode=True)
    kernel = keras.ops.convert_to_numpy(model.layers[0].kernel)
    assert kernel.shape == (2000, 10_000) and np.unique(kernel).size == 1
    assert kernel[0, 0] in (1.0, 2.0)
