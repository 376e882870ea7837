"""Quiet by default: a run shows its own lines; library INFO (orbax, jax, tfds, grain) only
with ``-v 0``.

The subprocess runs use ``tests/configs/tiny_synthetic.py`` for 2 updates with a checkpoint
after each (orbax alone printed ~120 INFO lines for such a run, 24 of them over 300
characters, before the CLIs called ``log_setup.configure``).
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys

import jax
import pytest
from conftest import xla_flags

from deepnet_jax.cli import log_setup

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "tests", "configs", "tiny_synthetic.py")
LIBRARY = "/usr/lib/python3/site-packages/orbax/checkpoint/checkpoint_manager.py"

# A log line, wherever it starts (a line can be glued to a progress-bar frame): absl's prefix
# (Python and C++: "I1124 16:39:46.219216 140670 file.py:849]"), absl C++'s pre-init notice,
# Python's default "LEVEL:logger:" format and the warnings module's "file:line: XWarning:".
LOG_LINE = re.compile(
    r"[IWEFD]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^ \]]+:\d+\]"
    r"|All log messages before absl::InitializeLog"
    r"|^(DEBUG|INFO|WARNING|ERROR|CRITICAL):\S"
    r"|^\S+:\d+: \w*Warning: "
)
MAX_LOG_LINES = 10
MAX_LINE_CHARS = 300


def _env() -> dict[str, str]:
    """The test session's compilation cache and PRNG, so the runs share their compiles."""
    return {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": xla_flags(),
        "JAX_DEFAULT_PRNG_IMPL": "rbg",
        "JAX_COMPILATION_CACHE_DIR": jax.config.jax_compilation_cache_dir,
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }


def _run(*args: str) -> tuple[int, list[str]]:
    """(exit status, output lines): stdout and stderr together, split on ``\\n`` and on the
    ``\\r`` of progress-bar frames."""
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    return proc.returncode, re.split(r"\r\n|\r|\n", proc.stdout)


def _train(workdir, *flags: str) -> tuple[int, list[str]]:
    return _run(
        "train.py",
        f"--config={CONFIG}",
        f"--workdir={workdir}",
        "--config.total_steps=2",
        "--config.checkpoint_every=1",
        *flags,
    )


def _log_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if LOG_LINE.search(line)]


@pytest.fixture(scope="module")
def quiet_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("quiet_run")
    status, lines = _train(workdir)
    assert status == 0, "\n".join(lines[-40:])
    return workdir, lines


def test_a_two_step_run_prints_its_own_lines_and_few_library_lines(quiet_run):
    _, lines = quiet_run
    logs = _log_lines(lines)
    assert len(logs) <= MAX_LOG_LINES, f"{len(logs)} log lines:\n" + "\n".join(logs[:15])
    long = [line[:200] + "..." for line in lines if len(line) > MAX_LINE_CHARS]
    assert not long, "\n".join(long)
    assert any(line.startswith("step 2/2 | loss ") for line in lines)
    assert any(line.startswith("step 2: validation loss ") for line in lines)
    assert any(line.startswith("results: ") and line.endswith("eval.json") for line in lines)


def test_the_verbosity_flag_brings_library_info_back(quiet_run):
    workdir, _ = quiet_run
    status, lines = _train(workdir, "-v", "0")  # resumes the finished run: orbax restores
    assert status == 0, "\n".join(lines[-40:])
    info = [line for line in _log_lines(lines) if re.search(r"I\d{4} ", line)]
    assert len(info) > MAX_LOG_LINES, "\n".join(lines[-40:])
    assert any("checkpoint_manager.py" in line for line in info), "\n".join(info[:15])


def test_a_read_only_cli_is_quiet_too(quiet_run):
    """evaluate opens the run's checkpoints read-only (orbax warns about that, 6 lines) and
    then refuses the synthetic run: one error line, no library lines."""
    workdir, _ = quiet_run
    status, lines = _run("-m", "deepnet_jax.cli.evaluate", f"--workdir={workdir}")
    assert status == 1
    printed = [line for line in lines if line]
    assert len(printed) == 1 and printed[0].startswith(f"error: {workdir} trained on"), printed


def _record(pathname: str, level: int, msg: str = "x") -> logging.LogRecord:
    return logging.LogRecord("absl", level, pathname, 1, msg, None, None)


def test_the_filter_keeps_own_records_and_library_warnings():
    quiet = log_setup.QuietLibraries(main_file=os.path.join(ROOT, "train.py"))
    own = os.path.join(os.path.dirname(log_setup.__file__), "data", "pipeline.py")
    assert quiet.filter(_record(own, logging.INFO))
    assert quiet.filter(_record(os.path.join(ROOT, "train.py"), logging.INFO))
    assert not quiet.filter(_record(LIBRARY, logging.INFO))
    assert quiet.filter(_record(LIBRARY, logging.WARNING))
    assert quiet.filter(_record(LIBRARY, logging.ERROR, "Given directory is not writable"))
    assert not quiet.filter(_record(LIBRARY, logging.WARNING, "Given directory is read only=%s"))
    tfds = LIBRARY.replace("orbax", "tensorflow_datasets")
    assert not quiet.filter(_record(tfds, logging.WARNING, "Using custom data configuration: %s"))
    assert quiet.filter(_record(tfds, logging.WARNING, "Given directory is read only=%s"))


