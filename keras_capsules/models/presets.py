"""Ready models with their authors' released weights.

A preset is a ready model built with its paper's architecture and loaded
with the weights its authors released, converted from their file (a
PyTorch state dict or a Keras 2 `.h5`) without running code from it. The
file is fetched from the authors' repository at a pinned commit with
`keras.utils.get_file` and checked against its sha256, or read from a
local copy (`weights=PATH`, for machines without internet), which must be
the same file.

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


_HEINSEN_COMMIT = "cd3420d3946b9bec670a645ce1f6dbeccca7fe5d"
_ESCVM_COMMIT = "4b337f5bf79d70a56e4dec8b113fe54b44cfe963"

PRESETS = {
    preset.name: preset
    for preset in (
        Preset(
            name="heinsen_smallnorb",
            description=(
                "Heinsen's smallNORB classifier (64 parts routed to 5 classes) with the "
                "author's trained weights."
            ),
            model="HeinsenCapsNet",
            config={"input_shape": (96, 96, 2), "num_classes": 5},
            inputs="(batch, 96, 96, 2): the stereo pair in [0, 1] (the coordinate grid is added "
            "inside the model)",
            outputs="the author's output scores a_out (logits), (batch, 5)",
            url=(
                f"https://github.com/glassroom/heinsen_routing/raw/{_HEINSEN_COMMIT}/"
                "smallNORB_pretrained_model_state_dict.pt"
            ),
            sha256="26f177368a683a0b7a856a0f44dff0d7a67f6d7187ad0e7c91bded375c488898",
            license="MIT",
            source=f"glassroom/heinsen_routing@{_HEINSEN_COMMIT[:7]}",
            paper='Heinsen, "An Algorithm for Routing Capsules in All Domains", 2019 '
            "(arXiv:1911.00792)",
            paper_accuracy=99.1,
            parameters=272_592,
        ),
        Preset(
            name="efficient_capsnet_smallnorb",
            description=(
                "Efficient-CapsNet's smallNORB model (self-attention routing, the authors' "
                "generator as decoder) with the authors' trained weights."
            ),
            model="EfficientCapsNet",
            config={"input_shape": (48, 48, 2), "num_classes": 5, "architecture": "smallnorb"},
            inputs="(batch, 48, 48, 2): each channel standardised per image, resized to 64x64, "
            "centre crop 48x48",
            outputs="the class capsules' lengths, (batch, 5)",
            url=(
                f"https://github.com/EscVM/Efficient-CapsNet/raw/{_ESCVM_COMMIT}/"
                "bin/efficient_capsnet_SMALLNORB.h5"
            ),
            sha256="c7fbd8cc0f17b611c7f09c99c606a07c8f1bd0d9847b120b05fb0e2c91fe008b",
            license="Apache-2.0",
            source=f"EscVM/Efficient-CapsNet@{_ESCVM_COMMIT[:7]}",
            paper='Mazzia, Salvetti & Chiaberge, "Efficient-CapsNet: capsule network with '
            'self-attention routing", Scientific Reports 11, 2021',
            paper_accuracy=97.46,
            parameters=381_234,
        ),
    )
}


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
    classes = _model_classes()
    return {
        name: dataclasses.asdict(preset)
        for name, preset in PRESETS.items()
        if model_class is None or issubclass(classes[preset.model], model_class)
    }


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _weights_file(preset, weights, cache_dir):
    if weights is None:
        return keras.utils.get_file(
            preset.file_name,
            preset.url,
            file_hash=preset.sha256,
            cache_subdir="keras_capsules",
            cache_dir=cache_dir,
        )
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


def _model_classes():
    # Imported here: the ready models' modules import this one for their
    # `from_preset` classmethods.
    from keras_capsules import models

    return {name: getattr(models, name) for name in {p.model for p in PRESETS.values()}}


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

    Example:

    >>> model = keras_capsules.models.from_preset(  # doctest: +SKIP
    ...     "efficient_capsnet_smallnorb", weights="efficient_capsnet_SMALLNORB.h5")
    >>> model.predict(images).shape  # doctest: +SKIP
    (8, 5)
    """
    if not isinstance(preset, (str, os.PathLike)):
        raise ValueError(
            f"`preset` must be a preset name ({', '.join(sorted(PRESETS))}) or the path of a "
            f"`.keras` file. Received: preset={preset!r}"
        )
    name = os.fspath(preset)
    if name in PRESETS:
        spec = PRESETS[name]
        cls = _model_classes()[spec.model]
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
        f"Unknown preset. Valid names: {', '.join(sorted(PRESETS))}, or the path of a "
        f"`.keras` file. Received: preset={name!r}"
    )
