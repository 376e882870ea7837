"""The package's floors: every import runs down (or within a floor), no module circle and no
circle between subpackages, a light top-level surface, and every ``python -m`` command the
README and docs name answers ``--help``.

Imports are read from the source (``ast``), function-level ones included, so a lazy import that
runs back up counts too; so does ``importlib.import_module`` of a name built on a package's
(``f"{__name__}.{name}"`` in a package's ``__init__``, ``f"deepnet_jax.configs.{name}"``): an
import of each module of that package.
"""

from __future__ import annotations

import ast
import itertools
import json
import os
import re
import subprocess
import sys

import import_graph
import pytest

ROOT = import_graph.ROOT

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
    "configs": 5,
    "cli": 6,
    "experiments": 6,
}
SURFACE_FLOOR = 1.5  # deepnet_jax/__init__.py: the model and the ground floor only

# dynamic imports whose names the source does not fix, and why each imports nothing of another
# subpackage above it
DYNAMIC_ELSEWHERE = {
    "deepnet_jax.common.lazy": "a package surface's own modules, named by its _SURFACE",
    "deepnet_jax.data.corpora.wmt": "tensorflow_datasets' WMT builders",
}


def _floor(module: str) -> float:
    parts = module.split(".")
    if len(parts) == 1:
        return SURFACE_FLOOR
    return FLOORS[parts[1]]


def test_every_subpackage_has_a_floor():
    subpackages = {m.split(".")[1] for m in import_graph.find_modules() if m.count(".") >= 1}
    assert subpackages == set(FLOORS), subpackages ^ set(FLOORS)


def test_no_import_runs_back_up():
    upward = [
        f"{m} (floor {_floor(m)}) imports {t} (floor {_floor(t)})"
        for m, targets in sorted(import_graph.module_graph().items())
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
        for m, path in sorted(import_graph.find_modules().items())
        if m != "deepnet_jax.common.jax_compat"
        for name in sorted(_external_imports(path))
        if any(name == u or name.startswith(u + ".") for u in UNSTABLE_JAX)
    ]
    assert not found, "\n".join(found)


def test_no_import_circle():
    graph = {  # a package's __init__ is a face that may hand its modules' names on
        m: {t for t in ts if not (t.count(".") == 1 and m.startswith(t + "."))}
        for m, ts in import_graph.module_graph().items()
    }
    assert import_graph.find_cycle(graph) is None, " -> ".join(import_graph.find_cycle(graph))


def test_the_cycle_finder_finds_one():
    assert import_graph.find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert import_graph.find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_circle_between_subpackages():
    """No circle of subpackages either: modules free of circles can still join their
    subpackages in one (``cli`` → ``configs`` → ``experiments`` → ``cli``, each edge made by
    other modules), which sharing a floor would let pass."""
    graph = import_graph.subpackage_graph(import_graph.module_graph())
    found = import_graph.find_cycle({p: set(edges) for p, edges in graph.items()})
    assert found is None, (
        " -> ".join(found) + "\n" + "\n".join(graph[a][b] for a, b in itertools.pairwise(found))
    )


def test_the_subpackage_graph_names_an_import_per_edge():
    graph = import_graph.subpackage_graph(
        {"p.a.x": {"p.b.y", "p.a.z"}, "p.b.y": {"p.a.z"}, "p.a.z": set(), "p": {"p.b.y"}}
    )
    assert graph == {
        "a": {"b": "p.a.x imports p.b.y"},
        "b": {"a": "p.b.y imports p.a.z"},
        "p": {"b": "p imports p.b.y"},
    }
    assert import_graph.find_cycle({p: set(edges) for p, edges in graph.items()}) == ["a", "b", "a"]


def test_every_dynamic_import_is_read():
    """Each ``importlib.import_module`` of the package imports a name the test can read (so its
    edges count above), or is one of :data:`DYNAMIC_ELSEWHERE`, which import nothing above."""
    modules = import_graph.find_modules()
    unread = []
    for m, path in sorted(modules.items()):
        with open(path) as f:
            unread += import_graph.read_dynamic_imports(ast.parse(f.read()), m, modules)[1]
    assert {u.split(":")[0] for u in unread} <= set(DYNAMIC_ELSEWHERE), unread
    assert import_graph.module_graph()["deepnet_jax.configs"] >= {
        f"deepnet_jax.configs.{n}" for n in ("default", "depth_table", "experiment_rows")
    }  # the registry loads its configs by name: an import of each module of the package


def test_the_dynamic_import_reader_reads_names_built_on_a_package():
    modules = dict.fromkeys(["p", "p.q", "p.q.a", "p.q.b", "p.r"], "")
    code = (
        "import importlib\n"
        "importlib.import_module(f'{__name__}.{name}')\n"
        "importlib.import_module('p.' + 'r')\n"
        "importlib.import_module(other)\n"
        "importlib.import_module('tensorflow_datasets.x')\n"
    )
    found, unread = import_graph.read_dynamic_imports(ast.parse(code), "p.q", modules)
    assert found == {"p.q.a", "p.q.b", "p.r"}
    assert unread == ["p.q:4"]


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


@pytest.fixture(scope="module")
def help_outputs(tmp_path_factory) -> dict[str, dict]:
    """Every documented command's ``python -m <module> --help`` (tests/help_worker.py: one
    process that imports the shared third-party libraries once and forks a fresh child per
    command, instead of paying their ~5 s import in each of ~18 processes)."""
    out = tmp_path_factory.mktemp("help") / "help.json"
    worker = os.path.join(ROOT, "tests", "help_worker.py")
    proc = subprocess.run(
        [sys.executable, worker, str(out), *_documented_commands()],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(out) as f:
        return json.load(f)


@pytest.mark.parametrize("module", _documented_commands())
def test_each_documented_command_answers_help(module, help_outputs):
    proc = help_outputs[module]
    assert proc["returncode"] == 0, proc["stderr"][-2000:]
    # the command's docstring and its flags (absl's "flags:" list), or a usage line
    stdout = proc["stdout"]
    assert "flags:" in stdout or stdout.startswith("usage:"), stdout[:500]
    assert f"python -m {module}" in stdout, stdout[:500]
