"""benchmarks/point_capsnet.py and benchmarks/volume_memory.py run end to end
at small sizes on the current backend: workers, timed training steps (the
loss finite), the tables and the --json files."""

import json
import math
import os
import subprocess
import sys

import pytest

from tests.test_case import BACKEND

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "point_capsnet.py")


@pytest.mark.one_backend
def test_smoke_run(tmp_path):
    out = tmp_path / "rows.json"
    args = [sys.executable, SCRIPT, "--backends", BACKEND, "--size", "small", "--points", "32"]
    args += ["--batch", "2", "--repeats", "2", "--timeout", "240", "--json", str(out)]
    result = subprocess.run(
        args, cwd=ROOT, capture_output=True, text=True, timeout=300, env=dict(os.environ)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert "error" not in row, row
    assert row["backend"] == BACKEND and len(row["steps"]) == 2
    assert all(s["s"] > 0 and math.isfinite(s["loss"]) for s in row["steps"])
    assert row["parameters"] > 0
    assert "| backend | step | built MiB | step peak MiB |" in result.stdout


VOLUME_SCRIPT = os.path.join(ROOT, "benchmarks", "volume_memory.py")


@pytest.mark.one_backend
def test_volume_memory_smoke_run(tmp_path):
    out = tmp_path / "rows.json"
    args = [sys.executable, VOLUME_SCRIPT, "--backends", BACKEND, "--sides", "3,4"]
    args += ["--types", "2", "--dim", "4", "--repeats", "1", "--json", str(out)]
    result = subprocess.run(
        args, cwd=ROOT, capture_output=True, text=True, timeout=300, env=dict(os.environ)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["side"] for r in rows] == [3, 4]
    assert all("error" not in r and math.isfinite(r["steps"][0]["loss"]) for r in rows), rows
    assert "4 GiB at side" in result.stdout
