"""3D point capsule networks: the authors' PyTorch state dict -> `PointCapsNet`.

The official `PointCapsNet` (github.com/yongheng1991/3D-point-capsule-networks,
`models/pointcapsnet_ae.py`) keeps per-point layers as `Conv1d(kernel_size=1)`
(weights `(out, in, 1)`), the primary capsules as `primary_dim` separate
convolutions and batch normalisations, the latent transforms as `W (latent,
primary, latent_dim, primary_dim)` and the decoder as one module per patch.
`authors_weights` checks every name and shape of such a state dict against
a model and returns the arrays in the model's layout; `load_authors_weights`
reads a `.pt` file (without torch) and sets them. The model is reached
through its public attributes: this module imports no model.
"""

import numpy as np

from keras_capsules.convert import torch_zip

# torch BatchNorm -> Keras BatchNormalization.
_NORM = {
    "weight": "gamma",
    "bias": "beta",
    "running_mean": "moving_mean",
    "running_var": "moving_variance",
}


def _dense(array):
    return array[:, :, 0].T  # Conv1d (out, in, 1) -> Dense (in, out)


def _expected(model):
    """`{authors' key: (variable, how to build its value)}` of `model`."""
    maps = {}
    for k, (dense, norm) in enumerate(zip(model.stem[::2], model.stem[1::2])):
        maps[f"conv_layer.conv{k + 1}.weight"] = (dense.kernel, _dense)
        maps[f"conv_layer.conv{k + 1}.bias"] = (dense.bias, None)
        for theirs, ours in _NORM.items():
            maps[f"conv_layer.bn{k + 1}.{theirs}"] = (getattr(norm, ours), None)
    return maps


def _grouped(model):
    """The authors' keys whose values are slices of one of our variables:
    `{variable path: [(authors' key, transform), ...]}` in slice order."""
    primary, decoder = model.primary, model.decoder
    groups = {
        "primary.kernel": (primary.dense.kernel, -1, []),
        "primary.bias": (primary.dense.bias, -1, []),
    }
    for ours in _NORM.values():
        groups[f"primary.{ours}"] = (getattr(primary.norm, ours), -1, [])
    for d in range(model.primary_dim):
        prefix = f"primary_point_caps_layer.capsules.{d}"
        groups["primary.kernel"][2].append((f"{prefix}.conv3.weight", _dense))
        groups["primary.bias"][2].append((f"{prefix}.conv3.bias", None))
        for theirs, ours in _NORM.items():
            groups[f"primary.{ours}"][2].append((f"{prefix}.bn3.{theirs}", None))
    for k in range(4):
        groups[f"decoder.kernel_{k}"] = (decoder.kernels[k], 0, [])
        groups[f"decoder.bias_{k}"] = (decoder.biases[k], 0, [])
        if k < 3:
            for ours in _NORM.values():
                groups[f"decoder.norm_{k}.{ours}"] = (getattr(decoder.norms[k], ours), -1, [])
    for m in range(decoder.num_patches):
        prefix = f"caps_decoder.decoder.{m}"
        for k in range(4):
            groups[f"decoder.kernel_{k}"][2].append((f"{prefix}.conv{k + 1}.weight", _dense))
            groups[f"decoder.bias_{k}"][2].append((f"{prefix}.conv{k + 1}.bias", None))
            if k < 3:
                for theirs, ours in _NORM.items():
                    groups[f"decoder.norm_{k}.{ours}"][2].append(
                        (f"{prefix}.bn{k + 1}.{theirs}", None)
                    )
    return groups


def authors_weights(state_dict, model):
    """The authors' `PointCapsNet` weights in `model`'s layout.

    Args:
        state_dict: `{name: numpy array}`, as `torch_zip.read_state_dict`
            reads their `.pt` file (a `DataParallel` prefix `module.` is
            dropped).
        model: a built `models.PointCapsNet` of the same sizes.

    Returns:
        `[(variable, float32 array)]`, one entry per weight of the model.

    Raises:
        ValueError: naming the key, for a missing or unexpected key or a
            shape that is not the model's.
    """
    state = {k.removeprefix("module."): np.asarray(v) for k, v in state_dict.items()}
    state = {k: v for k, v in state.items() if not k.endswith("num_batches_tracked")}
    used = set()

    def take(key, transform):
        if key not in state:
            raise ValueError(f"The state dict lacks {key} (PointCapsNet of these sizes).")
        used.add(key)
        return state[key] if transform is None else transform(state[key])

    values = []
    for key, (variable, transform) in _expected(model).items():
        values.append((variable, take(key, transform), key))
    for name, (variable, axis, parts) in _grouped(model).items():
        arrays = [take(key, transform) for key, transform in parts]
        value = np.stack(arrays, 0) if axis == 0 else np.concatenate(arrays, axis)
        values.append((variable, value, f"{parts[0][0]} ... ({name})"))
    w = take("latent_caps_layer.W", lambda a: np.transpose(a, (1, 0, 3, 2)))
    values.append((model.latent.kernel, w, "latent_caps_layer.W"))
    unexpected = sorted(set(state) - used)
    if unexpected:
        raise ValueError(f"Unexpected keys for PointCapsNet of these sizes: {unexpected[:5]}")
    checked = []
    for variable, value, key in values:
        if tuple(value.shape) != tuple(variable.shape):
            raise ValueError(
                f"{key} gives shape {value.shape}; the model's {variable.path} has shape "
                f"{tuple(variable.shape)}."
            )
        checked.append((variable, np.ascontiguousarray(value, dtype=np.float32)))
    return checked


def load_authors_weights(model, path):
    """Sets every weight of `model`, a `PointCapsNet` of the checkpoint's
    sizes, from the authors' state dict file (read without torch).

    Args:
        model: the model (built here for 3-D points if it is not).
        path: the `.pt` file.

    Returns:
        the model.

    Example:

    ```python
    model = keras_capsules.models.PointCapsNet()  # the authors' sizes
    keras_capsules.convert.point_capsnet.load_authors_weights(model, "checkpoint.pth")
    ```
    """
    if not model.built:
        model.build((None, model.num_points, 3))
    for variable, value in authors_weights(torch_zip.read_state_dict(path), model):
        variable.assign(value)
    return model
