"""Loading `.keras` files on another backend than the one that saved them:
an optimizer saved on torch, loaded as its public class."""

import json
import zipfile

import keras


def portable_optimizer_config(config):
    """The serialized optimizer `config`, made loadable on every backend.

    Keras (3.15.1 and earlier) records an optimizer compiled on torch under
    its torch-only class (module `keras.src.backend.torch.optimizers...`),
    which cannot train on TensorFlow or JAX; the same optimizer under its
    public class (`keras.optimizers.Adam`, same arguments) trains
    everywhere and keeps the saved optimizer variables (same names, same
    order). Any other config comes back as it is.

    Example:

    >>> from keras_capsules.saving import portable_optimizer_config
    >>> config = {"module": "keras.src.backend.torch.optimizers.torch_adam",
    ...           "class_name": "Adam", "config": {}, "registered_name": None}
    >>> portable_optimizer_config(config)["module"]
    'keras.optimizers'
    """
    if not isinstance(config, dict) or not str(config.get("module", "")).startswith(
        "keras.src.backend."
    ):
        return config
    name = config.get("class_name")
    if not isinstance(name, str) or not hasattr(keras.optimizers, name):
        return config
    return {**config, "module": "keras.optimizers", "registered_name": None}


def _compile_config(filepath):
    """The `compile_config` of a `.keras` file's `config.json`, or `None`."""
    try:
        with zipfile.ZipFile(filepath) as archive:
            config = json.loads(archive.read("config.json"))
    except (OSError, KeyError, zipfile.BadZipFile, json.JSONDecodeError):
        return None  # keras.saving.load_model says what is wrong
    return config.get("compile_config") if isinstance(config, dict) else None


def load_model(filepath, custom_objects=None, safe_mode=True):
    """`keras.saving.load_model(filepath)`, trainable on any backend.

    A model compiled and saved on torch records its optimizer under a
    torch-only class, so on TensorFlow or JAX the model Keras loads cannot
    `fit` (`expected Tensor as element 0 in argument 0, but got
    ResourceVariable` on TensorFlow). Loaded here, such a model is
    compiled with the optimizer's public class (same arguments) and gets
    its saved weights and optimizer state back; any other file loads as
    `keras.saving.load_model` loads it. The ready models
    (`keras_capsules.models`) do this themselves.

    Args:
        filepath: a `.keras` file.
        custom_objects: as for `keras.saving.load_model`.
        safe_mode: as for `keras.saving.load_model` (default `True`).

    Returns:
        the model, compiled as saved.

    Example (a file saved on torch, loaded on TensorFlow or JAX):

    >>> model = keras_capsules.saving.load_model("model.keras")  # doctest: +SKIP
    >>> model.fit(x, y)  # doctest: +SKIP
    """
    compile_config = _compile_config(filepath)
    optimizer = (compile_config or {}).get("optimizer")
    portable = portable_optimizer_config(optimizer)
    if portable is optimizer:
        return keras.saving.load_model(filepath, custom_objects, safe_mode=safe_mode)
    model = keras.saving.load_model(filepath, custom_objects, compile=False, safe_mode=safe_mode)
    model.compile_from_config({**compile_config, "optimizer": portable})
    model.optimizer.build(model.trainable_variables)
    model.load_weights(filepath)  # the model's and the optimizer's variables
    return model
