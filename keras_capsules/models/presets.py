"""The preset registry: ready models with their authors' released weights.

A preset is a ready model built with its paper's architecture and loaded
with the weights its authors released, converted from their file (a
PyTorch state dict or a Keras 2 `.h5`) without running code from it. The
file is fetched from the authors' repository at a pinned commit with
`keras.utils.get_file` and checked against its sha256, or read from a
local copy (`weights=PATH`, for machines without internet), which must be
the same file.

Each ready model declares its presets beside it (`<model>_presets.py`) and
registers them with `register_presets` when its module is imported;
this module holds only the registry, `list_presets` and `from_preset`.

```python
model = keras_capsules.models.from_preset("heinsen_smallnorb")
scores = model.predict(images)  # (batch, 96, 96, 2) in [0, 1] -> (batch, 5)
```
"""

import dataclasses
import hashlib
import os
import zipfile
import zlib

import keras


@dataclasses.dataclass(frozen=True)
class Preset:
    """One preset: what it builds, where its weights come from, what the paper reports."""

    name: str
    description: str
    #: the ready model's class name in `keras_capsules.models`, and its arguments.
    model: str
    config: dict
    #: the model's inputs, as the authors fed them.
    inputs: str
    #: what `predict` returns.
    outputs: str
    url: str
    sha256: str
    license: str
    source: str
    paper: str
    #: test accuracy (%) the paper reports for these weights' model.
    paper_accuracy: float
    #: `model.count_params()` of the converted model (decoder and BatchNorm
    #: statistics included).
    parameters: int

    @property
    def file_name(self):
        return self.url.rsplit("/", 1)[-1]


# name -> (Preset, the model class that builds it).
_REGISTRY = {}


def register_presets(presets, model_class):
    """Registers `presets` (an iterable of `Preset`) as built by `model_class`.

    A ready model's module calls it for the presets declared beside it.
    A name registered twice must be the same preset of the same class.

    Args:
        presets: `Preset`s whose `model` is `model_class.__name__`.
        model_class: the ready model class.

    Example:

    >>> from keras_capsules.models.presets import register_presets
    >>> from keras_capsules.models.heinsen_capsnet_presets import HEINSEN_CAPSNET_PRESETS
    >>> register_presets(HEINSEN_CAPSNET_PRESETS, keras_capsules.models.HeinsenCapsNet)
    """
    for preset in presets:
        if preset.model != model_class.__name__:
            raise ValueError(
                f"The preset {preset.name!r} is for {preset.model}. Received: "
                f"model_class={model_class.__name__}"
            )
        if _REGISTRY.get(preset.name, (preset, model_class)) != (preset, model_class):
            raise ValueError(f"Another preset is registered as {preset.name!r}.")
        _REGISTRY[preset.name] = (preset, model_class)


def list_presets(model_class=None):
    """The presets: name -> their source, license, paper accuracy and parameters.

    Args:
        model_class: only the presets of this class (and its subclasses);
            `None`: all.

    Returns:
        a dict `name -> dict` of the `Preset` fields (copies: editing them
        changes nothing).

    Example:

    >>> presets = keras_capsules.models.list_presets()
    >>> sorted(presets)
    ['efficient_capsnet_smallnorb', 'heinsen_smallnorb']
    >>> presets["heinsen_smallnorb"]["license"], presets["heinsen_smallnorb"]["paper_accuracy"]
    ('MIT', 99.1)
    """
    return {
        name: dataclasses.asdict(preset)
        for name, (preset, cls) in sorted(_REGISTRY.items())
        if model_class is None or issubclass(cls, model_class)
    }


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _weights_file(preset, weights, cache_dir):
    if weights is None:
        try:
            return keras.utils.get_file(
                preset.file_name,
                preset.url,
                file_hash=preset.sha256,
                cache_subdir="keras_capsules",
                cache_dir=cache_dir,
            )
        except Exception as error:  # Keras raises a bare Exception on a failed fetch.
            if not _is_fetch_failure(error):
                raise
            raise ConnectionError(
                f"Could not download the weights of the preset {preset.name!r}: "
                f"{preset.file_name} from {preset.url} ({error}). Without internet, "
                f"copy that file ({preset.source}, {preset.license} license, sha256 "
                f"{preset.sha256}) onto this machine and pass its path: "
                f"from_preset({preset.name!r}, weights=PATH)."
            ) from error
    weights = os.fspath(weights)
    if not os.path.isfile(weights):
        raise ValueError(
            f"`weights` must be a local copy of the authors' file {preset.file_name} "
            f"({preset.url}). Received: weights={weights!r}, which is not a file"
        )
    digest = _sha256(weights)
    if digest != preset.sha256:
        raise ValueError(
            f"`weights` must be the authors' unchanged {preset.file_name} (sha256 "
            f"{preset.sha256}) for the preset {preset.name!r}. Received: weights={weights!r} "
            f"with sha256 {digest}"
        )
    return weights


