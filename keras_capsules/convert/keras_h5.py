"""A reader of Keras 2 HDF5 weights files (`model.save_weights("x.h5")`).

Such a file lists its layers in the root attribute `layer_names` and, for
each layer group, its weights in the attribute `weight_names`; a layer
that is itself a model keeps its inner layers' names in those
(`"conv2d_4/kernel:0"`). A whole-model `.h5` keeps the same under the
group `model_weights`. HDF5 holds arrays and attributes only, so reading
it runs no code; this reader also checks that every listed weight is
there and numeric.
"""

import h5py
import numpy as np


def _names(attributes, key, where):
    if key not in attributes:
        raise ValueError(f"{where} has no `{key}` attribute: not a Keras 2 weights file.")
    names = attributes[key]
    if len(names) == 0:
        return []
    if not all(isinstance(n, (bytes, np.bytes_, str)) for n in names):
        raise ValueError(f"{where}: `{key}` must list names. Received: {names!r}")
    return [n.decode("utf8") if isinstance(n, (bytes, np.bytes_)) else str(n) for n in names]


def read_weights(path):
    """The weights of a Keras 2 HDF5 weights file, as NumPy arrays.

    Args:
        path: the `.h5` file (`save_weights` or a whole-model `save`).

    Returns:
        a dict `"<layer>/<weight name>" -> numpy.ndarray` in the file's
        order, e.g. `"CapsNet/conv2d_4/kernel:0"` for the layer `conv2d_4`
        of an inner model `CapsNet`.

    Raises:
        ValueError: the file is not HDF5, is truncated, lacks the Keras 2
            layout, or lists a weight it does not hold or holds a
            non-numeric one.

    Example:

    >>> weights = keras_capsules.convert.keras_h5.read_weights(path)  # doctest: +SKIP
    >>> weights["CapsNet/digit_caps/W:0"].shape  # doctest: +SKIP
    (5, 16, 8, 16)
    """
    path = str(path)
    try:
        file = h5py.File(path, "r")
    except (OSError, ValueError) as error:
        raise ValueError(f"{path} is not a readable HDF5 file ({error}).") from None
    with file:
        root = file["model_weights"] if "model_weights" in file else file
        weights = {}
        try:
            for layer in _names(root.attrs, "layer_names", path):
                if layer not in root:
                    raise ValueError(f"{path}: the listed layer {layer!r} is missing.")
                group = root[layer]
                for name in _names(group.attrs, "weight_names", f"{path}:{layer}"):
                    key = f"{layer}/{name}"
                    if name not in group or not isinstance(group[name], h5py.Dataset):
                        raise ValueError(f"{path}: the listed weight {key!r} is missing.")
                    array = np.asarray(group[name][()])
                    if array.dtype.kind not in "fiub":
                        raise ValueError(
                            f"{path}: the weight {key!r} is not numeric. Received: "
                            f"dtype {array.dtype}"
                        )
                    weights[key] = array
        except (OSError, KeyError, RuntimeError) as error:  # truncated or damaged data
            raise ValueError(f"{path} is damaged: {error}") from None
    return weights
