"""Output files written whole or not at all.

A run killed while it saves (preempted, out of memory) must not leave a
half-written `model.keras`, `metrics.json` or figure in place of the last
good one. Each writer here writes a temporary file next to the target and
renames it over the target (`os.replace`: atomic on POSIX and Windows
within one file system), so the target is always either the old file or
the new one. A writer that fails removes its temporary file; a killed
process can leave one behind (`.NAME.partial-PID.EXT`), never a broken
target.
"""

import contextlib
import json
import os


@contextlib.contextmanager
def replacing(path):
    """Yields a temporary path beside `path` (same extension, so writers
    that read the format from it still do); renames it to `path` when the
    block ends without an error, else removes it."""
    folder, name = os.path.split(os.path.abspath(path))
    stem, extension = os.path.splitext(name)
    temporary = os.path.join(folder, f".{stem}.partial-{os.getpid()}{extension}")
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def write_json(path, value):
    with replacing(path) as temporary:
        with open(temporary, "w") as f:
            json.dump(value, f, indent=2)
            f.flush()
            os.fsync(f.fileno())


def save_model(model, path):
    """`model.save(path)` (a `.keras` file), atomically."""
    with replacing(path) as temporary:
        model.save(temporary)


def save_figure(fig, path, **kwargs):
    with replacing(path) as temporary:
        fig.savefig(temporary, **kwargs)
