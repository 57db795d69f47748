"""`.keras` files saved on each backend load on every backend.

A tiny `EfficientCapsNet` and a functional `Capsule` network are trained
one step and saved on TensorFlow, PyTorch and JAX; each backend then loads
the three backends' files (one subprocess per backend does both, waiting
for the others' files in between), predicts with both nets and trains the functional one a
step as loaded (a torch-saved file on TensorFlow and JAX: after
`load_model(path, compile=False)` + `compile`, and through
`keras_capsules.saving.load_model(path)`, which keeps the saved optimizer
state). The `EfficientCapsNet` compiled on JAX with `jit_compile="auto"`
loads with each backend's own "auto" (no torch.compile on torch).
Every public ready model (tests/models/ready_models.py) is also trained a
step with `compile()`'s defaults and saved on one backend, then loaded on
the next (`READY_SOURCE`: TensorFlow -> PyTorch -> JAX -> TensorFlow, each
pair with some models; a JAX step as loaded from torch runs op by op, so
the cheapest go that way): it predicts as saved and resumes training as
loaded, its optimizer's state included. On its own backend each resumes
in the model harness (`ModelTestCase.run_model_test`).
The 9 pairs run once per source version: their results are cached under
`.pytest_cache/portability`, so the three per-backend pytest runs share
them.

Keras 3.15.1 writes a torch-saved model's optimizer as
`keras.src.backend.torch.optimizers.torch_adam`, which cannot train on
TensorFlow or JAX. The ready models load it as the public
`keras.optimizers.Adam` (`CapsuleModel.compile_from_config`), so a torch-saved
`EfficientCapsNet` trains as loaded everywhere; for a functional model the
workaround in docs/examples.md, `load_model(path, compile=False)` and
`compile` again, is what these tests check there.
"""

import hashlib
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import keras
import numpy as np
import pytest

import keras_capsules as kc  # Registers the classes that load_model looks up.
from tests.conftest import exclusive, save_npz
from tests.models.ready_models import READY_MODELS

ROOT = pathlib.Path(__file__).resolve().parent.parent
BACKENDS = ("tensorflow", "torch", "jax")
MODELS = ("efficient_capsnet", "functional")
WORKER_TIMEOUT_S = 900
# Where each backend's ready models resume training.
NEXT = {"tensorflow": "torch", "torch": "jax", "jax": "tensorflow"}
# The backend each ready model is saved on (the others: TensorFlow).
READY_SOURCE = {
    "PointCapsuleClassifier": "torch",
    "CapsuleImageClassifier": "torch",
    "CapsNet": "jax",
    "QuaternionCapsuleClassifier": "jax",
}
pytestmark = pytest.mark.xdist_group("portability")


# ---- the worker: `python tests/test_portability.py ROOT BACKENDS` -------------


def _data(model_name):
    rng = np.random.default_rng(0)
    labels = np.arange(4) % 3
    if model_name == "efficient_capsnet":  # Class ids.
        return rng.uniform(size=(4, 16, 16, 1)).astype("float32"), labels
    return rng.uniform(size=(4, 12, 12, 1)).astype("float32"), np.eye(3)[labels]


def _build(model_name):
    if model_name == "efficient_capsnet":
        return kc.models.EfficientCapsNet((16, 16, 1), 3, decoder_units=(8,))
    inputs = keras.Input((12, 12, 1))
    x = keras.layers.Conv2D(8, 3, activation="relu")(inputs)
    x = kc.PrimaryCapsule(2, 4, 3, strides=2)(x)
    x = kc.Capsule(3, 4, router=kc.DynamicRouting())(x)
    return keras.Model(inputs, kc.Length()(x))


def _compile(model):
    ready = isinstance(model, kc.models.CapsuleClassifier)
    loss = None if ready else kc.MarginLoss()
    # The ready model by "auto" on JAX (XLA there) and torch (eager there),
    # which its file keeps: JAX then trains a torch-saved one with XLA, not
    # op by op. The functional net without XLA: Keras saves a resolved
    # `True`, and torch would load it as torch.compile (20 s for its one
    # step on a CPU).
    auto = ready and keras.backend.backend() != "tensorflow"
    model.compile(optimizer="adam", loss=loss, jit_compile="auto" if auto else False)


