"""docs/api.md against the package: every public class of the top level is
named there (as `layers.Capsule`, `models.CapsNet`, ...), and every
`module.Name` in its tables exists."""

import importlib
import pathlib
import re

import keras_capsules as kc

API = pathlib.Path(__file__).resolve().parent.parent / "docs" / "api.md"
MODULES = ("layers", "routing", "losses", "metrics", "models", "callbacks")
# `module.Name` in backticks, at the start of a table row's first cell or
# after a comma in it.
NAMED = re.compile(r"`(\w+)\.(\w+)`")


def _first_cells():
    for line in API.read_text().splitlines():
        if line.startswith("| `"):
            yield line.split("|")[1]


def documented():
    return {m.groups() for cell in _first_cells() for m in NAMED.finditer(cell)}


def test_every_public_class_is_documented():
    names = {name for module, name in documented() if module in MODULES}
    public = {n for n in dir(kc) if isinstance(getattr(kc, n), type) and not n.startswith("_")}
    assert public - names == set(), sorted(public - names)


def test_every_documented_name_exists():
    missing = [
        f"{module}.{name}"
        for module, name in documented()
        if not hasattr(importlib.import_module(f"keras_capsules.{module}"), name)
    ]
    assert not missing, missing
