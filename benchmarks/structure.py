"""The package's structure in figures, for a tree of this repository (this checkout or another
commit's, e.g. a ``git worktree``) — the house's before and after (docs/architecture.md).

    python -m benchmarks.structure [--root=DIR] [--out=record.json]

Prints one JSON object: modules, their lines (total, over 350 and 400, the largest), functions
and those over 50 and 60 lines (from the ``def`` or first decorator to the last line), the
modules naming the run directory's ``"checkpoints"`` and ``"metrics.jsonl"`` as literals, and
those editing ``sys.path``. The import floors and circles are ``tests/test_layout.py``'s.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
from typing import Any

from deepnet_jax.common import records

_LITERALS = {
    "checkpoints": re.compile(r"[\"']checkpoints[\"']"),
    "metrics.jsonl": re.compile(r"metrics\.jsonl[\"']"),
    "sys.path edits": re.compile(r"sys\.path\.(insert|append)|sys\.path\s*="),
}


def function_lengths(tree: ast.Module) -> list[int]:
    """Each function's lines, from its first decorator (or ``def``) to its last line."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            out.append(node.end_lineno - start + 1)
    return out


def measure(root: str) -> dict[str, Any]:
    """The figures of ``root``'s ``deepnet_jax`` package."""
    package = os.path.join(root, "deepnet_jax")
    lines: dict[str, int] = {}
    functions: list[int] = []
    literals: dict[str, list[str]] = {k: [] for k in _LITERALS}
    for folder, _, files in os.walk(package):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            with open(path) as f:
                text = f.read()
            lines[rel] = text.count("\n")
            functions += function_lengths(ast.parse(text))
            for key, pattern in _LITERALS.items():
                if pattern.search(text):
                    literals[key].append(rel)
    return {
        "modules": len(lines),
        "lines": sum(lines.values()),
        "modules_over_350": sorted(m for m, n in lines.items() if n > 350),
        "modules_over_400": sum(n > 400 for n in lines.values()),
        "largest_module": max(lines.items(), key=lambda kv: kv[1]),
        "functions": len(functions),
        "functions_over_50": sum(n > 50 for n in functions),
        "functions_over_60": sum(n > 60 for n in functions),
        "modules_naming": {k: sorted(v) for k, v in literals.items()},
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=".", help="the repository tree to measure")
    parser.add_argument("--out", default="", help="also write the figures as a record")
    args = parser.parse_args(argv)
    root = os.path.abspath(args.root)
    tree = subprocess.run(
        ["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    figures = {"tree_commit": tree or None, **measure(root)}
    print(json.dumps(figures, indent=1))
    if args.out:
        records.write(args.out, figures)


if __name__ == "__main__":
    main(sys.argv[1:])
