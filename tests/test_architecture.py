"""The import levels of `docs/architecture.md` hold: no module imports a
module of a higher level, and no import cycle exists.

The levels are read from the page itself (its "Levels" table), so the page
and the code cannot drift apart. Imports are read from the source (AST),
those inside functions included: an import deferred to call time is still
a dependency.
"""

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "keras_capsules"
PAGE = ROOT / "docs" / "architecture.md"


def _levels():
    """`{top-level module or subpackage name: level}` from the page's table."""
    text = PAGE.read_text()
    section = text[text.index("## Levels") :]
    block = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    levels = {}
    for line in block.splitlines():
        match = re.match(r"\s*(\d+)\s+(.+)", line)
        if match:
            for name in re.split(r"[,\s]+", match.group(2).split("#")[0].strip()):
                if name:
                    levels[name.rstrip("/").removesuffix(".py")] = int(match.group(1))
    return levels


def _module_name(path):
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules():
    return {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _resolve(name, modules):
    """The module an import of `name` loads: itself, else its package."""
    while name not in modules:
        name = name.rpartition(".")[0]
    return name


def _imports(path, modules):
    """The keras_capsules modules that the module at `path` imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from package import module` imports that module.
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(_resolve(n, modules) for n in names if n.startswith("keras_capsules"))
    return found


def _level(module, levels):
    parts = module.split(".")
    if len(parts) == 1:
        return max(levels.values()) + 1  # the package's own __init__ imports everything
    return levels[parts[1]]


def test_every_module_has_a_level():
    levels = _levels()
    tops = {module.split(".")[1] for module in _modules() if "." in module}
    assert tops <= set(levels), f"modules missing from docs/architecture.md: {tops - set(levels)}"


def test_no_module_imports_a_higher_level():
    levels, modules = _levels(), _modules()
    upward = [
        f"{module} (level {_level(module, levels)}) imports {target} "
        f"(level {_level(target, levels)})"
        for module, path in modules.items()
        for target in _imports(path, modules)
        if _level(target, levels) > _level(module, levels)
    ]
    assert not upward, "\n".join(upward)


def test_no_import_cycle():
    modules = _modules()
    graph = {module: _imports(path, modules) - {module} for module, path in modules.items()}
    state, stack, cycles = {}, [], []

    def visit(module):  # depth-first search; a grey node met again closes a cycle
        state[module] = "grey"
        stack.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "grey":
                cycles.append(stack[stack.index(target) :] + [target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[module] = "black"

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert not cycles, "\n".join(" -> ".join(cycle) for cycle in cycles)


# One public class per module, named after it (keras-hub's style guide): a
# module of these packages defines at most one class whose name does not
# start with `_`, and the module is that class's name in snake case
# (`ConvMatrixCapsule` in `conv_matrix_capsule.py`; digits as in
# `conv_capsule_2d.py` or `auto_conv2d.py`). Helpers that several classes
# share go in a private module (`layers/_matrix_pose.py`), a helper class
# is private (`_Name`). A router's module is named for its short name
# (`routing.get("dynamic")`), the class adding `Routing`: `DynamicRouting`
# in `routing/dynamic.py`. Modules without a class (`routing/registry.py`,
# the backward passes, the presets' tables) pass.
ONE_CLASS_PACKAGES = ("layers", "routing", "models")
# Modules whose one public class is not named after the module, and why.
CLASS_NAME_EXCEPTIONS = {
    # The router contract. `routing.base` is the routers' documented base
    # module (`routing.base.describe`, `check_votes_shape`), imported under
    # that name by every router and by the routed layers.
    "keras_capsules.routing.base": "Router",
    # The routed layers' base, named as a base (`layers.RoutedCapsule`);
    # docs/architecture.md and CONTRIBUTING.md name its module, the home of
    # `split_capsule_inputs`.
    "keras_capsules.layers.base_routed_capsule": "RoutedCapsule",
    # The preset registry (`from_preset`, `list_presets`,
    # `register_presets`); `Preset` is its record, not what it is named for.
    "keras_capsules.models.presets": "Preset",
}


def _public_classes(path):
    """The names of the classes defined at the top of the module at `path`
    whose names do not start with `_`."""
    tree = ast.parse(path.read_text())
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_")
    ]


def _named_after(class_name, path):
    stem = path.stem.replace("_", "")
    names = {stem, stem + "routing"} if path.parent.name == "routing" else {stem}
    return class_name.lower() in names


def test_one_public_class_per_module_named_after_it():
    wrong = []
    for package in ONE_CLASS_PACKAGES:
        for path in sorted((PACKAGE / package).rglob("*.py")):
            module, classes = _module_name(path), _public_classes(path)
            if len(classes) > 1:
                wrong.append(f"{module} defines {len(classes)} public classes: {classes}")
            elif classes and not (
                _named_after(classes[0], path) or CLASS_NAME_EXCEPTIONS.get(module) == classes[0]
            ):
                wrong.append(f"{module} defines {classes[0]}, not named after it")
    assert not wrong, "\n".join(wrong)


def test_the_one_class_exceptions_are_still_needed():
    for module, class_name in CLASS_NAME_EXCEPTIONS.items():
        path = ROOT.joinpath(*module.split(".")).with_suffix(".py")
        assert _public_classes(path) == [class_name], module
        assert not _named_after(class_name, path), module
