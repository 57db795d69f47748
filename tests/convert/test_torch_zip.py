"""The restricted PyTorch reader: both layouts, strides, and refusals."""

import pickle

import numpy as np
import pytest

from keras_capsules.convert.torch_zip import read_state_dict
from tests.convert import torch_files

ARRAYS = {
    "conv.weight": np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2),
    "bn.running_var": np.array([0.5, 2.0], np.float64),
    "half": np.array([1.5, -2.0], np.float16),
    "bn.num_batches_tracked": np.array(7, np.int64),
}
WRITERS = {"zip": torch_files.zip_file, "legacy": torch_files.legacy_file}


@pytest.mark.parametrize("layout", sorted(WRITERS))
def test_reads_both_layouts(tmp_path, layout):
    state = read_state_dict(WRITERS[layout](tmp_path / "w.pt", ARRAYS))
    assert list(state) == list(ARRAYS)
    for name, array in ARRAYS.items():
        assert state[name].dtype == array.dtype and state[name].shape == array.shape
        np.testing.assert_array_equal(state[name], array)


@pytest.mark.parametrize("layout", sorted(WRITERS))
def test_strided_tensor_is_read_as_torch_lays_it_out(tmp_path, layout):
    # A transposed (2, 3) tensor: torch saves size (3, 2) and stride (1, 3).
    storage = np.arange(6, dtype=np.float32)
    items = torch_files.value("t") + torch_files.tensor(
        0, storage, layout == "legacy", size=(3, 2), stride=(1, 3)
    )
    main = torch_files.state_pickle({}, layout == "legacy", items=items)
    state = read_state_dict(WRITERS[layout](tmp_path / "w.pt", {"t": storage}, main=main))
    np.testing.assert_array_equal(state["t"], storage.reshape(2, 3).T)


def test_matches_torch_save(tmp_path):
    torch = pytest.importorskip("torch")
    state = {
        "w": torch.arange(12.0).reshape(3, 4).t(),
        "p": torch.nn.Parameter(torch.ones(2, dtype=torch.float16)),
        "b": torch.tensor([1.0, -3.0], dtype=torch.bfloat16),
        "n": torch.tensor(5),
    }
    for legacy in (False, True):
        path = tmp_path / f"torch_{legacy}.pt"
        torch.save(state, path, _use_new_zipfile_serialization=not legacy)
        read = read_state_dict(path)
        for name, tensor in state.items():
            expected = tensor.detach().float() if name == "b" else tensor.detach()
            np.testing.assert_array_equal(read[name], expected.numpy())


HOSTILE = {
    "os.system": torch_files.global_("os", "system") + torch_files.value(("touch {}",)),
    "builtins.eval": torch_files.global_("builtins", "eval") + torch_files.value(("1",)),
    "subprocess": torch_files.global_("subprocess", "call") + torch_files.value((["true"],)),
}


@pytest.mark.parametrize("layout", sorted(WRITERS))
@pytest.mark.parametrize("target", sorted(HOSTILE))
def test_refuses_any_other_global_without_calling_it(tmp_path, layout, target):
    marker = tmp_path / "ran"
    call = HOSTILE[target].replace(b"{}", str(marker).encode()) + pickle.REDUCE
    main = torch_files.state_pickle({}, layout == "legacy", items=torch_files.value("x") + call)
    path = WRITERS[layout](tmp_path / "evil.pt", {}, main=main)
    with pytest.raises(ValueError, match=target.split(".")[0]):
        read_state_dict(path)
    assert not marker.exists()


@pytest.mark.parametrize("layout", sorted(WRITERS))
def test_truncated_file_is_a_value_error(tmp_path, layout):
    path = WRITERS[layout](tmp_path / "w.pt", ARRAYS)
    data = path.read_bytes()
    for cut in (len(data) // 3, len(data) - 5):
        path.write_bytes(data[:cut])
        with pytest.raises(ValueError, match="w.pt"):
            read_state_dict(path)


def test_tensor_beyond_its_storage_is_a_value_error(tmp_path):
    storage = np.zeros(4, np.float32)
    items = torch_files.value("t") + torch_files.tensor(0, storage, False, size=(3, 2))
    main = torch_files.state_pickle({}, False, items=items)
    with pytest.raises(ValueError, match="reads element 5 of a storage of 4"):
        read_state_dict(torch_files.zip_file(tmp_path / "w.pt", {"t": storage}, main=main))


def test_not_a_torch_file_is_a_value_error(tmp_path):
    path = tmp_path / "noise.pt"
    path.write_bytes(np.random.default_rng(0).bytes(64))
    with pytest.raises(ValueError, match="noise.pt"):
        read_state_dict(path)
    path.write_bytes(pickle.dumps({"a": 1}, protocol=2))
    with pytest.raises(ValueError, match="legacy magic number"):
        read_state_dict(path)


def test_something_else_than_a_state_dict_is_a_value_error(tmp_path):
    path = tmp_path / "list.pt"
    with __import__("zipfile").ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps([1, 2], protocol=2))
    with pytest.raises(ValueError, match="not a state dict"):
        read_state_dict(path)
