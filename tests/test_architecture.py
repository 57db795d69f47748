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
