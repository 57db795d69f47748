"""`--threads`: the backend's CPU threads per operation (torch and
TensorFlow), and the note on a busy CPU."""

import os

import pytest

from tests.conftest import BACKEND
from tests.examples.test_scripts import example


def test_threads_flag_is_checked():
    common = example("common")
    with pytest.raises(SystemExit):
        common.parse_args("test", 1, 1, argv=["--threads", "0"])
    if BACKEND == "jax":
        with pytest.raises(SystemExit):
            common.parse_args("test", 1, 1, argv=["--threads", "1"])
    else:
        assert common.parse_args("test", 1, 1, argv=["--threads", "1"]).threads == 1
    assert common.parse_args("test", 1, 1, argv=[]).threads is None


@pytest.mark.skipif(BACKEND != "torch", reason="torch.set_num_threads")
def test_threads_set_torch_threads():
    import torch

    before = torch.get_num_threads()
    try:
        example("common").set_threads(1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("load, noted", [(8.0, BACKEND == "torch"), (0.5, False)])
def test_busy_cpu_note_on_torch(load, noted, monkeypatch, capsys):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    example("common").set_threads(None)
    assert ("--threads 1" in capsys.readouterr().out) == noted
