"""The project uses public Keras, TensorFlow and TFDS API only.

Private names change between releases without notice: a `.`-access of an
attribute that Keras's own objects keep private (`model._metrics`,
`self._compile_loss`, `layer._flatten_layers()`, ...), a private attribute
reached through the `keras`, `tf`, `tensorflow` or `tfds` modules, and an
import of `keras.src` or `tensorflow.python` are refused in the library,
the tests, the examples and the benchmarks.
"""

import os
import re

import keras

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = ("keras_capsules", "tests", "examples", "benchmarks")
THIS_FILE = os.path.abspath(__file__)

ATTRIBUTE = re.compile(r"\.(_[a-z]\w*)")
MODULE_PRIVATE = re.compile(r"\b(?:keras|tf|tensorflow|tfds)(?:\.\w+)*\.(_[a-z]\w*)")
# getattr(model, "_distribute_strategy", None) and the like.
STRING_ATTRIBUTE = re.compile(
    r"\b(?:getattr|hasattr|setattr|delattr)\([^,()]+,\s*[\"'](_[a-z]\w*)[\"']"
)
# A private attribute put on another object (`sublayer._xla = xla`).
FOREIGN_ASSIGNMENT = re.compile(r"\b(?!self\b|cls\b)[A-Za-z_]\w*\.(_[a-z]\w*)\s*=(?!=)")
# Keras's private attributes that only some backends' objects have.
BACKEND_PRIVATE = {"_distribute_strategy", "_jax_state_synced", "_compile_metrics"}
PRIVATE_IMPORT = re.compile(
    r"^\s*(?:from|import)\s+(keras\.src|tensorflow\.python|tensorflow_datasets\.core\._)\b",
    re.MULTILINE,
)


def keras_private_names():
    """Single-underscore attribute names of built, compiled Keras objects."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    model.optimizer.build(model.trainable_variables)
    objects = [
        model,
        model.layers[0],
        model.optimizer,
        keras.callbacks.Callback(),
        keras.losses.MeanSquaredError(),
        keras.metrics.Mean(),
        model.layers[0].kernel,
        keras.layers.InputSpec(ndim=2),
        keras.initializers.GlorotUniform(),
        keras.DTypePolicy("float32"),
    ]
    names = set(BACKEND_PRIVATE)
    for obj in objects:
        names.update(n for n in dir(obj) if n.startswith("_") and not n.startswith("__"))
    return names


def python_files():
    for folder in FOLDERS:
        for directory, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                path = os.path.join(directory, name)
                if name.endswith(".py") and os.path.abspath(path) != THIS_FILE:
                    yield path


def code_lines(path):
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            code = line.split("#", 1)[0]
            if code.strip():
                yield number, code


def test_keras_private_names_are_collected():
    names = keras_private_names()
    assert {"_compile_loss", "_metrics", "_flatten_layers", "_tracker"} <= names


def test_no_private_keras_tensorflow_or_tfds_access():
    private = keras_private_names()
    found = []
    for path in python_files():
        relative = os.path.relpath(path, ROOT)
        with open(path, encoding="utf-8") as f:
            for match in PRIVATE_IMPORT.finditer(f.read()):
                found.append(f"{relative}: import of {match.group(1)}")
        for number, code in code_lines(path):
            found += [f"{relative}:{number}: .{name}" for name in private_accesses(code, private)]
    assert not found, "private Keras/TF/TFDS API:\n" + "\n".join(found)


def private_accesses(code, private):
    names = {m.group(1) for m in ATTRIBUTE.finditer(code)}
    names |= {m.group(1) for m in STRING_ATTRIBUTE.finditer(code)}
    found = names & private
    found |= {m.group(1) for m in MODULE_PRIVATE.finditer(code)}
    found |= {m.group(1) for m in FOREIGN_ASSIGNMENT.finditer(code)}
    return sorted(found)


def test_the_check_finds_what_it_looks_for():
    """The patterns catch the forms they exist for (so the test can fail)."""
    private = keras_private_names()
    samples = {
        "model._metrics.append(state)": "_metrics",
        "loss = self._compile_loss(y, y_pred)": "_compile_loss",
        "fake = tfds.core.dataset_builder.FileReaderBuilder._as_dataset": "_as_dataset",
        'if getattr(self, "_distribute_strategy", None) is None:': "_distribute_strategy",
        "            sublayer._xla = xla": "_xla",
    }
    for code, name in samples.items():
        assert name in private_accesses(code, private), code
    assert not private_accesses("self._poses_wanted[0] += 1", private)
    assert not private_accesses("if layer._xla == xla:", private)
    assert PRIVATE_IMPORT.search("from tensorflow.python.data import ops")
    assert PRIVATE_IMPORT.search("import keras.src.backend")
    assert not PRIVATE_IMPORT.search("import keras")
