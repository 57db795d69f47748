"""Readers of other implementations' weight files.

They read files and return NumPy arrays; they import no backend, build no
model and never run code from a file. The ready models map the arrays onto
their weights (`load_authors_weights`).

- `torch_zip.read_state_dict(path)`: a PyTorch state dict (`.pt`), zip or
  legacy layout, without torch.
- `keras_h5.read_weights(path)`: a Keras 2 HDF5 weights file (`.h5`).

The maps of authors' names and layouts into ours (NumPy only, too):

- `escvm.smallnorb_weights(weights)`: Mazzia et al.'s released smallNORB
  Efficient-CapsNet, for `EfficientCapsNet(architecture="smallnorb")`.
- `heinsen.heinsen_weights(state_dict)`: Heinsen's released smallNORB
  classifier, for `HeinsenCapsNet`.
"""

from keras_capsules.convert import escvm, heinsen, keras_h5, torch_zip
