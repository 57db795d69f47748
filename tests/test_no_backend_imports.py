"""Library code uses keras.ops only: no backend module is imported.

The exceptions import a backend inside their functions only, so `import
keras_capsules` loads none: `keras_capsules/distribute/`, the launcher of
multi-process training, which drives the backend's own engine;
`keras_capsules/models/xla.py`, which asks TensorFlow (on the TensorFlow
backend only) whether `compile` runs under a `tf.distribute` strategy; and
`keras_capsules/routing/custom_backward.py`, which asks torch (on the torch
backend only) whether it traces a model for export; and
`keras_capsules/callbacks.py`, whose `CapsuleMonitor(log_dir=)` writes
TensorBoard images with `tf.summary`, as Keras's TensorBoard callback does.
"""

import ast
import pathlib

BACKEND_MODULES = {"tensorflow", "torch", "jax", "jaxlib"}
LIBRARY = pathlib.Path(__file__).resolve().parent.parent / "keras_capsules"
LAZY_BACKEND_IMPORTS = {"models/xla.py", "routing/custom_backward.py", "callbacks.py"}
LAZY_BACKEND_PACKAGES = {"distribute"}


def lazy(relative):
    return str(relative) in LAZY_BACKEND_IMPORTS or relative.parts[0] in LAZY_BACKEND_PACKAGES


def backend_imports(nodes):
    for node in nodes:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            if name.split(".")[0] in BACKEND_MODULES:
                yield node.lineno, name


def module_level(tree):
    """Nodes outside functions (also under module-level if/try/with)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def test_library_imports_no_backend():
    offenders = []
    for path in sorted(LIBRARY.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        relative = path.relative_to(LIBRARY)
        nodes = module_level(tree) if lazy(relative) else ast.walk(tree)
        offenders += [
            f"{path.relative_to(LIBRARY.parent)}:{line} {name}"
            for line, name in backend_imports(nodes)
        ]
    assert LIBRARY.is_dir() and any(LIBRARY.rglob("*.py"))
    assert not offenders, offenders


def test_distribute_imports_its_backend_lazily():
    trees = [ast.parse(p.read_text(), str(p)) for p in (LIBRARY / "distribute").rglob("*.py")]
    assert any(list(backend_imports(ast.walk(t))) for t in trees), "no lazy import left to allow"
    assert not any(list(backend_imports(module_level(t))) for t in trees)
