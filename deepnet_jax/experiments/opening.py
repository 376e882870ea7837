"""An experiment's command line and opening: ``--setting`` (smoke, quick, full), ``--out``,
``--data_dir`` and ``-v``; :func:`start` parses them, sets the log verbosity and the smoke
setting's fast compiles, and builds the setting's base config."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import ml_collections
from absl import flags

from deepnet_jax.cli import command, log_setup
from deepnet_jax.cli import flags as cli_flags
from deepnet_jax.common import console, records
from deepnet_jax.configs.experiment_base import SETTINGS

_SETTING = flags.DEFINE_string(
    "setting", "quick", "the experiment's setting (smoke: seconds, for CI)"
)


# XLA:CPU settings that compile faster and run slower, for runs that are mostly compilation:
# LLVM optimization level 0 (about twice as fast to compile: the model_update smoke CLI took
# 61 s instead of 87 s) and the legacy emitters of fused loops, which XLA:CPU's newer fusion
# emitters replace (the tests' tiny runs, mostly compilation, take 20-27% less: tests/conftest.py).
FAST_COMPILE_XLA_FLAGS = (
    "--xla_backend_optimization_level=0",
    "--xla_cpu_use_fusion_emitters=false",
)


def compile_fast_for_smoke(setting: str) -> None:
    """For the ``smoke`` setting, whose runs are mostly XLA compilation: adds
    :data:`FAST_COMPILE_XLA_FLAGS` to ``XLA_FLAGS`` (each once). XLA reads ``XLA_FLAGS`` when
    its backend starts, so this has no effect once this process has run any JAX computation."""
    if setting != "smoke":
        return
    for flag in FAST_COMPILE_XLA_FLAGS:
        if flag not in os.environ.get("XLA_FLAGS", ""):
            os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()


@dataclasses.dataclass(frozen=True)
class Args:
    """An experiment's command line: ``--setting``, ``--out``, ``--data_dir`` and absl's
    ``-v``/``--verbosity`` (None: library log lines hidden); ``header``: the command's
    :func:`records.header` as it started (:func:`start`; empty from :func:`parse_args` alone),
    which a results file it creates carries."""

    setting: str
    out: str
    data_dir: str
    verbosity: int | None
    header: dict[str, Any] = dataclasses.field(default_factory=dict)


def parse_args(
    argv: Sequence[str], settings: Sequence[str] = SETTINGS, experiment: str | None = None
) -> Args:
    """Parse an experiment's flags (absl, defined at this module's import) from ``argv`` (the
    arguments after the program name); a bad flag or setting exits with one ``error:`` line,
    and so does, when ``experiment`` names the experiment (its module's name), a flag the
    project defines for another command (absl knows every imported module's flags: an
    experiment importing another's helpers would otherwise take and ignore its flags)."""
    if any(arg in command.HELP_FLAGS for arg in argv):
        print(usage(settings, experiment))
        sys.exit(0)
    flags.FLAGS.unparse_flags()
    try:
        flags.FLAGS(["experiment", *argv])
    except flags.Error as e:
        sys.exit(console.error_line(e))
    if experiment is not None:
        _refuse_foreign_flags(experiment)
    if _SETTING.value not in settings:
        sys.exit(
            console.error_line(
                f"--setting={_SETTING.value!r}; allowed values are {', '.join(settings)}"
            )
        )
    return Args(
        _SETTING.value,
        cli_flags.OUT.value or "",
        cli_flags.DATA_DIR.value or "",
        log_setup.requested_verbosity(),
    )


def own_flags(experiment: str | None) -> list[flags.Flag]:
    """The flags ``experiment`` (a module name under deepnet_jax.experiments; None: any) reads:
    every experiment's ``--setting``, ``--out`` and ``--data_dir``, then those its own module
    defines (as ``python -m``, absl files them under the script's path) and those of the
    modules its ``FLAGS_FROM`` names (e.g. ``("resumable",)``)."""
    common = [flags.FLAGS[h.name] for h in (_SETTING, cli_flags.OUT, cli_flags.DATA_DIR)]
    if experiment is None:
        return common
    # absl files a flag under its module's name, or under the script's path for ``__main__``
    main_file = getattr(sys.modules.get("__main__"), "__file__", None) or ""
    modules = [f"{__package__}.{experiment}"]
    # and those of the modules it names in its FLAGS_FROM (shared flags: resumable's --shard)
    module = sys.modules.get(modules[0]) or sys.modules.get("__main__")
    modules += [f"{__package__}.{m}" for m in getattr(module, "FLAGS_FROM", ())]
    if os.path.basename(main_file) == f"{experiment}.py":
        modules.append(main_file)
    by_module = flags.FLAGS.flags_by_module_dict()
    mine = [f for m in modules for f in by_module.get(m, [])]
    return common + list({f.name: f for f in mine}.values())


def _refuse_foreign_flags(experiment: str) -> None:
    """SystemExit with one line for a flag given on the command line that this project
    defines but ``experiment`` does not read (absl's own, e.g. ``-v``, are always read)."""
    mine = {f.name for f in own_flags(experiment)}
    for name, flag in flags.FLAGS.flags_by_module_dict().items():
        if not name.startswith("deepnet_jax"):
            continue
        for f in flag:
            if f.present and f.name not in mine:
                allowed = ", ".join(f"--{n}" for n in sorted(mine))
                sys.exit(
                    console.error_line(
                        f"--{f.name} is not a flag of {experiment}; it takes {allowed}"
                    )
                )


def usage(settings: Sequence[str] = SETTINGS, experiment: str | None = None) -> str:
    """The ``--help`` text: the experiment's docstring, then the flags an experiment reads."""
    main = sys.modules.get("__main__")
    lines = [(getattr(main, "__doc__", None) or "").strip(), "", "flags:"]
    for flag in own_flags(experiment):
        allowed = f"one of {', '.join(settings)}; " if flag.name == "setting" else ""
        lines.append(f"  --{flag.name}: {flag.help} ({allowed}default: {flag.default!r})")
    lines.append("  -v, --verbosity: library log lines (absl levels; hidden by default)")
    return "\n".join(lines)


def start(
    argv: Sequence[str] | None,
    name: str,
    base: Callable[[str], ml_collections.ConfigDict],
    settings: Sequence[str] = SETTINGS,
) -> tuple[Args, ml_collections.ConfigDict, str]:
    """An experiment's opening: parse ``argv`` (default: the process's arguments), set log
    verbosity, the smoke setting's fast compiles, build the setting's base config with
    ``--data_dir`` applied; returns the arguments (with the command's header, taken now:
    the commit it starts from), the base config and the output folder."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv, settings, name)
    # the command that does this: ``python -m deepnet_jax.experiments.<name> ARGV``
    head = records.header([os.path.join(os.path.dirname(__file__), f"{name}.py"), *argv])
    args = dataclasses.replace(args, header=head)
    log_setup.configure(args.verbosity)
    compile_fast_for_smoke(args.setting)
    config = base(args.setting)
    configure_data(config, args)
    return args, config, output_dir(args, name)


def output_dir(args: Args, name: str) -> str:
    return args.out or os.path.join("/tmp/deepnet_experiments", name)


def configure_data(c: ml_collections.ConfigDict, args: Args) -> None:
    if args.data_dir:
        c.data.data_dir = args.data_dir
