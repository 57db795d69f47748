"""Heinsen's smallNORB classifier: his PyTorch state dict -> `HeinsenCapsNet` weights.

The official `SmallNORBClassifier` (github.com/glassroom/heinsen_routing,
`models.py` at commit cd3420d) names its weights after its
`nn.Sequential` indices. `heinsen_weights` checks every name and shape of
such a state dict and returns the arrays in this library's layout, keyed
`"<layer name>/<weight name>"` of `HeinsenCapsNet`; `load_authors_weights` sets them
(`HeinsenCapsNet.load_authors_weights` calls it). The model is reached
through its public layers only: this module imports no model.
"""

import numpy as np

from keras_capsules.convert.torch_zip import read_state_dict
from keras_capsules.deprecation import renamed_function

# The author's buffers that hold no weight: BatchNorm's step counters and
# each routing's constant 1 / n_out.
_IGNORED = ("num_batches_tracked", "CONST_R_init")


def _conv(array):
    """OIHW (PyTorch) -> HWIO (Keras)."""
    return np.transpose(array, (2, 3, 1, 0))


def _same(array):
    return array


def _squeeze_inputs(array):
    """The shared routing's `(1, n_out, ...)` -> `(n_out, ...)`."""
    return array[0]


def heinsen_mapping(num_classes=5, parts=64, channels=64, image_channels=2):
    """`{author's key: (layer/weight name, author's shape, transform)}` of a
    `SmallNORBClassifier(n_objs=num_classes, n_parts=parts,
    d_chns=channels)` for images of `image_channels` channels.

    Example:

    >>> from keras_capsules.convert.heinsen import heinsen_mapping
    >>> name, shape, _ = heinsen_mapping()["convolve.1.weight"]
    >>> name, shape
    ('conv1/kernel', (64, 4, 3, 3))
    """
    mapping = {}

    def batch_norm(prefix, layer, size):
        for key, weight in (
            ("weight", "gamma"),
            ("bias", "beta"),
            ("running_mean", "moving_mean"),
            ("running_var", "moving_variance"),
        ):
            mapping[f"{prefix}.{key}"] = (f"{layer}/{weight}", (size,), _same)

    def conv(prefix, layer, out, inp, kernel):
        mapping[f"{prefix}.weight"] = (f"{layer}/kernel", (out, inp, kernel, kernel), _conv)
        mapping[f"{prefix}.bias"] = (f"{layer}/bias", (out,), _same)

    inputs = image_channels + 2  # the coordinate grid
    for i in range(6):
        batch_norm(f"convolve.{3 * i}", f"bn{i + 1}", inputs if i == 0 else channels)
        conv(f"convolve.{3 * i + 1}", f"conv{i + 1}", channels, inputs if i == 0 else channels, 3)
    batch_norm("compute_a.0", "scores_bn", channels)
    conv("compute_a.1", "scores_conv", parts, channels, 1)
    batch_norm("compute_mu.0", "poses_bn", channels)
    conv("compute_mu.1", "poses_conv", parts * 16, channels, 1)
    for index, layer, n_inp, n_out, shared in (
        (0, "part_capsules", 1, parts, True),
        (1, "class_capsules", parts, num_classes, False),
    ):
        matrix = _squeeze_inputs if shared else _same
        mapping[f"routings.{index}.W"] = (f"{layer}/kernel", (n_inp, n_out, 4, 4), matrix)
        mapping[f"routings.{index}.B"] = (f"{layer}/bias", (n_inp, n_out, 4, 4), matrix)
        for beta in ("beta_use", "beta_ign"):
            mapping[f"routings.{index}.{beta}"] = (f"{layer}/{beta}", (n_inp, n_out), _same)
    return mapping


