"""Registry of parity cases.

A case is a small, fully specified computation that runs on every backend
in a worker subprocess (`tests/parity/worker.py`) and in float64 NumPy
(`tests/reference/`). `tests/test_parity.py` compares, for each case:

- forward outputs of each backend (float32) with the float64 reference;
- gradients of `sum_k sum(outputs[k] * cotangents[k])` (fixed random
  cotangents) w.r.t. the inputs named in `diff` with central finite
  differences of the reference, and across backends.

To add cases, write a `tests/parity/cases_<family>.py` module that calls
`register(Case(...))` at import time; the registry imports every such
module. Inputs are float64 arrays made from a seeded generator; weights
are inputs too, applied with `stateless(layer, tensors, ...)`, which looks
each variable up in `tensors` by its name.
"""

import dataclasses
import importlib
import pathlib
import zlib
from collections.abc import Callable

import numpy as np

CASES = {}


@dataclasses.dataclass
class Case:
    name: str
    # seeded rng -> {name: float64 array}; integer arrays are passed as int32.
    inputs: Callable
    # {name: float64 array} -> list of float64 arrays (the reference).
    reference: Callable
    # (layer or None, {name: tensor}) -> list of tensors (the library).
    forward: Callable
    # () -> layer (or None); called once per worker, before the forward.
    build: Callable = lambda: None
    # names of the inputs to differentiate with respect to.
    diff: tuple = ()
    # (perturbed arrays, unperturbed arrays) -> outputs, for the finite
    # differences of a forward that stops some gradients; default: reference.
    grad_reference: Callable = None
    # finite-difference step, float64.
    fd_step: float = 1e-6
    # relative / absolute tolerances of the forward check.
    rtol: float = 1e-5
    atol: float = 1e-6
    # tolerance of the gradient checks (relative and absolute).
    grad_tol: float = 1e-4

    def make_inputs(self):
        return self.inputs(np.random.default_rng(zlib.crc32(self.name.encode())))

    def cotangents(self, shapes):
        rng = np.random.default_rng(zlib.crc32(self.name.encode()) + 1)
        return [rng.normal(size=s) for s in shapes]


def register(case):
    if case.name in CASES:
        raise ValueError(f"Duplicate parity case name: {case.name}")
    CASES[case.name] = case
    return case


def load_cases():
    """Imports every `cases_*.py` module beside this file; returns CASES."""
    for path in sorted(pathlib.Path(__file__).parent.glob("cases_*.py")):
        importlib.import_module(f"tests.parity.{path.stem}")
    return CASES


def stateless(layer, tensors, *args, **kwargs):
    """Calls `layer(*args, **kwargs)` with its weights taken from `tensors`.

    Each variable is looked up by its name (`kernel`, `beta_u`, ...), so the
    weights are differentiable inputs on every backend. The layer must be
    built (the worker calls each case's forward once eagerly first).
    """
    if not layer.built:
        layer(*args, **kwargs)
    values = []
    for group in (layer.trainable_variables, layer.non_trainable_variables):
        names = [v.name for v in group]
        missing = [n for n in names if n not in tensors]
        if missing or len(set(names)) != len(names):
            raise KeyError(
                f"{layer.name}: give each weight once by name; have {sorted(tensors)}, need {names}"
            )
        values.append([tensors[n] for n in names])
    outputs, _ = layer.stateless_call(values[0], values[1], *args, **kwargs)
    return outputs
