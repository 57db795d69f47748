"""A reader of PyTorch weight files that never runs code from the file.

`torch.save` writes a pickle, and unpickling an arbitrary pickle can call
any importable function (`os.system`, `builtins.eval`, ...). A state dict
needs only a few of them: `collections.OrderedDict`, the tensor rebuild
functions of `torch._utils` and the typed storage classes. This reader's
unpickler resolves exactly those, to NumPy stand-ins of its own, and
refuses every other global with a `ValueError` before anything is called.
It needs neither torch nor any backend.

Both layouts of `torch.save` are read:

- the zip archive of torch >= 1.6: `<name>/data.pkl` and one entry
  `<name>/data/<key>` of raw bytes per storage;
- the legacy stream of older torch: the magic number, the protocol version
  and the system info (three small pickles), the main pickle, the pickled
  list of storage keys, then for each key an int64 element count and the
  storage's raw bytes.
"""

import collections
import io
import pickle
import zipfile

import numpy as np

# torch's typed storages -> (NumPy dtype, bytes per element).
_STORAGES = {
    "DoubleStorage": np.float64,
    "FloatStorage": np.float32,
    "HalfStorage": np.float16,
    "BFloat16Storage": "bfloat16",
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "ShortStorage": np.int16,
    "CharStorage": np.int8,
    "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001


class _StorageType:
    """What `torch.<Type>Storage` resolves to: a name and a dtype, nothing callable."""

    def __init__(self, name):
        self.name = name
        self.bfloat16 = _STORAGES[name] == "bfloat16"
        self.dtype = np.dtype(np.uint16 if self.bfloat16 else _STORAGES[name])

    def from_bytes(self, data, count, where):
        if len(data) < count * self.dtype.itemsize:
            raise ValueError(
                f"{where}: storage data is truncated: {self.name} of {count} elements needs "
                f"{count * self.dtype.itemsize} bytes. Received: {len(data)} bytes"
            )
        array = np.frombuffer(data, self.dtype, count).astype(self.dtype.newbyteorder("="))
        if self.bfloat16:  # bfloat16 is the high half of a float32.
            array = (array.astype(np.uint32) << 16).view(np.float32)
        return array


def _rebuild_tensor(storage, offset, size, stride, *unused):
    """`torch._utils._rebuild_tensor_v2`: a strided view of a storage, copied."""
    if not isinstance(storage, np.ndarray):
        raise ValueError(f"A tensor's storage must be a storage reference. Received: {storage!r}")
    size, stride = tuple(size), tuple(stride)
    if (
        not isinstance(offset, int)
        or len(size) != len(stride)
        or not all(isinstance(n, int) and n >= 0 for n in size + stride)
        or offset < 0
    ):
        raise ValueError(
            "A tensor's offset, size and stride must be non-negative integers, size and "
            f"stride of one length. Received: offset={offset!r}, size={size!r}, stride={stride!r}"
        )
    if 0 in size:
        return np.zeros(size, storage.dtype)
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if last >= storage.size:
        raise ValueError(
            f"A tensor of size {size} and stride {stride} at offset {offset} reads element "
            f"{last} of a storage of {storage.size} elements."
        )
    strides = tuple(s * storage.itemsize for s in stride)
    view = np.lib.stride_tricks.as_strided(storage[offset:], size, strides, writeable=False)
    return np.array(view)


def _rebuild_parameter(data, *unused):
    """`torch._utils._rebuild_parameter`: a parameter is its tensor here."""
    return data


_GLOBALS = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    **{("torch", name): _StorageType(name) for name in _STORAGES},
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, where, load_storage):
        super().__init__(file)
        self.where = where
        self.load_storage = load_storage

    def find_class(self, module, name):
        if (module, name) not in _GLOBALS:
            raise ValueError(
                f"{self.where} refers to `{module}.{name}`, which a PyTorch state dict does "
                "not need; it is not loaded (a pickle can run any function it names). Only "
                "tensors in (ordered) dicts are read."
            )
        return _GLOBALS[(module, name)]

    def persistent_load(self, pid):
        if (
            not isinstance(pid, tuple)
            or len(pid) < 5
            or pid[0] != "storage"
            or not isinstance(pid[1], _StorageType)
            or not isinstance(pid[4], int)
        ):
            raise ValueError(f"{self.where}: not a storage reference. Received: {pid!r}")
        return self.load_storage(pid)


def _unpickle(file, where, load_storage=None, unpickler=_Unpickler):
    def no_storage(pid):
        raise ValueError(f"{where}: a storage reference where none may be. Received: {pid!r}")

    try:
        return unpickler(file, where, load_storage or no_storage).load()
    except ValueError:
        raise
    except Exception as error:  # a truncated or garbled pickle: the file is broken
        raise ValueError(f"{where} is not a readable PyTorch file ({error!r}).") from None


