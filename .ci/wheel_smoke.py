"""Smoke test of an installed keras-capsules wheel (run by .ci/wheel_check.sh).

    KERAS_BACKEND=tensorflow python wheel_smoke.py WHEEL CHECKOUT

Run it with the Python of a fresh environment that has WHEEL installed, from
outside CHECKOUT (the source tree must not be importable). Every check runs;
each failure is named, and the exit status is 1 if any failed. The authors'
smallNORB weights are looked for in `$KERAS_CAPSULES_WEIGHTS_DIR`, else
`../shared/weights` beside the checkout; that check is skipped without them.
"""

import importlib
import importlib.util
import os
import pkgutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import traceback
import zipfile

import keras
import numpy as np

WHEEL, CHECKOUT = (os.path.abspath(arg) for arg in sys.argv[1:3])
WEIGHTS_DIR = os.environ.get(
    "KERAS_CAPSULES_WEIGHTS_DIR", os.path.join(CHECKOUT, "..", "shared", "weights")
)
HEINSEN_WEIGHTS = os.path.join(WEIGHTS_DIR, "heinsen2019_smallNORB_pretrained_model_state_dict.pt")
TMP = tempfile.mkdtemp()
failed = []
kc = None  # keras_capsules, once import_installed_package has imported it


def check(function):
    """Runs `function` now, prints its name, time and outcome."""
    start = time.perf_counter()
    try:
        note = function()
        skipped = note and note.startswith("skipped")
        outcome = note if skipped else "ok" + (f" ({note})" if note else "")
    except Exception:
        failed.append(function.__name__)
        outcome = "FAILED\n" + traceback.format_exc()
    print(f"{function.__name__}: {time.perf_counter() - start:.1f}s {outcome}", flush=True)


def same_predictions(model_a, model_b, x):
    np.testing.assert_allclose(model_a.predict(x, verbose=0), model_b.predict(x, verbose=0))


@check
def wheel_files_match_checkout():
    """The package's files in the checkout (git's view when there is one:
    tracked and untracked, not ignored) are the wheel's."""
    try:
        listed = subprocess.run(
            ["git", "-C", CHECKOUT, "ls-files", "-co", "--exclude-standard", "keras_capsules"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        listed = [
            os.path.relpath(os.path.join(root, name), CHECKOUT)
            for root, _, names in os.walk(os.path.join(CHECKOUT, "keras_capsules"))
            for name in names
            if "__pycache__" not in root
        ]
    checkout = {path for path in listed if os.path.isfile(os.path.join(CHECKOUT, path))}
    names = zipfile.ZipFile(WHEEL).namelist()
    in_wheel = {name for name in names if name.startswith("keras_capsules/")}
    missing, extra = sorted(checkout - in_wheel), sorted(in_wheel - checkout)
    assert not missing and not extra, f"missing from the wheel: {missing}; only in it: {extra}"
    data = sum(not path.endswith(".py") for path in checkout)
    return f"{len(checkout)} files, {data} of them not .py"


@check
def import_installed_package():
    global kc
    purelib = os.path.realpath(sysconfig.get_paths()["purelib"])
    path = os.path.realpath(importlib.util.find_spec("keras_capsules").origin)
    assert path.startswith(purelib + os.sep), f"{path} is not under {purelib}"
    import keras_capsules as kc

    return f"keras_capsules {kc.__version__} from {path}, keras {keras.__version__}"


if "import_installed_package" in failed:
    sys.exit(f"wheel smoke test FAILED: {', '.join(failed)}")


@check
def import_every_module():
    errors = {}
    modules = list(
        pkgutil.walk_packages(
            kc.__path__, "keras_capsules.", lambda name: errors.setdefault(name, "ImportError")
        )
    )
    for module in modules:
        try:
            importlib.import_module(module.name)
        except Exception as error:
            errors[module.name] = repr(error)
    assert not errors, f"cannot import: {errors}"
    return f"{len(modules)} modules"


# The README's usage model (its widths), on random images and class ids.
keras.utils.set_random_seed(0)
images = np.random.rand(64, 28, 28, 1).astype("float32")
labels = np.random.randint(0, 10, size=64)
saved = os.path.join(TMP, "readme_model.keras")
model = None


@check
def readme_model_fits_saves_loads():
    global model
    inputs = keras.Input((28, 28, 1))
    x = keras.layers.Conv2D(256, 9, activation="relu")(inputs)
    x = kc.PrimaryCapsule(32, 8, kernel_size=9, strides=2)(x)
    digits = kc.Capsule(10, 16, router="dynamic")(x)
    model = keras.Model(inputs, kc.Length()(digits))
    model.compile(optimizer="adam", loss=kc.MarginLoss(), metrics=["accuracy"])
    loss = model.fit(images, labels, batch_size=32, epochs=1, verbose=0).history["loss"][-1]
    assert np.isfinite(loss), f"loss {loss}"
    model.save(saved)
    same_predictions(model, keras.saving.load_model(saved, safe_mode=True), images[:8])
    return f"loss {loss:.4f}"


@check
def from_preset_keras_file():
    same_predictions(model, kc.models.from_preset(saved), images[:8])


@check
def from_preset_heinsen_smallnorb():
    if not os.path.isfile(HEINSEN_WEIGHTS):
        return f"skipped: the authors' weights are not at {HEINSEN_WEIGHTS}"
    preset = kc.models.from_preset("heinsen_smallnorb", weights=HEINSEN_WEIGHTS)
    scores = preset.predict(np.random.rand(2, 96, 96, 2).astype("float32"), verbose=0)
    assert scores.shape == (2, 5) and np.isfinite(scores).all(), scores


if failed:
    sys.exit(f"wheel smoke test FAILED: {', '.join(failed)}")
print("wheel smoke test passed")
