"""Readers of other implementations' weight files, and their name maps.

They never run code from a file and import no backend. The readers return
NumPy arrays:

- `torch_zip.read_state_dict(path)`: a PyTorch state dict (`.pt`), zip or
  legacy layout, without torch.
- `keras_h5.read_weights(path)`: a Keras 2 HDF5 weights file (`.h5`).

The maps of authors' names and layouts into ours check every name and
shape, and each has one entry point, `<source>.load_authors_weights(target,
path)`, that reads the authors' file and sets a ready model's (or a
layer's) variables through its public layers (the models'
`load_authors_weights` call them; this package imports no model):

- `escvm`: Mazzia et al.'s released smallNORB Efficient-CapsNet, for
  `EfficientCapsNet(architecture="smallnorb")`.
- `heinsen`: Heinsen's released smallNORB classifier, for `HeinsenCapsNet`
  (`load_state_dict(model, state_dict)` for a state dict already read).
- `point_capsnet`: Zhao et al.'s 3D point capsule network, for
  `models.PointCapsNet`.
- `vector_routing`: Heinsen's `EfficientVectorRouting` (2022), for
  `layers.VectorRouting` (`prefix=` for a routing inside a larger module).

0.2.0's `escvm.load_into(model, path)` and `heinsen.load_into(model,
state_dict)` still work, with a `DeprecationWarning`.

And this library's own older files: `keras_v0_1.upgrade(path, new_path)`
rewrites a `.keras` file saved by keras-capsules 0.1.0 so that it loads.
"""

from keras_capsules.convert import (
    escvm,
    heinsen,
    keras_h5,
    keras_v0_1,
    point_capsnet,
    torch_zip,
    vector_routing,
)