def _read_zip(archive, path):
    names = [n for n in archive.namelist() if n.endswith("/data.pkl")]
    if len(names) != 1:
        raise ValueError(
            f"{path}: a PyTorch zip archive has one `<name>/data.pkl`. Received the entries "
            f"{archive.namelist()[:10]}"
        )
    root = names[0][: -len("data.pkl")]
    storages = {}

    def load_storage(pid):
        _, storage_type, key, _, count = pid[:5]
        if key not in storages:
            entry = f"{root}data/{key}"
            try:
                data = archive.read(entry)
            except KeyError:
                raise ValueError(f"{path}: the storage entry {entry!r} is missing.") from None
            storages[key] = storage_type.from_bytes(data, count, f"{path}:{entry}")
        return storages[key]

    return _unpickle(io.BytesIO(archive.read(names[0])), path, load_storage)


class _LegacyStorage:
    """A legacy storage reference: its bytes follow the main pickle."""

    def __init__(self, storage_type, key, count, view):
        self.storage_type, self.key, self.count, self.view = storage_type, key, count, view


class _LegacyTensor:
    def __init__(self, storage, args):
        self.storage, self.args = storage, args


class _LegacyUnpickler(_Unpickler):
    """Defers tensors until their storages are read."""

    def find_class(self, module, name):
        found = super().find_class(module, name)
        if found is _rebuild_tensor:
            return lambda storage, *args: _LegacyTensor(storage, args)
        return found


def _read_legacy(file, path):
    if _unpickle(file, path) != _LEGACY_MAGIC:
        raise ValueError(
            f"{path} is neither a PyTorch zip archive nor a legacy PyTorch file (its first "
            "pickle is not the legacy magic number)."
        )
    protocol, system = _unpickle(file, path), _unpickle(file, path)
    if protocol != _LEGACY_PROTOCOL:
        raise ValueError(
            f"{path}: unknown legacy PyTorch protocol. Expected {_LEGACY_PROTOCOL}. "
            f"Received: {protocol!r}"
        )
    if isinstance(system, dict) and system.get("little_endian") is False:
        raise ValueError(f"{path}: big-endian PyTorch files are not read.")
    references = {}

    def load_storage(pid):
        storage = _LegacyStorage(*pid[1:3], pid[4], pid[5] if len(pid) > 5 else None)
        references.setdefault(storage.key, storage)
        return storage

    main = _unpickle(file, path, load_storage, _LegacyUnpickler)
    keys = _unpickle(file, path)
    if not isinstance(keys, list) or set(keys) != set(references):
        raise ValueError(f"{path}: the list of storage keys does not match the tensors.")
    storages = {}
    for key in keys:
        reference = references[key]
        count = int(np.frombuffer(_read_exactly(file, 8, path), "<i8")[0])
        if count < reference.count:
            raise ValueError(
                f"{path}: storage {key!r} holds {count} elements; its tensors need "
                f"{reference.count}."
            )
        data = _read_exactly(file, count * reference.storage_type.dtype.itemsize, path)
        storages[key] = reference.storage_type.from_bytes(data, count, f"{path}: storage {key!r}")
    return _resolve(main, storages, path)


def _read_exactly(file, count, path):
    data = file.read(count)
    if len(data) != count:
        raise ValueError(f"{path} is truncated: {count} bytes expected, {len(data)} left.")
    return data


def _resolve(value, storages, path):
    """The legacy pickle's value with its deferred tensors built."""
    if isinstance(value, _LegacyTensor):
        storage = value.storage
        if not isinstance(storage, _LegacyStorage):
            raise ValueError(f"{path}: a tensor without a storage reference.")
        array = storages[storage.key]
        if storage.view is not None:
            _, start, count = storage.view
            array = array[start : start + count]
        return _rebuild_tensor(array, *value.args)
    if isinstance(value, dict):
        return collections.OrderedDict(
            (key, _resolve(item, storages, path)) for key, item in value.items()
        )
    return value


def read_state_dict(path):
    """The tensors of a PyTorch state dict file, as NumPy arrays.

    Reads what `torch.save(model.state_dict(), path)` writes, in the zip
    layout of torch >= 1.6 or the legacy layout before it, without torch
    and without running code from the file (see the module docstring).

    Args:
        path: the `.pt`/`.pth` file.

    Returns:
        a dict `name -> numpy.ndarray`, in the file's order (bfloat16
        tensors as float32).

    Raises:
        ValueError: the file is not a PyTorch file, is truncated or
            corrupt, names a global a state dict does not need, or holds
            something other than a flat mapping of names to tensors.

    Example:

    >>> state = keras_capsules.convert.torch_zip.read_state_dict(path)  # doctest: +SKIP
    >>> state["conv.weight"].shape  # doctest: +SKIP
    (64, 4, 3, 3)
    """
    path = str(path)
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                state = _read_zip(archive, path)
        else:
            with open(path, "rb") as file:
                state = _read_legacy(file, path)
    except zipfile.BadZipFile as error:
        raise ValueError(f"{path} is a damaged zip archive ({error}).") from None
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, np.ndarray) for k, v in state.items()
    ):
        raise ValueError(
            f"{path} is not a state dict: expected a mapping of names to tensors. Received: "
            f"{type(state).__name__}"
        )
    return dict(state)
