#!/usr/bin/env bash
# Per model family, gpueval against lm-evaluation-harness's HFLM on real tasks (not part of CI):
# runs scripts/verify_hflm_families.py offline in lm-eval's venv (scripts/lmeval_venv.sh: LMEVAL_VENV=DIR,
# created with lm-eval[hf] from PyPI when missing). Builds nothing: --gpueval PATH or GPUEVAL_BIN, else build/gpueval.
# e.g. LMEVAL_VENV=.venv-gpu scripts/verify_hflm_families.sh --gpueval build/gpueval --limit 10
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lmeval_venv.sh
exec "$venv/bin/python" scripts/verify_hflm_families.py "$@"
