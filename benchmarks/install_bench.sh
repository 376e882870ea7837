#!/usr/bin/env bash
# Install what benchmarks/vs_torchscale.py and benchmarks/profile_step.py need besides the
# library, from the repository root: torch (CPU), fairscale and xprof through the `bench`
# extra, then torchscale 0.3.0 without its dependencies (it pins timm, which pulls torchvision
# and with it a multi-GB CUDA torch; the benchmark shims the one timm function torchscale
# imports, drop_path).
#
# fairscale 0.4.0 also installs a top-level package named `benchmarks` (its own benchmark
# scripts) into site-packages. A regular package there shadows this repository's `benchmarks/`
# folder (a namespace package), so every `python -m benchmarks.<script>` would fail with "No
# module named benchmarks.<script>". The last step deletes that folder when it holds nothing but
# files fairscale's RECORD lists (fairscale itself never imports them).
set -euo pipefail
cd "$(dirname "$0")/.."
pip install -e ".[bench]"
pip install --no-deps torchscale==0.3.0
python - <<'PY'
import importlib.metadata
import pathlib
import shutil

dist = importlib.metadata.distribution("fairscale")
root = pathlib.Path(dist.locate_file("benchmarks"))
listed = {pathlib.Path(dist.locate_file(f)).resolve() for f in dist.files or ()}
present = {p.resolve() for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
if root.is_dir() and present <= listed:
    shutil.rmtree(root)
    print(f"removed fairscale's top-level 'benchmarks' package from {root.parent}")
PY
python -c "import benchmarks, fairscale, torchscale; print('benchmarks:', list(benchmarks.__path__))"
