"""`.keras` files saved by keras-capsules 0.1.0, rewritten for this version.

0.2.0 renamed and removed arguments and classes (see the CHANGELOG), so a
0.1.0 file does not load as it is: its routers' configs name the removed
`remat`, and some name a removed class (`StridedConv2D`,
`BackboneCapsNet`) or argument. `upgrade(path, new_path)` writes a copy
that loads with `keras.saving.load_model(new_path, safe_mode=True)` and
computes what the old file computed. It edits the file's JSON config and
renames groups in its weights file; it builds no model and runs no code
from the file.

The rewrites, in every config of the file (nested ones included):

- `StridedConv2D` -> `AutoConv2D` (and its weights' group names);
- `BackboneCapsNet` -> `CapsuleImageClassifier`; its (and
  `CapsuleImageClassifier`'s) `capsule_dim` -> `primary_dim` and
  `class_capsule_dim` -> `capsule_dim`;
- the routers' `remat` is dropped (it changed memory, not values);
- the speed-only options `implementation` and `backward` are dropped (a
  0.2.0 file loads with `"auto"` and the hand-written backward);
- `MatrixCapsNet`, `SegCaps`: `iterations` -> `router` (EM, dynamic
  routing with those iterations); `HeinsenCapsNet` and `HeinsenCapsule`:
  `iterations`, `epsilon` -> `router` (`HeinsenRouting`);
- `MatrixCapsNet`'s `A`-`D` -> `conv_filters`, `primary_capsules`,
  `conv_capsules1`, `conv_capsules2`; `ClassMatrixCapsule(num_classes)` ->
  `num_capsules` (files of the earliest 0.1.0 code);
- `PrimaryMatrixCapsule`'s `pose_shape` (always `(4, 4)`) is dropped.

Example:

```python
from keras_capsules.convert import keras_v0_1
keras_v0_1.upgrade("model_0.1.0.keras", "model.keras")
model = keras.saving.load_model("model.keras", safe_mode=True)
```
"""

import json
import os
import re
import tempfile
import zipfile

import h5py

_PACKAGE = "keras_capsules"
_RENAMED_CLASSES = {
    "StridedConv2D": ("AutoConv2D", "keras_capsules.layers.auto_conv2d"),
    "BackboneCapsNet": ("CapsuleImageClassifier", "keras_capsules.models.capsule_image_classifier"),
}
_MOVED_MODULES = {
    "keras_capsules.models.backbone": "keras_capsules.models.capsule_image_classifier",
    "keras_capsules.models.base": "keras_capsules.models.capsule_classifier",
}
_ROUTERS = {
    "DynamicRouting": "keras_capsules.routing.dynamic",
    "EMRouting": "keras_capsules.routing.em",
    "HeinsenRouting": "keras_capsules.routing.heinsen",
    "InvertedDotProductRouting": "keras_capsules.routing.inverted_dot_product",
    "SelfAttentionRouting": "keras_capsules.routing.self_attention",
    "SelfRouting": "keras_capsules.routing.self_routing",
    "SparseAttentionRouting": "keras_capsules.routing.sparse_attention",
}
_SPEED_OPTIONS = ("implementation", "backward")


