"""Heinsen's vector routing (2022): his `EfficientVectorRouting` state dict ->
`layers.VectorRouting` weights.

The official module (github.com/glassroom/heinsen_routing,
`heinsen_routing.py`) names its parameters `W_A`, `B_A`, `W_F1`, ...;
`VectorRouting` names the same parameters for what they do. `authors_weights`
checks every name and shape of such a state dict against a layer and returns
its arrays keyed by the layer's weight names; `load_authors_weights` reads a
`.pt` file without torch and sets them. This module imports no layer: the
layer is reached through its public attributes.
"""

import numpy as np

from keras_capsules.convert import torch_zip

# The author's name -> (our weight name, transposed): torch's `nn.Linear`
# keeps its weight as (outputs, inputs), a Keras kernel as (inputs, outputs).
_NAMES = {
    "W_A": ("activation_kernel", False),
    "B_A": ("activation_bias", False),
    "W_F1": ("vote_scale", False),
    "W_F2": ("vote_kernel", False),
    "B_F2": ("vote_bias", False),
    "W_G1": ("prediction_kernel", False),
    "W_G2": ("prediction_scale", False),
    "B_G2": ("prediction_bias", False),
    "W_S": ("agreement_scale", False),
    "B_S": ("agreement_bias", False),
    "beta_use": ("beta_use", False),
    "beta_ign": ("beta_ign", False),
    "compute_beta_use.weight": ("beta_use_kernel", True),
    "compute_beta_use.bias": ("beta_use_bias", False),
    "compute_beta_ign.weight": ("beta_ign_kernel", True),
    "compute_beta_ign.bias": ("beta_ign_bias", False),
}
# The author's constant buffer: the first iteration's shares, 1 / n_out.
_CONSTANT = "CONST_ones_over_n_out"


def authors_weights(state_dict, layer, prefix=""):
    """The author's `EfficientVectorRouting` weights in `layer`'s layout.

    Args:
        state_dict: `{name: numpy array}`, as `torch_zip.read_state_dict`
            reads the author's `.pt` file.
        layer: a built `layers.VectorRouting` of the same sizes
            (`num_inputs=None` for the author's `n_inp=-1`).
        prefix: the module's name inside a larger model's state dict
            (`"head.routing."`); only the keys that start with it are read.

    Returns:
        `{our weight name: float32 array}`, one entry per weight of `layer`.

    Raises:
        ValueError: naming the key, for a missing or unexpected key, a
            shape that is not the layer's, or a constant that is not
            `1 / num_capsules`.
    """
    entries = {k[len(prefix) :]: v for k, v in state_dict.items() if k.startswith(prefix)}
    if not entries:
        raise ValueError(f"The state dict has no key that starts with prefix={prefix!r}.")
    expected = {variable.name: tuple(variable.shape) for variable in layer.weights}
    weights = {}
    for key, array in entries.items():
        array = np.asarray(array)
        if key == _CONSTANT:
            if array.shape != (layer.num_capsules,) or not np.allclose(
                array, 1 / layer.num_capsules
            ):
                raise ValueError(
                    f"{prefix}{key} must be {layer.num_capsules} values of 1/{layer.num_capsules}. "
                    f"Received: an array of shape {array.shape}"
                )
            continue
        ours, transposed = _NAMES.get(key, (None, False))
        if ours not in expected:
            raise ValueError(
                f"Unexpected key {prefix}{key} for VectorRouting(num_inputs="
                f"{layer.num_inputs}): it expects {sorted(_author_names(expected))}."
            )
        array = array.T if transposed else array
        if array.shape != expected[ours]:
            raise ValueError(
                f"{prefix}{key} has shape {array.shape}; this layer's {ours} has shape "
                f"{expected[ours]}."
            )
        weights[ours] = np.ascontiguousarray(array, dtype=np.float32)
    missing = sorted(set(expected) - set(weights))
    if missing:
        names = {ours: key for key, (ours, _) in _NAMES.items()}
        raise ValueError(
            f"The state dict lacks {[prefix + names[m] for m in missing]} (prefix={prefix!r})."
        )
    return weights


def _author_names(expected):
    return [key for key, (ours, _) in _NAMES.items() if ours in expected]


def load_authors_weights(layer, path, prefix=""):
    """Sets `layer`'s weights from the author's `EfficientVectorRouting`
    state dict file, read without torch (`torch_zip.read_state_dict`).

    An unbuilt layer is built for the file's input dimension first.

    Args:
        layer: a `layers.VectorRouting` of the module's sizes.
        path: the `.pt` file (`torch.save(module.state_dict(), path)`).
        prefix: the module's name inside a larger model's state dict.

    Returns:
        the layer.

    Example:

    ```python
    layer = keras_capsules.layers.VectorRouting(num_capsules=32, capsule_dim=64)
    keras_capsules.convert.vector_routing.load_authors_weights(layer, "routing.pt")
    ```
    """
    state_dict = torch_zip.read_state_dict(path)
    if not layer.built:
        key = prefix + "W_F2"
        if key not in state_dict or np.ndim(state_dict[key]) != 2:
            raise ValueError(f"{path}: no 2-D {key}, so the input dimension is unknown.")
        layer.build((None, layer.num_inputs, np.shape(state_dict[key])[0]))
    weights = authors_weights(state_dict, layer, prefix)
    for variable in layer.weights:
        variable.assign(weights[variable.name])
    return layer
