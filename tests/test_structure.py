"""benchmarks/structure.py: the figures the house's closing notes give, and the house's rules
they check (issue 52: no module over ~350 lines, no function over ~60, one module naming each
of the run directory's files, no sys.path edit in the package)."""

import ast
import os

from benchmarks import structure

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_function_lengths_count_from_the_first_decorator():
    tree = ast.parse("@a\n@b\ndef f():\n    x = 1\n    return x\n\n\ndef g(): pass\n")
    assert sorted(structure.function_lengths(tree)) == [1, 5]


def test_the_package_keeps_the_house_rules():
    figures = structure.measure(ROOT)
    assert figures["modules_over_350"] == [] and figures["functions_over_60"] == 0
    naming = figures["modules_naming"]
    assert naming["checkpoints"] == naming["metrics.jsonl"] == ["deepnet_jax/runs/workdir.py"]
    assert naming["sys.path edits"] == []