def _train_one_step(model, model_name):
    """Loss of one step and whether every trainable weight moved."""
    (loss, _), moved = _ready_step(model, *_data(model_name))
    return loss, bool(moved.all())


def _predict(model, model_name):
    images = _data(model_name)[0]
    if keras.backend.backend() == "jax":  # Jitted: op by op is slower there.
        return model.predict(images, verbose=0)
    return keras.ops.convert_to_numpy(model(images, training=False))


def _ready_outputs(model, name, x):
    """What a loaded ready model must give as saved: `predict(x)`; a
    PointCapsNet's latent capsules (its decoder draws a grid per call)."""
    if name == "PointCapsNet":
        return keras.ops.convert_to_numpy(model.encode(x))
    return model.predict(x, verbose=0)


def _ready_step(model, x, y):
    """(loss, optimizer iterations after the step), which weights moved."""
    before = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    loss = model.fit(x, y, batch_size=len(y), epochs=1, verbose=0).history["loss"][0]
    moved = [
        np.any(b != keras.ops.convert_to_numpy(w)) for b, w in zip(before, model.trainable_weights)
    ]
    iterations = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
    return np.array([loss, iterations]), np.array(moved)


def _ready_models_saved_on(backend):
    return [
        name
        for name, ready in READY_MODELS.items()
        if READY_SOURCE.get(name, "tensorflow") == backend
        and ready.available()
        and _installed(NEXT[backend])
    ]


def save_worker(folder):
    keras.utils.set_random_seed(0)
    predictions = {}
    for name in MODELS:
        model = _build(name)
        _compile(model)
        _train_one_step(model, name)  # Optimizer state and BatchNorm statistics.
        model.save(os.path.join(folder, f"{name}.keras"))
        predictions[name] = _predict(model, name)
    for name in _ready_models_saved_on(keras.backend.backend()):
        keras.utils.set_random_seed(0)
        x, y, _ = READY_MODELS[name].data()
        model = READY_MODELS[name].build()
        model.compile(jit_compile=keras.backend.backend() == "jax")  # the defaults
        _, predictions[f"ready|{name}|moved"] = _ready_step(model, x, y)
        model.save(os.path.join(folder, f"ready-{name}.keras"))
        predictions[f"ready|{name}"] = _ready_outputs(model, name, x)
    save_npz(os.path.join(folder, "predictions.npz"), predictions)


def _resume_ready_models(root, results):
    """The ready models saved on the backend before this one, loaded,
    predicted and trained a step here."""
    source = next(b for b, target in NEXT.items() if target == keras.backend.backend())
    for name in _ready_models_saved_on(source):
        path = os.path.join(root, source, f"ready-{name}.keras")
        if not os.path.exists(path):
            continue
        x, y, _ = READY_MODELS[name].data()
        try:
            model = keras.saving.load_model(path, safe_mode=True)
            results[f"ready|{name}|predictions"] = _ready_outputs(model, name, x)
            results[f"ready|{name}|fit"], results[f"ready|{name}|moved"] = _ready_step(model, x, y)
            results[f"ready|{name}|error"] = ""
        except Exception as error:  # Recorded; the test decides.
            results[f"ready|{name}|error"] = f"{type(error).__name__}: {error}"[:2000]


