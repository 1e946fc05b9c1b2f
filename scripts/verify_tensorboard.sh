#!/usr/bin/env bash
# gpueval's TensorBoard event files read back by TensorBoard's own EventAccumulator (not part of
# CI): scripts/verify_tensorboard.py in a venv outside the repository with tensorboard and numpy
# from PyPI (TENSORBOARD_VENV=DIR, default ../venv-tensorboard, created when it lacks them).
# Builds nothing: --gpueval PATH or GPUEVAL_BIN, else build/gpueval.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${TENSORBOARD_VENV:-$(cd .. && pwd)/venv-tensorboard}"
case "$venv" in "$(pwd)"/*) echo "$(basename "$0"): the venv must be outside the repository" >&2; exit 2 ;; esac
if ! "$venv/bin/python" -c 'import tensorboard, numpy' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q tensorboard numpy
fi
exec "$venv/bin/python" scripts/verify_tensorboard.py "$@"
