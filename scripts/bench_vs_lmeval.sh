#!/usr/bin/env bash
# gpueval beside lm-evaluation-harness on issue 17's workload (MMLU 5-shot, 4 subjects x 25
# questions, a random 134M Llama with the Mistral tokenizer, float32, this machine's CPU): wall
# times, tokens computed and agreement, as a table (scripts/bench_vs_lmeval.py says what each
# column is). Not in CI: about 12 minutes on 2 cores. Uses lm-eval's venv from
# scripts/verify_lm_eval.sh (LMEVAL_VENV=DIR, default ../venv-lmeval), builds build/gpueval if
# missing (GPUEVAL_BIN=PATH or --gpueval PATH compares another binary).
# Usage: scripts/bench_vs_lmeval.sh [--reps 3] [--work DIR] [--lm-eval-batch 1] [--no-speed] [--no-first-run]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lmeval_venv.sh
if [ "$own_binary" = 1 ]; then
  if [ -f build/build.ninja ]; then cmake --build build --target gpueval; else bash scripts/build.sh; fi
fi
exec "$venv/bin/python" scripts/bench_vs_lmeval.py "$@"
