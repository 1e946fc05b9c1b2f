#!/usr/bin/env bash
# lm-eval's hf model against its gpueval model (python/gpueval_lm_eval), task by task (not part of
# CI): makes or reuses lm-eval's venv outside the repository (scripts/lmeval_venv.sh), installs
# ./python into it, makes sure build/gpueval exists, and runs scripts/verify_lm_eval_backend.py with
# the given arguments, fully offline. Exit 1 on a mismatch.
# Usage: scripts/verify_lm_eval_backend.sh [--limit 20] [--gen-limit 5] [--tasks a,b] [--gpus cpu:1]
#                                          [--work DIR] [--gpueval PATH]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lmeval_venv.sh
lmeval_with_package scripts/verify_lm_eval_backend.py "$@"
