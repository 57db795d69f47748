"""What `keras.Model.export` needs on each backend, checked before Keras
starts, and its failures that say nothing of the fix, given one.

`check_export(format)` raises an `ImportError` naming the
packages a (backend, format) pair needs and how to install them, or, for a
SavedModel from the torch backend (which Keras writes through torch_xla),
what to export instead. `export_errors(format)` is a context around the
export that turns the raw `torch.export` error of a SavedModel with a
dynamic batch on torch into a `ValueError` saying to fix the batch or
export to ONNX. `CapsuleTask.export` uses both; for another model:

>>> from keras_capsules.models.export import check_export, export_errors
>>> check_export("onnx")  # raises if this backend's ONNX converter is missing

then `with export_errors(format): model.export(path, format=format)`.
"""

import contextlib
import importlib.util

import keras

# (backend, format) -> the modules Keras imports to write it, and their
# pip names. The runtimes that serve the files (onnxruntime, ai-edge-litert)
# are not needed to write them.
REQUIREMENTS = {
    ("tensorflow", "onnx"): {"tf2onnx": "tf2onnx", "onnx": "onnx"},
    ("jax", "onnx"): {"jax2onnx": "jax2onnx", "onnx": "onnx"},
    ("torch", "onnx"): {"onnx": "onnx"},
    ("jax", "tf_saved_model"): {"tensorflow": "tensorflow"},
    ("jax", "litert"): {},  # Keras refuses the pair itself, with its reason
    ("torch", "tf_saved_model"): {"torch_xla": "torch-xla", "tensorflow": "tensorflow"},
    ("torch", "litert"): {"litert_torch": "litert-torch"},
}

_ONNX = (
    'to ONNX, which keeps any batch size: model.export("model.onnx", format="onnx"), '
    "served with onnxruntime; or export the SavedModel from the TensorFlow or JAX backend."
)


def installed(module):
    """Whether `module` can be imported here (without importing it)."""
    return importlib.util.find_spec(module) is not None


def missing_packages(format, backend=None):
    """The pip names of the packages that Keras needs to export to
    `format` on `backend` (this one by default) and that are not installed."""
    backend = backend or keras.backend.backend()
    needed = REQUIREMENTS.get((backend, format), {})
    return [package for module, package in needed.items() if not installed(module)]


def check_export(format, backend=None):
    """Raises, before any export work, where Keras cannot export to
    `format` on `backend` for want of a package: an `ImportError` naming
    the packages and the install line (for a SavedModel on torch, what to
    export instead). Formats it knows nothing of pass (Keras checks them).

    Args:
        format: `"tf_saved_model"`, `"onnx"`, `"litert"`, or another of
            `keras.Model.export`'s formats.
        backend: the Keras backend that exports; `None`: this one.
    """
    backend = backend or keras.backend.backend()
    missing = missing_packages(format, backend)
    if not missing:
        return
    if (backend, format) == ("torch", "tf_saved_model"):
        raise ImportError(
            "Keras writes a SavedModel from the torch backend through torch_xla and "
            f"TensorFlow; not installed: {', '.join(missing)}. torch-xla wheels load "
            "only with the torch release they were built for, and Keras (3.15) exports "
            f"a fixed batch size only there. Export {_ONNX} "
            f"Received: format={format!r} on the torch backend"
        )
    raise ImportError(
        f"Exporting to {format} on the {backend} backend needs "
        f"{' and '.join(REQUIREMENTS[backend, format])}; not installed: "
        f"{', '.join(missing)}. Install with `pip install {' '.join(missing)}`, or, "
        'in a checkout of keras-capsules, `pip install -e ".[export]"` (which also '
        "brings the runtimes that serve the files: onnxruntime, ai-edge-litert)."
    )


@contextlib.contextmanager
def export_errors(format):
    """A context around `model.export(..., format=format)` that turns
    `torch.export`'s structure error of a SavedModel with a dynamic batch on
    torch (Keras 3.15 passes it `dynamic_shapes` that do not match the
    layer's inputs) into a `ValueError` with the fix."""
    try:
        yield
    except Exception as error:
        if (
            keras.backend.backend() == "torch"
            and format == "tf_saved_model"
            and "dynamic_shapes" in str(error)
        ):
            raise ValueError(
                "Keras exports a SavedModel from the torch backend with a fixed input "
                "shape only: with a `None` axis in the input signature its torch.export "
                "call fails. Pass a fixed one, e.g. input_signature=[keras.InputSpec("
                'shape=(32, 28, 28, 1), dtype="float32")], and serve batches of exactly '
                f"that size. Or export {_ONNX} "
                f"Received: format={format!r} on the torch backend"
            ) from error
        raise
