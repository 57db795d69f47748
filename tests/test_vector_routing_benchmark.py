"""benchmarks/vector_routing_memory.py runs end to end: two tiny sizes on the
current backend, a worker per size, the table, the fits and the --json file.
On torch a stand-in for the authors' `heinsen_routing.py` (any module with
an `EfficientVectorRouting`) adds their row and the ours / authors table."""

import json
import os
import subprocess
import sys

import pytest

from tests.test_case import BACKEND

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "vector_routing_memory.py")

STAND_IN = """
import torch


class EfficientVectorRouting(torch.nn.Module):
    def __init__(self, n_inp, n_out, d_inp, d_out, n_iters=2):
        super().__init__()
        self.n_out = n_out
        self.w = torch.nn.Parameter(torch.ones(d_inp, d_out) / d_inp)

    def forward(self, x):
        pooled = (x @ self.w).mean(dim=-2, keepdim=True)
        return pooled.expand(*x.shape[:-2], self.n_out, -1)
"""


@pytest.mark.one_backend
def test_smoke_run(tmp_path):
    out = tmp_path / "rows.json"
    args = [sys.executable, SCRIPT, "--backends", BACKEND, "--sizes", "64,128"]
    args += ["--repeats", "1", "--timeout", "120", "--json", str(out)]
    if BACKEND == "torch":
        (tmp_path / "heinsen_routing.py").write_text(STAND_IN)
        args += ["--authors-code", str(tmp_path)]
    result = subprocess.run(
        args, cwd=ROOT, capture_output=True, text=True, timeout=300, env=dict(os.environ)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(out.read_text())
    expected = {BACKEND, "torch-authors"} if BACKEND == "torch" else {BACKEND}
    assert {r["implementation"] for r in data["rows"]} == expected
    for row in data["rows"]:
        assert "error" not in row, row
        assert row["peak_mb"] > 0 and row["median_s"] > 0
        assert len(row["steps"]) == 1
    assert set(data["growth"]) == expected
    assert len(data["ours_over_authors"]) == (2 if BACKEND == "torch" else 0)
    assert "| implementation | n |" in result.stdout
    assert str(tmp_path) not in result.stdout
