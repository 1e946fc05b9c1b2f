#!/usr/bin/env bash
# lm-eval's CLI with --model hf beside --model gpueval (not part of CI): makes or reuses lm-eval's
# venv outside the repository (scripts/lmeval_venv.sh: torch and transformers, for the hf side), and
# the package's own venv as its users make it (GPUEVAL_LM_VENV=DIR, default ../venv-gpueval-lm:
# `pip install ./python`, lm-eval without torch, for the gpueval side), makes sure build/gpueval
# exists, and runs scripts/bench_lm_eval_backend.py with the given arguments, offline.
# Usage: scripts/bench_lm_eval_backend.sh [--reps 1] [--workloads startup,mmlu,gsm8k] [--limit 50]
#                                         [--gen-limit 16] [--gpus cpu:2] [--cpu-threads 1] [--warm-cache]
#                                         [--work DIR] [--gpueval PATH]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lmeval_venv.sh
lean="${GPUEVAL_LM_VENV:-$(cd .. && pwd)/venv-gpueval-lm}"
if ! "$lean/bin/python" -c 'import lm_eval' 2>/dev/null; then
  python3 -m venv "$lean"
  "$lean/bin/pip" install -q --upgrade pip
  "$lean/bin/pip" install -q ./python
fi
"$lean/bin/pip" install -q --no-deps --force-reinstall ./python
lmeval_with_package scripts/bench_lm_eval_backend.py --gpueval-python "$lean/bin/python" "$@"
