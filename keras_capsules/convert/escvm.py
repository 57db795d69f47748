"""The weights Mazzia et al. released for Efficient-CapsNet (EscVM/Efficient-CapsNet),
mapped into `keras_capsules.models.EfficientCapsNet(architecture="smallnorb")`.

`smallnorb_weights` checks the authors' names and shapes and changes the
layouts (NumPy only); `load_authors_weights` reads their file and sets a model's
variables (`EfficientCapsNet.load_authors_weights` calls it). The model is
reached through its public layers only: this module imports no model.
"""

import numpy as np

from keras_capsules.convert.keras_h5 import read_weights
from keras_capsules.deprecation import renamed_function

SOURCE = "EscVM/Efficient-CapsNet, bin/efficient_capsnet_SMALLNORB.h5 at commit 4b337f5"

# The authors' Keras 2 names -> ours ("<sub-model>/<layer>/<weight>"), with
# the shapes of their smallNORB model (48x48x2 images, 5 classes).
_CONVS = [(4, 7, 2, 32), (5, 3, 32, 64), (6, 3, 64, 64), (7, 3, 64, 128)]
_GENERATOR = [
    ("conv2d", 1, 64),
    ("conv2d_1", 64, 128),
    ("conv2d_2", 128, 128),
    ("conv2d_3", 128, 2),
]


def _smallnorb_layout():
    """[(their key, its shape, our key)] for the released smallNORB file."""
    layout = []
    for i, (theirs, kernel, c_in, c_out) in enumerate(_CONVS, start=1):
        norm = "instance_normalization" + ("" if i == 1 else f"_{i - 1}")
        layout += [
            (
                f"CapsNet/conv2d_{theirs}/kernel:0",
                (kernel, kernel, c_in, c_out),
                f"features/conv{i}/kernel",
            ),
            (f"CapsNet/conv2d_{theirs}/bias:0", (c_out,), f"features/conv{i}/bias"),
            (f"CapsNet/{norm}/gamma:0", (c_out,), f"features/norm{i}/gamma"),
            (f"CapsNet/{norm}/beta:0", (c_out,), f"features/norm{i}/beta"),
        ]
    layout += [
        ("CapsNet/conv2d_8/kernel:0", (8, 8, 1, 128), "features/primary/kernel"),
        ("CapsNet/conv2d_8/bias:0", (128,), "features/primary/bias"),
        ("CapsNet/digit_caps/W:0", (5, 16, 8, 16), "class_capsules/kernel"),
        ("CapsNet/digit_caps/b:0", (5, 16, 1), "class_capsules/router/priors"),
        ("Generator/dense/kernel:0", (80, 64), "decoder/dense/kernel"),
        ("Generator/dense/bias:0", (64,), "decoder/dense/bias"),
    ]
    for i, (theirs, c_in, c_out) in enumerate(_GENERATOR, start=1):
        layout += [
            (f"Generator/{theirs}/kernel:0", (3, 3, c_in, c_out), f"decoder/conv{i}/kernel"),
            (f"Generator/{theirs}/bias:0", (c_out,), f"decoder/conv{i}/bias"),
        ]
    return layout


SMALLNORB_LAYOUT = _smallnorb_layout()


def _to_ours(our_key, array):
    if our_key == "features/primary/kernel":  # Conv2D(groups=128): (8, 8, 1, 128)
        return array[:, :, 0, :]
    if our_key == "class_capsules/kernel":  # W (out, in, in_dim, out_dim)
        return np.transpose(array, (1, 0, 2, 3))  # -> (in, out, in_dim, out_dim)
    if our_key == "class_capsules/router/priors":  # b (out, in, 1)
        return np.transpose(array[..., 0], (1, 0))  # -> (in, out)
    return array