def _is_fetch_failure(error):
    """Whether `keras.utils.get_file` failed to reach the URL (it wraps
    urllib's errors in an `Exception` that says "URL fetch failure")."""
    return isinstance(error, OSError) or "URL fetch failure" in str(error)


def _load_keras_file(path):
    """`keras.saving.load_model(path)` (`safe_mode=True`); a truncated or
    corrupted file raises a `ValueError` that names it (Keras reports a
    file that is not a zip archive as not found)."""
    damaged = (
        f"{path} is not a readable `.keras` file: it is truncated or corrupted "
        "(a `.keras` file is a zip archive). Save the model again, or restore the file."
    )
    if not zipfile.is_zipfile(path):
        raise ValueError(damaged)
    try:
        return keras.saving.load_model(path, safe_mode=True)
    except (zipfile.BadZipFile, zlib.error, EOFError) as error:
        raise ValueError(f"{damaged} ({type(error).__name__}: {error})") from None


def is_capsules_preset(preset):
    """Whether `from_preset` loads `preset` itself: a registered preset
    name or the path of a `.keras` file (`CapsuleSequenceClassifier`
    hands any other name to keras-hub)."""
    if not isinstance(preset, (str, os.PathLike)):
        return False
    name = os.fspath(preset)
    return name in _REGISTRY or (name.endswith(".keras") and os.path.isfile(name))


def from_preset(preset, weights=None, cache_dir=None, model_class=None):
    """A ready model with its authors' weights, or a saved model.

    Args:
        preset: a preset name (`list_presets()`), or the path of a `.keras`
            file (a preset saved with `model.save`), loaded with
            `keras.saving.load_model` (`safe_mode=True`).
        weights: `None` to download the authors' file (cached under
            `~/.keras/keras_capsules`), or the path of a local copy of it;
            either way its sha256 must be the preset's.
        cache_dir: where `keras.utils.get_file` caches downloads (default
            `~/.keras`).
        model_class: the class the model must be (the `from_preset`
            classmethods pass theirs); `None`: any.

    Returns:
        the model, in inference mode, with the weights loaded: `predict`
        gives the class scores the authors' code gives.

    Raises:
        ValueError: an unknown name, a weights file that is not the
            authors' (another sha256), a damaged file, or a preset of
            another model class.
        ConnectionError: the authors' file could not be downloaded (the
            message names the file, its source and `weights=PATH`).

    Example:

    >>> model = keras_capsules.models.from_preset(  # doctest: +SKIP
    ...     "efficient_capsnet_smallnorb", weights="efficient_capsnet_SMALLNORB.h5")
    >>> model.predict(images).shape  # doctest: +SKIP
    (8, 5)
    """
    if not isinstance(preset, (str, os.PathLike)):
        raise ValueError(
            f"`preset` must be a preset name ({', '.join(sorted(_REGISTRY))}) or the path of a "
            f"`.keras` file. Received: preset={preset!r}"
        )
    name = os.fspath(preset)
    if name in _REGISTRY:
        spec, cls = _REGISTRY[name]
        if model_class is not None and not issubclass(cls, model_class):
            raise ValueError(
                f"The preset {name!r} is a {spec.model}, not a {model_class.__name__}. "
                f"Received: preset={name!r} (use keras_capsules.models.from_preset, or "
                f"{spec.model}.from_preset)"
            )
        model = cls(**spec.config)
        model.load_authors_weights(_weights_file(spec, weights, cache_dir))
        return model
    if name.endswith(".keras") and os.path.isfile(name):
        if weights is not None:
            raise ValueError(
                f"A `.keras` file holds its weights. Received: weights given with preset={name!r}"
            )
        model = _load_keras_file(name)
        if model_class is not None and not isinstance(model, model_class):
            raise ValueError(
                f"{name} holds a {type(model).__name__}, not a {model_class.__name__}. "
                f"Received: preset={name!r}"
            )
        return model
    raise ValueError(
        f"Unknown preset. Valid names: {', '.join(sorted(_REGISTRY))}, or the path of a "
        f"`.keras` file. Received: preset={name!r}"
    )
