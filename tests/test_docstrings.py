"""Every `>>>` example in the docstrings of `keras_capsules` runs and prints
what it shows: each on one backend per suite run, by a hash of its name
(`ON_EVERY_BACKEND=1`: on every backend), the ready models' on torch.

Examples print backend-neutral values (`tuple(x.shape)`, NumPy arrays via
`keras.ops.convert_to_numpy`), so one docstring holds on every backend.
Each runs with a fixed seed, in fresh globals holding `keras`, `np`, `ops`
and `kc` (also as `keras_capsules`), like the module's own imports would.
"""

import doctest
import importlib
import os
import pkgutil

import keras
import numpy as np
import pytest

import keras_capsules
from tests.conftest import one_backend

OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _docstring_tests():
    names = ["keras_capsules"] + [
        info.name for info in pkgutil.walk_packages(keras_capsules.__path__, "keras_capsules.")
    ]
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests = []
    for name in sorted(names):
        # The finder keeps objects defined in the module itself, so
        # re-exports in `__init__` are not collected twice.
        tests += [t for t in finder.find(importlib.import_module(name)) if t.examples]
    return sorted(tests, key=lambda t: t.name)


DOCSTRING_TESTS = _docstring_tests()
EXAMPLES = {t.name for t in DOCSTRING_TESTS}
PUBLIC_CLASSES = sorted(
    {
        obj
        for module in (
            keras_capsules.layers,
            keras_capsules.routing,
            keras_capsules.models,
            keras_capsules.losses,
            keras_capsules.callbacks,
        )
        for obj in vars(module).values()
        if isinstance(obj, type)
        and obj.__module__.startswith("keras_capsules.")
        and not obj.__name__.startswith("_")
    },
    key=lambda c: c.__name__,
)


@pytest.mark.parametrize("cls", PUBLIC_CLASSES, ids=lambda c: c.__name__)
def test_public_class_documents_its_interface(cls):
    doc = cls.__doc__ or ""
    sections = ["Args:"]
    if not issubclass(cls, keras.callbacks.Callback):  # Callbacks return nothing.
        sections.append("Returns:")
    if issubclass(cls, keras.layers.Layer) and not issubclass(cls, keras.Model):
        sections.append("Call arguments:")
    missing = [s for s in sections if s not in doc]
    assert not missing, f"{cls.__name__} docstring lacks {missing}"
    assert f"{cls.__module__}.{cls.__qualname__}" in EXAMPLES, f"{cls.__name__} has no example"


# The ready models' examples build whole models eagerly (on JAX an XLA
# compile per op; slow on TensorFlow too; timings: docs/testing.md). Every
# ready model is built, fitted, saved and loaded on every backend by
# tests/models/; their examples' text runs once, on torch.
MODEL_EXAMPLES = "keras_capsules.models."


# The other examples run on one backend per suite run (by a hash of their
# name, as the doc snippets: tests/conftest.py), whose code every backend's
# own tests run; ON_EVERY_BACKEND=1 runs them on every backend.
@pytest.mark.parametrize("test", DOCSTRING_TESTS, ids=lambda t: t.name)
def test_docstring_example(test):
    if keras.backend.backend() != "torch" and test.name.startswith(MODEL_EXAMPLES):
        pytest.skip(
            "a ready model's example: run on torch; the model on every backend in tests/models"
        )
    mine = one_backend(test.name)
    if not os.environ.get("ON_EVERY_BACKEND") and not test.name.startswith(MODEL_EXAMPLES):
        if keras.backend.backend() != mine:
            pytest.skip(f"runs on {mine} (ON_EVERY_BACKEND=1: on every backend)")
    if any("import keras_hub" in e.source for e in test.examples):
        pytest.importorskip("keras_hub", reason="the example needs keras-hub")
    keras.utils.set_random_seed(0)
    test.globs = {
        "keras": keras,
        "np": np,
        "ops": keras.ops,
        "kc": keras_capsules,
        "keras_capsules": keras_capsules,
    }
    report = []
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    result = runner.run(test, out=report.append, clear_globs=True)
    assert result.failed == 0, "".join(report)
