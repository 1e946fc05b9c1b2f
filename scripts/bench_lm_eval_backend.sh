#!/usr/bin/env bash
# lm-eval's CLI with --model hf beside --model gpueval (not part of CI): makes or reuses lm-eval's
# venv outside the repository (scripts/lmeval_venv.sh), installs ./python into it, makes sure
# build/gpueval exists, and runs scripts/bench_lm_eval_backend.py with the given arguments, offline.
# Usage: scripts/bench_lm_eval_backend.sh [--reps 1] [--workloads startup,mmlu,gsm8k] [--limit 50]
#                                         [--gen-limit 16] [--gpus cpu:2] [--work DIR] [--gpueval PATH]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lmeval_venv.sh
lmeval_with_package scripts/bench_lm_eval_backend.py "$@"
