"""The package as a user installs it: the shipped configs (``--config=<name>``), a wheel that
trains the main job from outside the checkout, and version bounds that the docs name."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib

import numpy as np
import pytest
from test_data_pipeline import _write_corpus

from benchmarks import suite_record
from deepnet_jax import configs
from deepnet_jax.common import records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_config_value_is_a_file_or_a_shipped_name(tmp_path):
    assert configs.path("wmt17_ende") == os.path.join(
        ROOT, "deepnet_jax", "configs", "wmt17_ende.py"
    )
    assert configs.path("depth_table:reversal64,deepnorm,500").endswith(
        os.path.join("configs", "depth_table.py:reversal64,deepnorm,500")
    )
    own = tmp_path / "mine.py"
    own.write_text("def get_config():\n    return None\n")
    assert configs.path(f"{own}:x") == f"{own}:x"  # a file is itself, argument kept
    with pytest.raises(ValueError, match=r"--config=nosuch: no such file.*wmt17_ende"):
        configs.path("nosuch")
    with pytest.raises(ValueError, match="not a shipped config"):
        configs.load("configs/default.py")


def test_the_checkout_configs_are_the_shipped_ones():
    """``configs/<name>.py`` (the README's ``--config=configs/default.py``) for every shipped
    config and no other, each the shipped ``get_config``."""
    folder = os.path.join(ROOT, "configs")
    files = {f[:-3] for f in os.listdir(folder) if f.endswith(".py") and f != "__init__.py"}
    assert files == set(configs.NAMES)
    for name in configs.NAMES:
        checkout = __import__(f"configs.{name}", fromlist=["get_config"])
        shipped = __import__(f"deepnet_jax.configs.{name}", fromlist=["get_config"])
        assert checkout.get_config is shipped.get_config


def test_the_shipped_names_are_the_package_modules_with_a_get_config():
    """``configs.NAMES`` lists its configs by hand: every module of the package that defines
    ``get_config`` and no other (the rest are what configs are built from: rows, base configs,
    the depth table's recipe), and ``--config=<name>`` refuses those."""
    folder = os.path.join(ROOT, "deepnet_jax", "configs")
    with_get_config = set()
    for f in os.listdir(folder):
        if f.endswith(".py") and f != "__init__.py":
            with open(os.path.join(folder, f)) as source:
                if re.search(r"^def get_config\(", source.read(), re.M):
                    with_get_config.add(f[:-3])
    assert with_get_config == set(configs.NAMES)
    assert len(configs.NAMES) == len(set(configs.NAMES))
    with pytest.raises(ValueError, match="not a shipped config"):
        configs.path("experiment_rows")


def test_an_unknown_config_is_one_error_line(tmp_path):
    for module in ("deepnet_jax.cli.train", "deepnet_jax.cli.plan"):
        proc = subprocess.run(
            [sys.executable, "-m", module, "--config", "wmt17_ned", "--workdir=x"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 1, proc.stderr[-2000:]
        lines = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
        assert lines and lines[-1].startswith("error: --config=wmt17_ned: no such file"), lines


def _install_wheel(tmp_path) -> str:
    """The package built as a wheel (no build isolation: setuptools and wheel of the test
    environment; from a copy of what the wheel is made of, so setuptools' build folder lands
    there) and installed, without dependencies, into its own folder."""
    source, dist, site = tmp_path / "source", tmp_path / "dist", tmp_path / "site"
    shutil.copytree(
        os.path.join(ROOT, "deepnet_jax"),
        source / "deepnet_jax",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    build = [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(source)]
    subprocess.run(build, check=True, capture_output=True, timeout=300)
    (wheel,) = dist.glob("deepnet_jax-*.whl")
    install = [*pip, "install", "--no-deps", "--target", str(site), str(wheel)]
    subprocess.run(install, check=True, capture_output=True, timeout=300)
    return str(site)


def test_the_wheel_trains_the_main_job_from_any_directory(tmp_path):
    """``python -m deepnet_jax.cli.train --config=default`` with the installed wheel, run from a
    folder that holds no checkout: the main job's config, for 2 updates of a 1L-1L model on a
    toy parallel corpus that the command prepares (the main job's own corpus takes minutes)."""
    site = _install_wheel(tmp_path)
    _write_corpus(tmp_path / "toy")
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = {**os.environ, "PYTHONPATH": site, "JAX_PLATFORMS": "cpu"}
    where = [sys.executable, "-c", "import deepnet_jax.configs as c; print(c.__file__)"]
    found = subprocess.run(where, cwd=cwd, env=env, capture_output=True, text=True, check=True)
    assert found.stdout.strip().startswith(site), found.stdout  # the wheel's, not the checkout's
    cmd = [
        sys.executable, "-m", "deepnet_jax.cli.train", "--config=default",
        f"--workdir={tmp_path / 'run'}", "--config.total_steps=2",
        "--config.model.num_encoder_layers=1", "--config.model.num_decoder_layers=1",
        "--config.model.vocab_size=300", "--config.model.max_len=64",
        "--config.data.max_len=48", "--config.data.bucket_boundaries=(16,48)",
        "--config.data.dataset=local_parallel", f"--config.data.data_dir={tmp_path / 'data'}",
        f"--config.data.source_dir={tmp_path / 'toy'}", "--config.data.src_ext=de",
        "--config.data.tgt_ext=en", "--config.data.vocab_size=300",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = tmp_path / "data"
    assert (data / "local_parallel").is_dir() and (data / "tokenizers").is_dir()
    metrics = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert metrics["steps"] == 2 and np.isfinite(metrics["eval_loss"])


def _bounds(requirement: str) -> tuple[str, str]:
    low = re.search(r">=\s*([\w.]+)", requirement)
    high = re.search(r"<=\s*([\w.]+)", requirement)
    assert low and high, f"{requirement!r}: give the tested lower and upper bounds"
    return low.group(1), high.group(1)


# benchmarks.suite_record's own run: the table of tested sets is written after it
RECORDING = pytest.mark.skipif(
    os.environ.get(suite_record.RECORDING) == "1",
    reason="the suite's record is being made; its table is written after the run",
)


@RECORDING
def test_the_tested_sets_table_is_the_suite_records():
    """docs/install.md's table of tested sets, regenerated from docs/records/suite_*.json; each
    record is a whole default run that passed."""
    found = suite_record.committed_records()
    doc = os.path.join(ROOT, "docs", "install.md")
    assert records.block(doc, "tested-sets") == suite_record.tested_sets_table(found)
    for path, record in found:
        assert record["command"].startswith("python -m benchmarks.suite_record"), path
        assert record["pytest_args"] == [], path  # the default run, nothing selected
        assert record["exit_status"] == 0 and record["failed"] == record["errors"] == 0, path


@RECORDING
def test_the_declared_bounds_are_the_tested_ones_the_docs_name():
    """pyproject's jax range and every extra's are the same two tested versions, and
    docs/install.md's table of tested sets names both ends with their Python."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    (jax,) = [d for d in project["dependencies"] if d.startswith("jax")]
    low, high = _bounds(jax)
    for extra in ("tpu", "cuda12", "cuda13", "gpu-plan"):
        (pinned,) = [d for d in project["optional-dependencies"][extra] if d.startswith("jax")]
        assert _bounds(pinned) == (low, high), extra
    python = project["requires-python"]
    assert python == ">=3.11", python  # no upper bound the code does not need
    with open(os.path.join(ROOT, "docs", "install.md")) as f:
        doc = f.read()
    assert re.search(rf"\| jax {re.escape(low)} \| Python 3\.11\.\d+ ", doc), "oldest set"
    assert re.search(rf"\| jax {re.escape(high)} \| Python 3\.1[23]\.\d+ ", doc), "newest set"