ABANDONED_READ = """
import types


@types.coroutine
def _pause():
    yield


async def read():
    try:
        await _pause()
    finally:
        raise Exception("abandoned read")
"""

EXITS_WITH_AN_ABANDONED_READ = """
import sys

from deepnet_jax.cli import log_setup

log_setup.configure(None if sys.argv[1] == "quiet" else 0)
sys.path.insert(0, sys.argv[2])
from orbax import reader  # a stand-in: a coroutine of a library folder named orbax

PENDING = reader.read()
PENDING.send(None)  # started, never finished: closed when the interpreter shuts down
print("error: the run's last line", file=sys.stderr)
"""


@pytest.mark.parametrize("mode", ["quiet", "verbose"])
def test_abandoned_library_reads_print_nothing_after_the_error_unless_verbose(mode, tmp_path):
    """A failed orbax restore leaves read coroutines that raise again when collected, as late
    as interpreter shutdown; quiet mode drops those tracebacks, ``-v`` shows them."""
    (tmp_path / "orbax").mkdir()
    (tmp_path / "orbax" / "__init__.py").write_text("")
    (tmp_path / "orbax" / "reader.py").write_text(ABANDONED_READ)
    script = tmp_path / "main.py"
    script.write_text(EXITS_WITH_AN_ABANDONED_READ)
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.run(
        [sys.executable, str(script), mode, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    tail = proc.stderr[proc.stderr.index("error: the run's last line") :]
    if mode == "quiet":
        assert tail == "error: the run's last line\n", tail
    else:
        assert "Exception: abandoned read" in tail, tail
    unraisable = log_setup.QuietUnraisable()
    closed = RuntimeError("Event loop is closed")
    assert unraisable.drops(closed, None)
    assert not unraisable.drops(RuntimeError("something else"), None)


LOGS_BEFORE_AND_AFTER_CONFIGURE = """
import logging
import sys

from absl import logging as absl_logging

if sys.argv[1] == "early":  # as orbax does at import: absl adds a root handler (basicConfig)
    absl_logging.warning("an early library warning")
from deepnet_jax.cli import log_setup

log_setup.configure(None)
for msg in ("Given directory is read only=%s", "a library warning"):
    absl_logging.get_absl_logger().handle(
        logging.LogRecord("absl", logging.WARNING, sys.argv[2], 1, msg, ("d",), None)
    )
"""


@pytest.mark.parametrize("before", ["early", "none"])
def test_a_cli_without_app_run_drops_noisy_warnings_whoever_added_the_handler(before, tmp_path):
    """The experiments' commands are not absl apps: absl's first log call (orbax's, at import)
    puts logging.basicConfig()'s handler on the root logger before ``configure`` runs; quiet
    mode filters that handler too (and adds it itself when nothing logged first)."""
    script = tmp_path / "main.py"
    script.write_text(LOGS_BEFORE_AND_AFTER_CONFIGURE)
    proc = subprocess.run(
        [sys.executable, str(script), before, LIBRARY],
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Given directory is read only" not in proc.stderr, proc.stderr
    assert "a library warning" in proc.stderr, proc.stderr
    assert ("an early library warning" in proc.stderr) == (before == "early")


# What a benchmark run as ``python -m benchmarks.<name>`` does first: Python imports the package
# with ``sys.argv[0] == "-m"`` while it locates the module; then the benchmark starts JAX.
AS_A_BENCHMARK = """
import sys
if sys.argv[1] == "program":
    sys.argv[:1] = ["-m"]
import benchmarks
import jax
print(jax.config.jax_platforms)
if sys.argv[1] == "program":
    jax.devices()
"""


@pytest.mark.parametrize("how", ["program", "import"])
def test_a_benchmark_run_as_a_program_prints_no_library_start_up(how):
    """Run as a program, a benchmark is quiet as the commands are: on this CPU host no libtpu
    or CUDA start-up lines; imported (by a test), the package changes nothing."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "TF_CPP_MIN_LOG_LEVEL")
    }
    proc = subprocess.run(
        [sys.executable, "-c", AS_A_BENCHMARK, how],
        env={**env, "PYTHONPATH": ROOT, "XLA_FLAGS": xla_flags()},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ("cpu" if how == "program" else "None"), proc.stdout
    if how == "program":
        assert "TPU" not in proc.stderr and "cuda" not in proc.stderr, proc.stderr
