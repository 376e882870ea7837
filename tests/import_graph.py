"""The package's import graph read from its source (``ast``), for tests/test_layout.py: every
module's imports of the package's modules, function-level ones included, and
``importlib.import_module`` of a name built on a package's (``f"{__name__}.{name}"`` in a
package's ``__init__``, ``"deepnet_jax.configs." + name``) as an import of each module of that
package; the subpackages' graph; one circle of a graph."""

from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "deepnet_jax")


def find_modules() -> dict[str, str]:
    """dotted module name -> path, for every module of the package."""
    found = {}
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                found[dotted_name(path)] = path
    return found


def dotted_name(path: str) -> str:
    """The module name of a file of the package (a package's ``__init__`` is the package)."""
    return os.path.relpath(path[:-3], ROOT).replace(os.sep, ".").removesuffix(".__init__")


def read_imports(path: str, modules: dict[str, str]) -> set[str]:
    """The package modules ``path`` imports (a ``from pkg import name`` of a submodule counts
    as that submodule; a dynamic import: :func:`read_dynamic_imports`)."""
    out = set()
    with open(path) as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module in modules and node.level == 0:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.add(sub if sub in modules else node.module)
    return out | read_dynamic_imports(tree, dotted_name(path), modules)[0]


def read_dynamic_imports(
    tree: ast.AST, module: str, modules: dict[str, str]
) -> tuple[set[str], list[str]]:
    """``importlib.import_module(name)`` calls in ``tree`` (the source of ``module``): the
    package modules they may import — a fixed name itself, a name built on a package's
    (``f"{__name__}.{x}"`` in that package's ``__init__``, ``"deepnet_jax.configs." + x``) every
    module under that package — and the calls whose name the source does not fix
    (``module:line``)."""
    found, unread = set(), []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _is_import_module(node.func) and node.args):
            continue
        text, fixed = _leading_text(node.args[0], module)
        if fixed:
            found |= {text} & set(modules)
        elif text.endswith(".") and text[:-1] in modules:
            found |= {m for m in modules if m.startswith(text)}
        else:
            unread.append(f"{module}:{node.lineno}")
    return found, unread


def _is_import_module(func: ast.expr) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id == "import_module"
    )


def _parts(arg: ast.expr) -> list[ast.expr]:
    """The pieces a string expression joins: an f-string's values, a ``+``'s operands."""
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Add):
        return _parts(arg.left) + _parts(arg.right)
    if isinstance(arg, ast.JoinedStr):
        return [p.value if isinstance(p, ast.FormattedValue) else p for p in arg.values]
    return [arg]


def _leading_text(arg: ast.expr, module: str) -> tuple[str, bool]:
    """The fixed start of a module name built at run time (constant text, ``__name__`` read as
    ``module``, up to the first other piece) and whether that is the whole name."""
    text = ""
    for part in _parts(arg):
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            text += part.value
        elif isinstance(part, ast.Name) and part.id == "__name__":
            text += module
        else:
            return text, False
    return text, True


def module_graph() -> dict[str, set[str]]:
    """Each module of the package -> the package modules it imports (itself left out)."""
    modules = find_modules()
    return {m: read_imports(p, modules) - {m} for m, p in modules.items()}


def subpackage_of(module: str) -> str:
    """``module``'s subpackage (``deepnet_jax.configs.experiment_rows`` →
    ``configs``); the top-level
    surface is ``deepnet_jax``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def subpackage_graph(graph: dict[str, set[str]]) -> dict[str, dict[str, str]]:
    """The subpackages' imports of each other: ``{subpackage: {imported subpackage: one module
    import that makes the edge}}``."""
    out: dict[str, dict[str, str]] = {}
    for m, targets in sorted(graph.items()):
        edges = out.setdefault(subpackage_of(m), {})
        for t in sorted(targets):
            if subpackage_of(t) != subpackage_of(m):
                edges.setdefault(subpackage_of(t), f"{m} imports {t}")
    return out


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (a list of modules, first = last), or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(m: str, path: list[str]) -> list[str] | None:
        state[m] = 1
        for t in sorted(graph.get(m, ())):
            if state.get(t) == 1:
                return [*path[path.index(t) :], t]
            if t not in state and (found := visit(t, [*path, t])):
                return found
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m, [m])):
            return found
    return None
