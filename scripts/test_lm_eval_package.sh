#!/usr/bin/env bash
# The lm-eval package's tests (python/tests, CTest's Python.LmEvalPackage): makes or reuses a venv
# (LMEVAL_PACKAGE_VENV=DIR, default build/venv-lm-eval) holding lm-eval from PyPI (0.4.13, the
# version verified; no torch: the package needs none), installs ./python into it as a user would
# (pip install ./python), and runs the tests against GPUEVAL_BIN (default build/gpueval).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${LMEVAL_PACKAGE_VENV:-build/venv-lm-eval}"
export GPUEVAL_BIN="$(realpath "${GPUEVAL_BIN:-build/gpueval}")"
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# The launcher's cache of lm-eval's task index (python/gpueval_lm_eval/task_index.py) in the build
# folder, not the home directory.
export GPUEVAL_LM_EVAL_INDEX_CACHE="${GPUEVAL_LM_EVAL_INDEX_CACHE:-$PWD/build/lm-eval-index-cache}"
if ! "$venv/bin/python" -c 'import lm_eval' 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check 'lm-eval==0.4.13'
fi
# The package itself, as `pip install ./python` installs it (its one dependency is there already).
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps --force-reinstall ./python
exec "$venv/bin/python" -m unittest discover -s python/tests -v
