"""The hand-written backward passes run except while torch traces for export."""

import pytest

from keras_capsules.routing.custom_backward import runs_manual_backward
from tests.test_case import BACKEND


def test_manual_backward_runs_outside_export():
    assert runs_manual_backward("manual")
    assert not runs_manual_backward("autodiff")


@pytest.mark.skipif(BACKEND != "torch", reason="torch's export tracer only")
def test_torch_tracing_runs_the_plain_forward():
    import torch

    seen = []

    def probe(x):
        seen.append(runs_manual_backward("manual"))
        return x * 2

    torch.jit.trace(probe, torch.ones(2), check_trace=False)
    assert seen == [False]
    probe(torch.ones(2))  # not traced
    assert seen == [False, True]