def smallnorb_weights(weights):
    """The authors' smallNORB Efficient-CapsNet weights in our names and layouts.

    Checks that `weights` holds exactly the keys of the released file
    (`bin/efficient_capsnet_SMALLNORB.h5`: the encoder `CapsNet/...` and the
    generator `Generator/...`), each with its shape, and maps them:

    ```
    CapsNet/conv2d_{4..7}               -> features/conv{1..4}     (HWIO, as is)
    CapsNet/instance_normalization{,_1,_2,_3} -> features/norm{1..4} (gamma, beta)
    CapsNet/conv2d_8  (8, 8, 1, 128)    -> features/primary        kernel[:, :, 0, :]
    CapsNet/digit_caps/W (5, 16, 8, 16) -> class_capsules/kernel   transpose(1, 0, 2, 3)
    CapsNet/digit_caps/b (5, 16, 1)     -> class_capsules/router/priors  b[..., 0].T
    Generator/dense, conv2d{,_1,_2,_3}  -> decoder/dense, decoder/conv{1..4}
    ```

    Args:
        weights: a dict of the authors' weight names (`"CapsNet/conv2d_4/kernel:0"`,
            ...) to arrays, as `keras_capsules.convert.keras_h5.read_weights`
            returns for the file.

    Returns:
        a dict of our names (`"features/conv1/kernel"`, ...) to float32 arrays.

    Raises:
        ValueError: a key missing or unexpected, or a shape not the released one.

    Example:

    >>> from keras_capsules.convert import escvm
    >>> released = {key: np.zeros(shape, "float32") for key, shape, _ in escvm.SMALLNORB_LAYOUT}
    >>> ours = escvm.smallnorb_weights(released)
    >>> ours["class_capsules/kernel"].shape, ours["class_capsules/router/priors"].shape
    ((16, 5, 8, 16), (16, 5))

    Reference: Mazzia, Salvetti & Chiaberge, "Efficient-CapsNet: capsule
    network with self-attention routing", Scientific Reports 11, 2021; the
    weights: EscVM/Efficient-CapsNet (Apache-2.0) at commit 4b337f5.
    """
    expected = {key for key, _, _ in SMALLNORB_LAYOUT}
    unexpected = sorted(set(weights) - expected)
    if unexpected:
        raise ValueError(
            f"Unexpected weight {unexpected[0]!r} for Efficient-CapsNet's smallNORB model "
            f"({SOURCE}); {len(unexpected)} unexpected in all: {unexpected[:5]}"
        )
    ours = {}
    for key, shape, our_key in SMALLNORB_LAYOUT:
        if key not in weights:
            raise ValueError(
                f"Missing weight {key!r} (expected shape {shape}) of Efficient-CapsNet's "
                f"smallNORB model ({SOURCE})"
            )
        array = np.asarray(weights[key])
        if array.shape != shape:
            raise ValueError(
                f"Weight {key!r} of Efficient-CapsNet's smallNORB model has the wrong "
                f"shape: expected {shape}, received {array.shape}"
            )
        ours[our_key] = np.ascontiguousarray(_to_ours(our_key, array), dtype="float32")
    return ours


def model_variables(model):
    """The variables of an `EfficientCapsNet(architecture="smallnorb")` by
    the names `smallnorb_weights` returns (`"features/conv1/kernel"`, ...):
    the encoder's, the router's priors if it has them, and the decoder's if
    the model has one."""
    variables = {}
    for i in range(1, 5):
        conv = model.features.get_layer(f"conv{i}")
        norm = model.features.get_layer(f"norm{i}")
        variables[f"features/conv{i}/kernel"] = conv.kernel
        variables[f"features/conv{i}/bias"] = conv.bias
        variables[f"features/norm{i}/gamma"] = norm.gamma
        variables[f"features/norm{i}/beta"] = norm.beta
    primary = model.features.get_layer("primary")
    variables["features/primary/kernel"] = primary.kernel
    variables["features/primary/bias"] = primary.bias
    variables["class_capsules/kernel"] = model.class_capsules.kernel
    router = model.class_capsules.router
    if getattr(router, "use_priors", False):
        variables["class_capsules/router/priors"] = router.priors
    if model.reconstruction:
        variables["decoder/dense/kernel"] = model.decoder.get_layer("dense").kernel
        variables["decoder/dense/bias"] = model.decoder.get_layer("dense").bias
        for i in range(1, 5):
            conv = model.decoder.get_layer(f"conv{i}")
            variables[f"decoder/conv{i}/kernel"] = conv.kernel
            variables[f"decoder/conv{i}/bias"] = conv.bias
    return variables


def load_authors_weights(model, path):
    """Sets every weight of `model`, an `EfficientCapsNet(architecture=
    "smallnorb")` with its defaults, from the authors' released file.

    Every name and shape is checked before any weight is set: the
    generator's weights are skipped when the model has no decoder.

    Args:
        model: the model.
        path: `bin/efficient_capsnet_SMALLNORB.h5` of EscVM/Efficient-CapsNet
            (commit 4b337f5), read with `keras_h5.read_weights`.

    Raises:
        ValueError: a key missing from the file or unexpected, a weight the
            model lacks (a router without priors), or a shape that is not
            the model's.
    """
    weights = smallnorb_weights(read_weights(path))
    theirs = {ours: key for key, _, ours in SMALLNORB_LAYOUT}
    variables = model_variables(model)
    updates = []
    for key, value in weights.items():
        if key.startswith("decoder/") and not model.reconstruction:
            continue
        variable = variables.get(key)
        if variable is None:
            raise ValueError(
                f"The model has no weight {key!r} for the authors' {theirs[key]!r} of "
                f"shape {value.shape} (is its router SelfAttentionRouting(use_priors=True)?)"
            )
        if tuple(variable.shape) != value.shape:
            raise ValueError(
                f"The authors' {theirs[key]!r}, for {key!r}, has shape {value.shape} "
                f"(in our layout); the model's has shape {tuple(variable.shape)} (the "
                "authors' model takes 48x48x2 images and 5 classes). Received: "
                f"input_shape={model.image_shape}, num_classes={model.num_classes}"
            )
        updates.append((variable, value))
    for variable, value in updates:
        variable.assign(value.astype(variable.dtype))


load_into = renamed_function(load_authors_weights, "load_into", __name__)