def load_worker(root, out):
    results = {}
    for source in BACKENDS:
        for name in MODELS:
            path = os.path.join(root, source, f"{name}.keras")
            if not os.path.exists(path):
                continue
            key = f"{source}|{name}"
            model = keras.saving.load_model(path, safe_mode=True)
            results[f"{key}|jit_compile"] = np.array(bool(model.jit_compile))
            results[f"{key}|predictions"] = _predict(model, name)
            if name != "functional" and source != "torch":
                # Training is checked once per pair, on the cheaper net; the
                # ready model as loaded from torch (its optimizer) too.
                continue
            try:
                results[f"{key}|fit"] = np.array(_train_one_step(model, name))
                results[f"{key}|fit_error"] = ""
            except Exception as error:  # Recorded; the test decides.
                results[f"{key}|fit_error"] = f"{type(error).__name__}: {error}"[:2000]
            if name == "functional" and source == "torch" and keras.backend.backend() != "torch":
                # The workaround where the file's optimizer cannot train here.
                model = keras.saving.load_model(path, safe_mode=True, compile=False)
                _compile(model)
                results[f"{key}|recompiled_fit"] = np.array(_train_one_step(model, name))
                # keras_capsules.saving.load_model: compiled as saved, the
                # optimizer's public class, its state (one step) kept.
                model = kc.saving.load_model(path)
                steps = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
                loss, moved = _train_one_step(model, name)
                results[f"{key}|portable_fit"] = np.array([loss, moved, steps])
    # What "auto" is here, for the files that saved it.
    fresh = _build("efficient_capsnet")
    fresh.compile()
    results["auto_jit_compile"] = np.array(bool(fresh.jit_compile))
    _resume_ready_models(root, results)
    save_npz(out, results)


def worker(root, backends):
    """Saves this backend's files, waits for the other backends' (or their
    failure), then loads them all: one process, one import per backend."""
    own = os.path.join(root, keras.backend.backend())
    try:
        save_worker(own)
    except BaseException:
        with open(os.path.join(own, "failed"), "w") as marker:
            marker.write(traceback.format_exc())
        raise
    deadline = time.monotonic() + WORKER_TIMEOUT_S
    for backend in backends:
        folder = os.path.join(root, backend)
        while not os.path.exists(os.path.join(folder, "predictions.npz")):
            if os.path.exists(os.path.join(folder, "failed")):
                sys.exit(f"the save on {backend} failed; its output says why")
            if time.monotonic() > deadline:
                sys.exit(f"no files from {backend} in {WORKER_TIMEOUT_S} s")
            time.sleep(0.2)
    load_worker(root, os.path.join(root, f"loaded-{keras.backend.backend()}.npz"))


# ---- the tests ----------------------------------------------------------------


def _installed(backend):
    return importlib.util.find_spec(backend) is not None


def _source_hash():
    h = hashlib.sha256(keras.__version__.encode())
    for path in sorted((ROOT / "keras_capsules").rglob("*.py")) + [pathlib.Path(__file__)]:
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _run_workers(root, backends):
    """One worker per backend, all at once; their output to files (a full
    pipe would stall a worker that the others wait for)."""
    running = {}
    for backend in backends:
        env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(ROOT)}
        log = tempfile.TemporaryFile()
        running[backend] = (
            log,
            subprocess.Popen(
                [sys.executable, __file__, str(root), ",".join(backends)],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            ),
        )
    failures = []
    try:
        for backend, (log, process) in running.items():
            process.wait(timeout=WORKER_TIMEOUT_S)
            if process.returncode != 0:
                log.seek(0)
                failures.append(f"{backend}:\n{log.read().decode(errors='replace')[-5000:]}")
    finally:
        for log, process in running.values():
            if process.poll() is None:
                process.kill()
                process.wait()
            log.close()
    if failures:
        pytest.fail("portability worker failed on " + "\n".join(failures))


@pytest.fixture(scope="session")
def portability():
    """(saved predictions {source: npz}, load results {target: npz})."""
    root = ROOT / ".pytest_cache" / "portability" / _source_hash()
    root.mkdir(parents=True, exist_ok=True)
    backends = [b for b in BACKENDS if _installed(b)]
    with exclusive(root / "lock"):
        if not all((root / f"loaded-{b}.npz").exists() for b in backends):
            for b in backends:  # A run that failed before leaves no files to wait for.
                shutil.rmtree(root / b, ignore_errors=True)
                os.makedirs(root / b)
            _run_workers(root, backends)
    saved = {b: dict(np.load(root / b / "predictions.npz")) for b in backends}
    loaded = {b: dict(np.load(root / f"loaded-{b}.npz")) for b in backends}
    return saved, loaded


def _pair(portability, source, target):
    saved, loaded = portability
    if source not in saved or target not in loaded:
        pytest.skip(f"needs {source} and {target} installed")
    return saved[source], loaded[target]


