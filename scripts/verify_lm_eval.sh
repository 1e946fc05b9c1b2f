#!/usr/bin/env bash
# Compares gpueval with lm-evaluation-harness itself (not part of CI): creates or reuses a venv
# OUTSIDE the repository (default ../venv-lmeval beside the checkout; LMEVAL_VENV=DIR to choose)
# with lm-eval[hf] (torch, transformers, datasets) from PyPI, makes sure build/gpueval exists, and
# runs scripts/verify_lm_eval.py with the given arguments, fully offline. Exit 1 on a mismatch.
# Usage: scripts/verify_lm_eval.sh [--limit 20] [--shots 0,5] [--mmlu a,b,c] [--extra hellaswag,arc_easy]
#                                  [--suite piqa,...] [--mmlu-cont a,b] [--mmlu-cont-shots 0,5]
#                                  [--suite-limit 30] [--gpueval PATH] [--work DIR] [--table FILE]
#        scripts/verify_lm_eval.sh --chat [--chat-limit 5] [--chat-gen-limit 3] [--gpueval PATH] [--work DIR]
#          (chat templates only: apply_chat_template, fewshot_as_multiturn, system_instruction on two
#           random init-model checkpoints, llama3 and Mistral+chatml.jinja; see verify_lm_eval.py)
# e.g. LMEVAL_VENV=.venv-lmeval GPUEVAL_BIN=build/gpueval scripts/verify_lm_eval.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# GPUEVAL_BIN=PATH (or --gpueval PATH) compares another binary and builds nothing.
. scripts/lmeval_venv.sh
if [ "$own_binary" = 1 ] && [ ! -x build/gpueval ]; then
  if [ -f build/build.ninja ]; then cmake --build build --target gpueval; else bash scripts/build.sh; fi
fi
exec "$venv/bin/python" scripts/verify_lm_eval.py "$@"
