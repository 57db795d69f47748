"""benchmarks/point_capsnet.py and benchmarks/volume_memory.py run end to end
at small sizes on the current backend: workers, timed training steps (the
loss finite), the tables and the --json files."""

import json
import math
import os
import subprocess
import sys

import pytest

from tests.conftest import on_torch
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


@on_torch
def test_depth_study_smoke_run(tmp_path):
    """benchmarks/depth.py on generated digits: a row per router and
    depth (calibrated), each routed layer measured, the table, the JSON and
    the figure."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import depth
    finally:
        sys.path.remove(os.path.join(ROOT, "benchmarks"))
    out, figure = tmp_path / "depth.json", tmp_path / "depth.png"
    rows = depth.main(
        ["--depths", "1,3", "--routers", "dynamic", "--train", "64", "--test", "32",
         "--epochs", "1", "--batch", "32", "--residual", "--calibrate",
         "--json", str(out), "--figure", str(figure)]
    )  # fmt: skip
    assert [(r["router"], r["depth"]) for r in rows] == [("dynamic", 1), ("dynamic", 3)]
    assert list(rows[1]["layers"]) == ["hidden_1", "hidden_2", "classes"]
    for layer in rows[1]["layers"].values():
        assert 0 <= layer["starved_fraction"] <= 1 and 0 <= layer["coefficient_entropy"] <= 1
        assert math.isfinite(layer["gradient_norm"]) and layer["gradient_norm"] >= 0
        assert 0 <= layer["coefficient_change"] <= 1  # dynamic routing iterates
    assert json.loads(out.read_text())["rows"][1]["depth"] == 3
    assert figure.stat().st_size > 0