@pytest.mark.parametrize("target", BACKENDS)
@pytest.mark.parametrize("source", BACKENDS)
def test_loaded_model_predicts_as_saved(source, target, portability):
    saved, loaded = _pair(portability, source, target)
    for name in MODELS:
        np.testing.assert_allclose(
            loaded[f"{source}|{name}|predictions"], saved[name], rtol=1e-5, atol=1e-5, err_msg=name
        )


@pytest.mark.parametrize("target", BACKENDS)
@pytest.mark.parametrize("source", BACKENDS)
def test_loaded_model_trains(source, target, portability):
    _, loaded = _pair(portability, source, target)
    key = f"{source}|functional"
    # As loaded, compiled: every pair but a torch optimizer on another
    # backend (a Keras 3.15.1 limitation; see the module docstring), where
    # load_model(path, compile=False) + compile trains.
    if source != "torch" or target == "torch":
        assert not loaded[f"{key}|fit_error"], str(loaded[f"{key}|fit_error"])
        loss, moved = loaded[f"{key}|fit"]
    else:
        loss, moved = loaded[f"{key}|recompiled_fit"]
    assert np.isfinite(loss) and moved


@pytest.mark.parametrize("target", ("tensorflow", "jax"))
def test_torch_saved_model_of_ones_own_trains_through_saving_load_model(target, portability):
    """A functional model saved on torch, loaded with
    `keras_capsules.saving.load_model` on TensorFlow or JAX: it trains,
    with the saved optimizer state (the step count of the one saved step)."""
    _, loaded = _pair(portability, "torch", target)
    loss, moved, steps = loaded["torch|functional|portable_fit"]
    assert np.isfinite(loss) and moved and steps == 1, (loss, moved, steps)


@pytest.mark.parametrize("target", BACKENDS)
def test_torch_saved_ready_model_trains_as_loaded(target, portability):
    _, loaded = _pair(portability, "torch", target)
    key = "torch|efficient_capsnet"
    assert not loaded[f"{key}|fit_error"], str(loaded[f"{key}|fit_error"])
    loss, moved = loaded[f"{key}|fit"]
    assert np.isfinite(loss) and moved


@pytest.mark.parametrize("target", BACKENDS)
def test_jit_compile_auto_saved_on_jax_is_resolved_where_loaded(target, portability):
    """The ready model compiled on JAX with `jit_compile="auto"` (XLA
    there) saves "auto", not JAX's `True`: loaded on torch it runs without
    torch.compile (minutes before a first predict on a busy CPU), on each
    backend as `compile()` there."""
    _, loaded = _pair(portability, "jax", target)
    assert bool(loaded["jax|efficient_capsnet|jit_compile"]) == bool(loaded["auto_jit_compile"])
    if target == "torch":
        assert not loaded["jax|efficient_capsnet|jit_compile"]


@pytest.mark.parametrize("name", sorted(READY_MODELS))
def test_ready_model_resumes_training_on_another_backend(name, portability):
    """Saved after a step of `fit` with `compile()`'s defaults on its
    source backend, loaded on the next: the same outputs, and `fit` goes
    on from the saved optimizer state (its step count), moving every
    weight the first step moved (a classifier's unused decoder: none)."""
    source = READY_SOURCE.get(name, "tensorflow")
    saved, loaded = _pair(portability, source, NEXT[source])
    if f"ready|{name}" not in saved:
        pytest.skip(f"{name} needs {READY_MODELS[name].needs}")
    assert not loaded[f"ready|{name}|error"], str(loaded[f"ready|{name}|error"])
    np.testing.assert_allclose(
        loaded[f"ready|{name}|predictions"], saved[f"ready|{name}"], rtol=1e-5, atol=1e-5
    )
    loss, iterations = loaded[f"ready|{name}|fit"]
    assert np.isfinite(loss) and iterations == 2, (loss, iterations)
    moved, first = loaded[f"ready|{name}|moved"], saved[f"ready|{name}|moved"]
    assert first.any() and moved[first].all(), (first, moved)


if __name__ == "__main__":
    worker(sys.argv[1], sys.argv[2].split(","))
