"""The Keras 2 HDF5 weights reader."""

import h5py
import numpy as np
import pytest

from keras_capsules.convert.keras_h5 import read_weights

KERNEL = np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4)
BIAS = np.ones(4, np.float32)


def keras2_file(path, listed=("conv/kernel:0", "conv/bias:0")):
    """The layout `save_weights` of Keras 2 writes: an inner model `Net`."""
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = np.array([b"input_1", b"Net"])
        f.create_group("input_1").attrs["weight_names"] = np.array([], np.float64)
        net = f.create_group("Net")
        net.attrs["weight_names"] = np.array([n.encode() for n in listed])
        net.create_dataset("conv/kernel:0", data=KERNEL)
        net.create_dataset("conv/bias:0", data=BIAS)
    return path


def test_reads_nested_layers_in_order(tmp_path):
    weights = read_weights(keras2_file(tmp_path / "w.h5"))
    assert list(weights) == ["Net/conv/kernel:0", "Net/conv/bias:0"]
    np.testing.assert_array_equal(weights["Net/conv/kernel:0"], KERNEL)


def test_listed_weight_missing_is_a_value_error(tmp_path):
    path = keras2_file(tmp_path / "w.h5", listed=("conv/kernel:0", "conv/gamma:0"))
    with pytest.raises(ValueError, match="Net/conv/gamma:0"):
        read_weights(path)


def test_not_keras_or_not_hdf5_is_a_value_error(tmp_path):
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=BIAS)
    with pytest.raises(ValueError, match="layer_names"):
        read_weights(path)
    path.write_bytes(b"not hdf5 at all")
    with pytest.raises(ValueError, match="not a readable HDF5"):
        read_weights(path)


def test_truncated_file_is_a_value_error(tmp_path):
    path = keras2_file(tmp_path / "w.h5")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="w.h5"):
        read_weights(path)
