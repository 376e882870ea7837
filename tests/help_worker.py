"""Each named module's ``python -m <module> --help``, in one process instead of one each; started
by test_layout.py, not by pytest.

argv: out_json module... The worker imports the third-party libraries the commands share (jax,
flax, optax, orbax, tensorflow-datasets, grain, matplotlib, tensorboardX: ~5 s of every
command's start on a 2-core machine), then forks once per module; each child runs the module as
``python -m`` does (``runpy``, ``__name__ == "__main__"``, ``sys.argv = [module, "--help"]``)
with its stdout and stderr in files, and exits with the command's status. Nothing of
``deepnet_jax`` is imported before the fork, and no jax backend starts: each child imports the
package, and the command's own modules, fresh. The JSON: {module: {returncode, stdout, stderr}}.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import tempfile

SHARED = (
    "jax",
    "flax.linen",
    "optax",
    "orbax.checkpoint",
    "tensorflow_datasets",
    "grain",
    "matplotlib.pyplot",
    "tensorboardX",
    "ml_collections",
    "absl.app",
)


def _child(module: str, out_path: str, err_path: str) -> None:
    """In the forked child: ``python -m module --help`` with its output in the two files."""
    code = 0
    with open(out_path, "w") as out, open(err_path, "w") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.argv = [module, "--help"]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # a traceback, as python -m prints it; status 1
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
    os._exit(code)


def _run(module: str, folder: str) -> dict:
    out_path, err_path = (os.path.join(folder, f"{module}.{s}") for s in ("out", "err"))
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(module, out_path, err_path)
    _, status = os.waitpid(pid, 0)
    with open(out_path) as out, open(err_path) as err:
        return {
            "returncode": os.waitstatus_to_exitcode(status),
            "stdout": out.read(),
            "stderr": err.read(),
        }


def main() -> None:
    out, modules = sys.argv[1], sys.argv[2:]
    sys.path[0] = os.getcwd()  # as python -m puts it first (not this script's folder)
    for name in SHARED:
        __import__(name)
    with tempfile.TemporaryDirectory() as folder:
        result = {module: _run(module, folder) for module in modules}
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
