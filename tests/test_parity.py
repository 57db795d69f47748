"""The cross-backend parity matrix.

Every case of `tests/parity/cases_*.py` runs on TensorFlow, PyTorch and JAX,
one worker subprocess per backend, and is compared with its float64 NumPy
reference (forward values; gradients by central finite differences) and
with the other backends. Workers run once per version of the sources, Keras,
NumPy and the backends: their results are cached under `.pytest_cache/parity`,
so the three per-backend pytest runs share them, and so are the float64
references with their finite-difference gradients.
"""

import hashlib
import importlib.metadata
import importlib.util
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from tests.conftest import exclusive, save_npz
from tests.parity.registry import load_cases
from tests.reference.finite_diff import fd_gradients

ROOT = pathlib.Path(__file__).resolve().parent.parent
BACKENDS = ("tensorflow", "torch", "jax")
CASES = load_cases()
WORKER_TIMEOUT_S = 1800
# Under pytest-xdist the first process that needs the workers starts them,
# the others wait on a file lock: they run once per backend run.
pytestmark = pytest.mark.xdist_group("parity")


# Distributions whose versions change the workers' numbers.
_DISTRIBUTIONS = ("keras", "numpy", "tensorflow", "tensorflow-cpu", "torch", "jax", "jaxlib")


def _versions():
    """`name==version` of each installed distribution that computes."""
    found = []
    for name in _DISTRIBUTIONS:
        try:
            found.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return ";".join(found)


def _source_hash():
    """Key of the cached results: the sources and the versions of Keras, NumPy
    and the backends (an upgrade of any of them recomputes)."""
    h = hashlib.sha256(_versions().encode())
    paths = [
        p
        for folder in ("keras_capsules", "tests/parity", "tests/reference")
        for p in sorted((ROOT / folder).rglob("*.py"))
    ]
    # The workers' gradients come from tests/test_case.py.
    for path in paths + [ROOT / "tests" / "test_case.py"]:
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


@pytest.fixture(scope="session")
def parity_results():
    """{backend: {key: array}} for every installed backend, and
    `"reference"`: the float64 references and their finite-difference
    gradients."""
    cache = ROOT / ".pytest_cache" / "parity"
    cache.mkdir(parents=True, exist_ok=True)
    key = _source_hash()
    paths = {b: cache / f"{b}-{key}.npz" for b in BACKENDS if _installed(b)}
    references = cache / f"reference-{key}.npz"
    # Under pytest-xdist every test process needs the results: the first to
    # take the lock runs the workers, the others wait and read its files.
    with exclusive(cache / f"{key}.lock"):
        _run_missing_workers(paths, references)
    return {
        **{b: dict(np.load(p)) for b, p in paths.items()},
        "reference": dict(np.load(references)),
    }


def _write_references(path):
    """The float64 references of every case and their finite-difference
    gradients, once per version of the sources (each backend's run and
    test process reads them, instead of computing them in each)."""
    arrays = {}
    for name, case in CASES.items():
        inputs = case.make_inputs()
        for i, out in enumerate(case.reference(inputs)):
            arrays[f"{name}|out|{i}"] = out
        for k, grad in (fd_gradients(case, inputs) if case.diff else {}).items():
            arrays[f"{name}|grad|{k}"] = grad
    save_npz(path, arrays)


def _run_missing_workers(paths, references):
    running = {}
    for backend, path in paths.items():
        if not path.exists():
            tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
            env = {**os.environ, "KERAS_BACKEND": backend}
            # Output to a file, not a pipe: nobody reads a pipe while the
            # references are computed, and a full one would stall the worker.
            log = tempfile.TemporaryFile()
            running[backend] = (
                subprocess.Popen(
                    [sys.executable, "-m", "tests.parity.worker", backend, str(tmp)],
                    cwd=ROOT,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                ),
                tmp,
                log,
            )
    # While the workers run.
    if not references.exists():
        _write_references(references)
    for backend, (proc, tmp, log) in running.items():
        with log:
            proc.wait(timeout=WORKER_TIMEOUT_S)
            if proc.returncode != 0:
                log.seek(0)
                output = log.read().decode(errors="replace")
                pytest.fail(f"{backend} parity worker failed:\n{output[-5000:]}")
        os.replace(tmp, paths[backend])


def _installed(backend):
    module = {"tensorflow": "tensorflow", "torch": "torch", "jax": "jax"}[backend]
    return importlib.util.find_spec(module) is not None


def _case_results(results, name, backend):
    if backend not in results:
        pytest.skip(f"{backend} is not installed")
    results = results[backend]
    if f"{name}|error" in results:
        pytest.fail(f"{backend} raised:\n{results[f'{name}|error']}")
    outputs = []
    while f"{name}|out|{len(outputs)}" in results:
        outputs.append(results[f"{name}|out|{len(outputs)}"])
    grads = {k: results[f"{name}|grad|{k}"] for k in CASES[name].diff}
    return outputs, grads


def _assert_grad_close(actual, expected, tol, what):
    scale = max(1.0, float(np.max(np.abs(expected))))
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol * scale, err_msg=what)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_float64_reference(name, backend, parity_results):
    case = CASES[name]
    outputs, grads = _case_results(parity_results, name, backend)
    ref_outputs, ref_grads = _case_results(parity_results, name, "reference")
    assert len(outputs) == len(ref_outputs)
    for i, (out, ref) in enumerate(zip(outputs, ref_outputs)):
        assert np.all(np.isfinite(out)), f"output {i} is not finite"
        np.testing.assert_allclose(out, ref, rtol=case.rtol, atol=case.atol, err_msg=f"output {i}")
    for k in case.diff:
        assert np.all(np.isfinite(grads[k])), f"gradient of {k} is not finite"
        _assert_grad_close(grads[k], ref_grads[k], case.grad_tol, f"gradient of {k}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_backends_agree(name, parity_results):
    case = CASES[name]
    available = [b for b in BACKENDS if b in parity_results]  # not "reference"
    if len(available) < 2:
        pytest.skip("needs two installed backends")
    results = {b: _case_results(parity_results, name, b) for b in available}
    first, *others = available
    for other in others:
        for i, (a, b) in enumerate(zip(results[first][0], results[other][0])):
            np.testing.assert_allclose(
                a,
                b,
                rtol=2 * case.rtol,
                atol=2 * case.atol,
                err_msg=f"output {i}: {first} vs {other}",
            )
        for k in case.diff:
            _assert_grad_close(
                results[first][1][k],
                results[other][1][k],
                case.grad_tol,
                f"gradient of {k}: {first} vs {other}",
            )