def upgrade(path, new_path):
    """Writes `new_path`, the 0.1.0 `.keras` file `path` rewritten for this
    version (see the module docstring for what changes).

    Args:
        path: a `.keras` file saved by keras-capsules 0.1.0.
        new_path: where to write the upgraded file (not `path`).

    Returns:
        `new_path`.

    Raises:
        ValueError: `path` is not a `.keras` file, or `new_path` is `path`,
            or the file holds both `AutoConv2D` and `StridedConv2D` layers
            in a container whose order its config does not give.
    """
    path, new_path = os.fspath(path), os.fspath(new_path)
    if os.path.abspath(path) == os.path.abspath(new_path):
        raise ValueError(f"`new_path` must differ from `path`. Received: new_path={new_path!r}")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not a `.keras` file (a zip archive). Received: path={path!r}")
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    if "config.json" not in members:
        raise ValueError(f"{path} has no config.json: it is not a `.keras` model file.")
    config = json.loads(members["config.json"])
    containers = _container_classes(config)
    members["config.json"] = json.dumps(upgrade_config(config)).encode()
    if "model.weights.h5" in members:
        members["model.weights.h5"] = _upgrade_weights(members["model.weights.h5"], containers)
    with zipfile.ZipFile(new_path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return new_path


def upgrade_config(config):
    """A 0.1.0 config (a `serialize_keras_object` dict, or any JSON value
    holding such dicts) rewritten for this version; `config` is not changed.

    Example:

    >>> from keras_capsules.convert.keras_v0_1 import upgrade_config
    >>> old = {"module": "keras_capsules.routing.dynamic", "class_name": "DynamicRouting",
    ...        "config": {"iterations": 3, "remat": False, "backward": "manual"},
    ...        "registered_name": "keras_capsules>DynamicRouting"}
    >>> upgrade_config(old)["config"]
    {'iterations': 3}
    """
    if isinstance(config, list):
        return [upgrade_config(item) for item in config]
    if not isinstance(config, dict):
        return config
    config = {key: upgrade_config(value) for key, value in config.items()}
    registered = config.get("registered_name")
    if isinstance(registered, str) and registered.startswith(f"{_PACKAGE}>"):
        config = _upgrade_object(config)
    return config


def _upgrade_object(obj):
    class_name = obj["class_name"]
    if class_name in _RENAMED_CLASSES:
        class_name, module = _RENAMED_CLASSES[class_name]
        obj = {**obj, "class_name": class_name, "module": module}
        obj["registered_name"] = f"{_PACKAGE}>{class_name}"
    if obj.get("module") in _MOVED_MODULES:
        obj = {**obj, "module": _MOVED_MODULES[obj["module"]]}
    if isinstance(obj.get("config"), dict):
        obj = {**obj, "config": _upgrade_arguments(class_name, obj["config"])}
    return obj


def _upgrade_arguments(class_name, config):
    config = {k: v for k, v in config.items() if k not in _SPEED_OPTIONS}
    if class_name in _ROUTERS:
        config.pop("remat", None)
    elif class_name == "CapsuleImageClassifier" and "class_capsule_dim" in config:
        config["primary_dim"] = config.pop("capsule_dim")
        config["capsule_dim"] = config.pop("class_capsule_dim")
    elif class_name == "PrimaryMatrixCapsule":
        config.pop("pose_shape", None)
    elif class_name == "ClassMatrixCapsule" and "num_classes" in config:
        config["num_capsules"] = config.pop("num_classes")
    elif class_name == "MatrixCapsNet":
        for letter, name in zip("ABCD", _MATRIX_SIZES):
            if letter in config:
                config[name] = config.pop(letter)
        _iterations_to_router(config, "EMRouting", ("iterations",))
    elif class_name == "SegCaps":
        _iterations_to_router(config, "DynamicRouting", ("iterations",))
    elif class_name == "HeinsenCapsNet":
        _iterations_to_router(config, "HeinsenRouting", ("iterations", "epsilon"))
    elif class_name == "HeinsenCapsule":
        extra = {"share_weights": config.get("share_weights", False), "name": "routing"}
        if "dtype" in config:
            extra["dtype"] = config["dtype"]
        _iterations_to_router(config, "HeinsenRouting", ("iterations", "epsilon"), extra)
    return config


_MATRIX_SIZES = ("conv_filters", "primary_capsules", "conv_capsules1", "conv_capsules2")


def _iterations_to_router(config, router_class, names, extra=None):
    """Moves the arguments `names` of a 0.1.0 config into its `router`: the
    router of those arguments, where the config had none."""
    arguments = {name: config.pop(name) for name in names if name in config}
    if not arguments or config.get("router") is not None:
        return  # a router given in 0.1.0 made those arguments unused
    config["router"] = {
        "module": _ROUTERS[router_class],
        "class_name": router_class,
        "config": {**(extra or {}), **arguments},
        "registered_name": f"{_PACKAGE}>{router_class}",
    }


# Weights ------------------------------------------------------------------


def _snake_case(name):
    """A class name as Keras names its weights' group in a container."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def _numbered(class_names):
    """The group names Keras gives a container's items of these classes, in
    order: the snake-case class name, `_1`, `_2`, ... for repeats."""
    used, names = {}, []
    for class_name in class_names:
        name = _snake_case(class_name)
        used[name] = used.get(name, -1) + 1
        names.append(name if used[name] == 0 else f"{name}_{used[name]}")
    return names


def _container_classes(config, path="layers"):
    """`{weights group path: [class names of its items, in order]}` for the
    functional and sequential models in a 0.1.0 config (the containers
    whose order the config gives)."""
    found = {}
    inner = config.get("config") if isinstance(config, dict) else None
    layers = inner.get("layers") if isinstance(inner, dict) else None
    if not isinstance(layers, list):
        return found
    classes = [layer.get("class_name") for layer in layers]
    if config.get("class_name") == "Sequential":
        classes = [c for c in classes if c != "InputLayer"]  # not a saved item
    found[path] = classes
    for layer, name in zip(layers, _numbered(classes)):
        found.update(_container_classes(layer, f"{path}/{name}/layers"))
    return found


def _upgrade_weights(data, containers):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.weights.h5")
        with open(path, "wb") as file:
            file.write(data)
        with h5py.File(path, "r+") as weights:
            groups = []
            weights.visititems(
                lambda name, item: groups.append(name) if isinstance(item, h5py.Group) else None
            )
            for group in sorted(groups, key=lambda g: -g.count("/")):  # deepest first
                _rename_children(weights, group, containers)
            _rename_children(weights, "", containers)
        with open(path, "rb") as file:
            return file.read()


def _rename_children(weights, group, containers):
    """Renames the `strided_conv2d*` groups under `group` to the names the
    same items have as `AutoConv2D`s."""
    node = weights[group] if group else weights
    children = list(node.keys())
    old = [c for c in children if re.fullmatch(r"strided_conv2d(_\d+)?", c)]
    if not old:
        return
    if not any(re.fullmatch(r"auto_conv2d(_\d+)?", c) for c in children):
        renames = {c: c.replace("strided_conv2d", "auto_conv2d", 1) for c in old}
    elif group in containers:
        classes = containers[group]
        new_classes = [_RENAMED_CLASSES.get(c, (c,))[0] for c in classes]
        renames = {
            before: after
            for before, after in zip(_numbered(classes), _numbered(new_classes))
            if before != after
        }
    else:
        raise ValueError(
            f"The weights group {group!r} holds both AutoConv2D and StridedConv2D layers, "
            "and the file's config does not give their order: rebuild the model with "
            "AutoConv2D layers and set its weights from the old file's arrays in order."
        )
    for before, after in renames.items():  # via temporary names: they may swap
        node.move(before, f"{after}.upgrading")
    for after in renames.values():
        node.move(f"{after}.upgrading", after)
