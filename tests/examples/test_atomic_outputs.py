"""The examples' outputs are replaced whole: a failed or killed save leaves
the previous file (examples/atomic.py)."""

import ast
import glob
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


def _writes_outside_atomic(path):
    """The lines of `path` that open a file for writing under a name other
    than a `temporary` from `atomic.replacing`, or `json.dump` directly."""
    found = []
    with open(path) as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        function = ast.unparse(node.func)
        if function == "json.dump":
            found.append(node.lineno)
        elif function == "open" and len(node.args) > 1:
            mode = node.args[1]
            writes = not isinstance(mode, ast.Constant) or set(str(mode.value)) & set("wax")
            target = node.args[0]
            if writes and not (isinstance(target, ast.Name) and target.id == "temporary"):
                found.append(node.lineno)
    return found


@same_on_every_backend
def test_every_example_writes_its_files_through_atomic():
    scripts = sorted(glob.glob(os.path.join(EXAMPLES, "*.py")))
    assert len(scripts) > 20
    offenders = {
        os.path.basename(path): lines
        for path in scripts
        if os.path.basename(path) != "atomic.py" and (lines := _writes_outside_atomic(path))
    }
    assert not offenders, f"write these through examples/atomic.py: {offenders}"


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
