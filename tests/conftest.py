"""Shared test set-up.

torch is imported before tensorflow: importing them the other way round in
one process can crash (both bundle their own native libraries).
"""

import contextlib
import os
import zlib

# JAX keeps its XLA compilations on disk for the whole suite: many tests (and
# the example scripts they run in subprocesses) build and compile the same
# models, and XLA on CPU compiles every `truncated_normal` initializer shape
# anew. Every compile is kept, the small ones of op-by-op calls too, so the
# two test processes and the subprocesses share them (timings:
# docs/testing.md). Set before Keras imports JAX; an existing setting wins.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(_ROOT, ".pytest_cache", "jax"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

# Under pytest-xdist each test process gets its share of the cores for
# OpenMP (torch's pool): torch sizes it to every core, so two processes on two
# cores would run four busy pools and tiny ops spend their time waiting on
# each other. TensorFlow's and JAX's pools are not OpenMP and are left alone.
# Settings in the environment win. Timings: docs/testing.md.
_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _workers > 1:
    _threads = str(max(1, (os.cpu_count() or 1) // _workers))
    for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_variable, _threads)

# The tests' shapes are tiny, so XLA's time goes into compiling, not running:
# LLVM's optimisation passes are off (the HLO passes, and so the numerics,
# stay), and XLA:CPU uses its older loop emitters instead of its MLIR fusion
# emitters, which compile faster (timings: docs/testing.md). The flags reach
# XLA on TF and JAX and the examples the tests run in subprocesses; XLA_FLAGS
# that already name them win.
FAST_COMPILE_FLAGS = (
    "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
    " --xla_cpu_use_fusion_emitters=false"
)

_xla_flags = os.environ.get("XLA_FLAGS", "")
for _flag in FAST_COMPILE_FLAGS.split():
    if _flag.split("=")[0] not in _xla_flags:
        _xla_flags = f"{_xla_flags} {_flag}".strip()
os.environ["XLA_FLAGS"] = _xla_flags

try:
    import torch  # noqa: F401
except ImportError:
    pass

import keras
import pytest

from tests.test_case import BACKEND


def pytest_report_header(config):
    return f"keras {keras.__version__}, backend {BACKEND}"


BACKENDS = ("tensorflow", "torch", "jax")

# The costliest smoke runs run on torch, not where their hash says: eager
# torch runs them without tracing or compiling (the point-cloud example:
# 1.3 s on torch, 32 s on TensorFlow).
on_torch = pytest.mark.one_backend("torch")


def one_backend(nodeid):
    """The backend a `one_backend` test runs on: the same each time, by a
    hash of its id, so the three per-backend runs share such tests."""
    return BACKENDS[zlib.crc32(nodeid.encode()) % len(BACKENDS)]


def pytest_collection_modifyitems(config, items):
    # Tests marked `one_backend` (the example scripts' and benchmarks' smoke
    # runs: Keras code above the layers, which every backend's own tests
    # cover; and the tests that a recipe learns: what it learns rests on its
    # forward values and gradients, which the parity tests check on every
    # backend) run on one backend per suite run, so the whole suite stays
    # within the CI time; ON_EVERY_BACKEND=1 runs them on every backend.
    # A named backend (`one_backend("torch")`) is the one where the test
    # runs fastest.
    if os.environ.get("ON_EVERY_BACKEND"):
        return
    for item in items:
        if not item.get_closest_marker("one_backend"):
            continue
        # `one_backend("torch")` (`on_torch`) names the backend.
        named = [m.args[0] for m in item.iter_markers("one_backend") if m.args]
        backend = named[0] if named else one_backend(item.nodeid)
        if backend != BACKEND:
            reason = f"runs on {backend} (ON_EVERY_BACKEND=1: on every backend)"
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _float32_policy():
    """Each test starts and ends with the float32 policy."""
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")


def real_mnist_dir():
    """TFDS data dir holding prepared mnist, or None."""
    data_dir = os.environ.get("TFDS_DATA_DIR")
    if data_dir and os.path.isdir(os.path.join(data_dir, "mnist")):
        return data_dir
    return None


# The authors' released weights files (tests that need them skip without):
# `$KERAS_CAPSULES_WEIGHTS_DIR`, else `../shared/weights` beside the checkout.
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WEIGHTS_DIR = os.environ.get(
    "KERAS_CAPSULES_WEIGHTS_DIR", os.path.join(_CHECKOUT, "..", "shared", "weights")
)


def authors_weights(file_name):
    """`(path, skipif mark)` of an authors' weights file in `WEIGHTS_DIR`."""
    path = os.path.join(WEIGHTS_DIR, file_name)
    reason = f"the authors' weights are not at {path} (set KERAS_CAPSULES_WEIGHTS_DIR)"
    return path, pytest.mark.skipif(not os.path.exists(path), reason=reason)


@contextlib.contextmanager
def exclusive(lock_path):
    """Holds an exclusive file lock: the first pytest-xdist process to need a
    set of worker subprocesses runs them, the others wait and read results."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock; runs without xdist still work.
        yield
        return
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def save_npz(path, arrays):
    """`np.savez` whole or not at all (a temporary file, then renamed): other
    processes wait for the file and read it as soon as it exists."""
    import numpy as np

    tmp = f"{path}.{os.getpid()}.tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, path)
