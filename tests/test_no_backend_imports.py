"""Library code uses keras.ops only: no backend module is imported."""

import ast
import pathlib

BACKEND_MODULES = {"tensorflow", "torch", "jax", "jaxlib"}
LIBRARY = pathlib.Path(__file__).resolve().parent.parent / "keras_capsules"


def test_library_imports_no_backend():
    offenders = []
    for path in sorted(LIBRARY.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.split(".")[0] in BACKEND_MODULES:
                    offenders.append(f"{path.relative_to(LIBRARY.parent)}:{node.lineno} {name}")
    assert LIBRARY.is_dir() and any(LIBRARY.rglob("*.py"))
    assert not offenders, offenders
