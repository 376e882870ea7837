"""Checks shared by the tests of benchmarks that write a record and a docs block from it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest

from deepnet_jax.common import records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def assert_docs_needs_out(main: Callable[[list[str]], Any], capsys) -> None:
    """``--docs`` without ``--out`` stops with the one-line error (nothing to write from)."""
    with pytest.raises(SystemExit):
        main(["--docs=docs/benchmarks.md"])
    assert "--docs: needs --out" in capsys.readouterr().err


def assert_block_is_committed_record(
    record: str, module: str, doc: str, block: str, table: Callable[[dict], str]
) -> dict[str, Any]:
    """The committed ``record`` (a path from the repository root) was written by ``python -m
    <module>`` with a full header, and block ``block`` of ``doc`` is ``table`` of it."""
    with open(os.path.join(ROOT, record)) as f:
        payload = json.load(f)
    assert payload["command"].startswith(f"python -m {module}")
    assert all(payload[k] for k in ("commit", "date", "machine", "jax"))
    assert records.block(os.path.join(ROOT, doc), block) == table(payload)
    return payload
