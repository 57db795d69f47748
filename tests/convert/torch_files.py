"""Writers of PyTorch state-dict files for the tests, made without torch.

A pickle is a stack program, so a file is assembled from opcodes: the
globals a state dict names (`torch._utils._rebuild_tensor_v2`,
`torch.FloatStorage`, ...) are written as GLOBAL opcodes, the plain values
as pickled fragments.
"""

import io
import pickle
import struct
import zipfile

import numpy as np

_STORAGE_TYPES = {
    np.dtype(np.float32): "FloatStorage",
    np.dtype(np.float64): "DoubleStorage",
    np.dtype(np.float16): "HalfStorage",
    np.dtype(np.int64): "LongStorage",
}


def value(obj):
    """The opcodes that push `obj` (a plain Python value)."""
    return pickle.dumps(obj, protocol=2)[2:-1]  # without PROTO and STOP


def global_(module, name):
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def storage_reference(key, array, legacy):
    count = array.size
    fields = value("storage") + global_("torch", _STORAGE_TYPES[array.dtype])
    fields += value(str(key)) + value("cpu") + value(count)
    if legacy:
        fields += value(None)  # no view
    return pickle.MARK + fields + pickle.TUPLE + pickle.BINPERSID


def tensor(key, array, legacy, size=None, stride=None, offset=0):
    size = tuple(array.shape) if size is None else size
    if stride is None:
        stride = tuple(int(s) for s in np.cumprod((1, *size[:0:-1]))[::-1]) if size else ()
    hooks = global_("collections", "OrderedDict") + pickle.EMPTY_TUPLE + pickle.REDUCE
    args = storage_reference(key, array, legacy) + value(offset) + value(tuple(size))
    args += value(tuple(stride)) + pickle.NEWFALSE + hooks
    return (
        global_("torch._utils", "_rebuild_tensor_v2")
        + pickle.MARK
        + args
        + pickle.TUPLE
        + (pickle.REDUCE)
    )


def state_pickle(arrays, legacy, items=None):
    """The main pickle: an OrderedDict of tensors (`items`: raw opcodes instead)."""
    if items is None:
        items = b"".join(
            value(name) + tensor(i, array, legacy) for i, (name, array) in enumerate(arrays.items())
        )
    body = global_("collections", "OrderedDict") + pickle.EMPTY_TUPLE + pickle.REDUCE
    body += pickle.MARK + items + pickle.SETITEMS
    return b"\x80\x02" + body + pickle.STOP


def zip_file(path, arrays, main=None):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", main or state_pickle(arrays, legacy=False))
        for i, array in enumerate(arrays.values()):
            archive.writestr(f"archive/data/{i}", np.ascontiguousarray(array).tobytes())
        archive.writestr("archive/version", "3\n")
    return path


def legacy_file(path, arrays, main=None):
    out = io.BytesIO()
    out.write(pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2))
    out.write(pickle.dumps(1001, protocol=2))
    out.write(pickle.dumps({"protocol_version": 1001, "little_endian": True}, protocol=2))
    out.write(main or state_pickle(arrays, legacy=True))
    out.write(pickle.dumps([str(i) for i in range(len(arrays))], protocol=2))
    for array in arrays.values():
        out.write(struct.pack("<q", array.size))
        out.write(np.ascontiguousarray(array).tobytes())
    path.write_bytes(out.getvalue())
    return path