def heinsen_weights(state_dict, num_classes=5, parts=64, channels=64, image_channels=2):
    """The author's state dict as `HeinsenCapsNet` weights.

    Args:
        state_dict: `{name: numpy array}`, as
            `keras_capsules.convert.torch_zip.read_state_dict` reads the
            author's `.pt` file.
        num_classes, parts, channels, image_channels: the model's sizes
            (the released smallNORB model: 5, 64, 64, 2).

    Returns:
        `{"<layer name>/<weight name>": float32 array}` in Keras's layouts:
        convolution kernels HWIO, the shared routing's `W` and `B` without
        their leading axis of size 1. The pose channels keep the author's
        order `part * 16 + 4 * row + column`, which the model's reshape
        reads as he does.

    Raises:
        ValueError: naming the key, for a missing key, an unexpected one,
            or an array of another shape than the architecture's.

    Example:

    >>> from keras_capsules.convert.heinsen import heinsen_mapping, heinsen_weights
    >>> state = {k: np.zeros(s, "float32") for k, (_, s, _) in heinsen_mapping(3, 4, 8).items()}
    >>> weights = heinsen_weights(state, num_classes=3, parts=4, channels=8)
    >>> weights["conv1/kernel"].shape, weights["part_capsules/kernel"].shape
    ((3, 3, 4, 8), (4, 4, 4))
    >>> del state["routings.1.beta_ign"]
    >>> heinsen_weights(state, num_classes=3, parts=4, channels=8)
    Traceback (most recent call last):
        ...
    ValueError: The state dict lacks the key 'routings.1.beta_ign' ...
    """
    mapping = heinsen_mapping(num_classes, parts, channels, image_channels)
    missing = [key for key in mapping if key not in state_dict]
    if missing:
        raise ValueError(
            f"The state dict lacks the key {missing[0]!r} (of shape {mapping[missing[0]][1]}) "
            f"that SmallNORBClassifier(n_objs={num_classes}, n_parts={parts}, "
            f"d_chns={channels}) has. Missing keys: {missing}"
        )
    unexpected = [
        key for key in state_dict if key not in mapping and key.rsplit(".", 1)[-1] not in _IGNORED
    ]
    if unexpected:
        raise ValueError(
            f"The state dict has the key {unexpected[0]!r}, which "
            f"SmallNORBClassifier(n_objs={num_classes}, n_parts={parts}, "
            f"d_chns={channels}) does not have. Unexpected keys: {unexpected}"
        )
    weights = {}
    for key, (name, shape, transform) in mapping.items():
        array = np.asarray(state_dict[key])
        if array.shape != shape:
            raise ValueError(
                f"The state dict's {key!r} has the wrong shape for "
                f"SmallNORBClassifier(n_objs={num_classes}, n_parts={parts}, "
                f"d_chns={channels}): expected {shape}. Received: {key}.shape={array.shape}"
            )
        weights[name] = np.ascontiguousarray(transform(array), dtype=np.float32)
    return weights


def load_authors_weights(model, path):
    """Sets every weight of `model`, a `HeinsenCapsNet`, from the author's
    released `.pt` file (read without pickle by
    `torch_zip.read_state_dict`; see `load_state_dict`).

    Args:
        model: the model.
        path: the author's state dict file of the model's sizes.

    Returns:
        the model.
    """
    return load_state_dict(model, read_state_dict(path))


def load_state_dict(model, state_dict):
    """Sets every weight of `model`, a `HeinsenCapsNet`, from the author's
    state dict of its sizes (`heinsen_weights` checks every key and shape
    first).

    Args:
        model: the model.
        state_dict: `{name: numpy array}`, as `torch_zip.read_state_dict`
            reads the author's `.pt` file.

    Returns:
        the model.
    """
    weights = heinsen_weights(
        state_dict,
        num_classes=model.num_classes,
        parts=model.num_parts,
        channels=model.channels,
        image_channels=model.image_shape[-1],
    )
    variables = {
        f"{layer.name}/{variable.name}": variable
        for layer in model.network.layers
        for variable in layer.weights
    }
    if set(weights) != set(variables):  # a change of the model, not of the file
        raise ValueError(
            f"The author's weights {sorted(set(weights) - set(variables))} have no "
            f"variable here, and {sorted(set(variables) - set(weights))} no value."
        )
    for name, array in weights.items():
        variables[name].assign(array)
    return model


load_into = renamed_function(load_state_dict, "load_into", __name__)
