"""The package's floors: every import runs down (or within a floor), no module circle, a light
top-level surface, and every ``python -m`` command the README and docs name answers ``--help``.

Imports are read from the source (``ast``), function-level ones included, so a lazy import that
runs back up counts too.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "deepnet_jax")

# floor of each subpackage: a module may import its own floor and those below
FLOORS = {
    "common": 0,
    "model": 1,
    "data": 1,
    "scale": 2,
    "decoding": 2,
    "runs": 2,
    "training": 3,
    "interop": 4,
    "cli": 5,
    "configs": 5,
    "experiments": 5,
}
SURFACE_FLOOR = 1.5  # deepnet_jax/__init__.py: the model and the ground floor only


def _modules() -> dict[str, str]:
    """dotted module name -> path, for every module of the package."""
    found = {}
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path[:-3], ROOT).replace(os.sep, ".")
                found[dotted.removesuffix(".__init__")] = path
    return found


def _imports(path: str, modules: dict[str, str]) -> set[str]:
    """The package modules ``path`` imports (a ``from pkg import name`` of a submodule counts
    as that submodule)."""
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
    return out


def _floor(module: str) -> float:
    parts = module.split(".")
    if len(parts) == 1:
        return SURFACE_FLOOR
    return FLOORS[parts[1]]


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imports(p, modules) - {m} for m, p in modules.items()}


def test_every_subpackage_has_a_floor():
    subpackages = {m.split(".")[1] for m in _modules() if m.count(".") >= 1}
    assert subpackages == set(FLOORS), subpackages ^ set(FLOORS)


def test_no_import_runs_back_up():
    upward = [
        f"{m} (floor {_floor(m)}) imports {t} (floor {_floor(t)})"
        for m, targets in sorted(_graph().items())
        for t in sorted(targets)
        if _floor(t) > _floor(m)
    ]
    assert not upward, "\n".join(upward)


UNSTABLE_JAX = ("jax._src", "jax.experimental.topologies")  # only through common.jax_compat


def _external_imports(path: str) -> set[str]:
    """Every module name ``path`` imports, ``from a import b`` counted as ``a`` and ``a.b``."""
    with open(path) as f:
        tree = ast.parse(f.read())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return out


def test_jax_outside_its_stable_api_is_reached_through_the_compat_module_only():
    """``jax._src`` and ``jax.experimental.topologies`` differ between the supported jax
    versions: only ``deepnet_jax.common.jax_compat`` imports them."""
    found = [
        f"{m} imports {name}"
        for m, path in sorted(_modules().items())
        if m != "deepnet_jax.common.jax_compat"
        for name in sorted(_external_imports(path))
        if any(name == u or name.startswith(u + ".") for u in UNSTABLE_JAX)
    ]
    assert not found, "\n".join(found)


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
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


def test_no_import_circle():
    graph = {  # a package's __init__ is a face that may hand its modules' names on
        m: {t for t in ts if not (t.count(".") == 1 and m.startswith(t + "."))}
        for m, ts in _graph().items()
    }
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_top_level_surface_imports_the_model_only():
    code = (
        "import sys, deepnet_jax\n"
        "from deepnet_jax import (DecoderOnly, EncoderDecoder, EncoderOnly, TransformerConfig,\n"
        "    TransformerLayer, build, constants, deepnorm, default_config, subln)\n"
        "heavy = ('tensorflow_datasets', 'tensorflow', 'grain', 'orbax', 'optax', 'sacrebleu',\n"
        "    'sentencepiece', 'deepnet_jax.training', 'deepnet_jax.data', 'deepnet_jax.runs')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or\n"
        "    any(m == h or m.startswith(h + '.') for h in heavy)))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]", proc.stdout


@pytest.mark.parametrize(
    "package, loaded_late",
    [
        ("deepnet_jax.decoding", ("deepnet_jax.decoding.search", "sacrebleu")),
        ("deepnet_jax.training", ("deepnet_jax.training.train", "optax", "orbax", "grain")),
    ],
)
def test_a_subpackage_surface_names_resolve_and_load_on_first_use(package, loaded_late):
    """Importing the package loads none of its surface's modules; each name of ``__all__``
    then resolves to the object its submodule defines."""
    code = (
        "import importlib, sys\n"
        f"pkg = importlib.import_module({package!r})\n"
        f"print(sorted(m for m in {loaded_late!r} if m in sys.modules))\n"
        "for name in pkg.__all__:\n"
        "    obj = getattr(pkg, name)\n"
        "    home = importlib.import_module(pkg.__name__ + '.' + pkg._SURFACE[name])\n"
        "    assert obj is getattr(home, name), name\n"
        "print(sorted(pkg.__all__) == sorted(set(dir(pkg)) & set(pkg.__all__)))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["[]", "True"], proc.stdout


def _documented_commands() -> list[str]:
    """Every ``python -m deepnet_jax.…`` module named in the README and docs/."""
    texts = [os.path.join(ROOT, "README.md")] + [
        os.path.join(ROOT, "docs", f) for f in sorted(os.listdir(os.path.join(ROOT, "docs")))
    ]
    found = set()
    for path in texts:
        if path.endswith(".md"):
            with open(path) as f:
                found |= set(re.findall(r"python -m (deepnet_jax(?:\.\w+)+)(?![.\w])", f.read()))
    return sorted(found)


def test_the_docs_name_the_commands():
    commands = _documented_commands()
    assert "deepnet_jax.cli.plan" in commands and "deepnet_jax.cli.prepare" in commands, commands


@pytest.mark.parametrize("module", _documented_commands())
def test_each_documented_command_answers_help(module):
    proc = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    # the command's docstring and its flags (absl's "flags:" list), or a usage line
    assert "flags:" in proc.stdout or proc.stdout.startswith("usage:"), proc.stdout[:500]
    assert f"python -m {module}" in proc.stdout, proc.stdout[:500]
