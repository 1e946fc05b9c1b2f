# Sourced by scripts/verify_lm_eval.sh, scripts/bench_vs_lmeval.sh and the lm-eval package's scripts (from the repository root):
# sets $venv to lm-eval's venv OUTSIDE the repository (LMEVAL_VENV=DIR, default ../venv-lmeval
# beside the checkout), creating it with lm-eval[hf] from PyPI when it lacks lm_eval, torch or
# transformers; sets $own_binary to 0 when GPUEVAL_BIN or --gpueval (in "$@") names the binary to
# compare, else 1; and exports the offline switches for Hugging Face libraries.
venv="${LMEVAL_VENV:-$(cd .. && pwd)/venv-lmeval}"
case "$venv" in "$(pwd)"/*) echo "$(basename "$0"): the venv must be outside the repository" >&2; exit 2 ;; esac
if ! "$venv/bin/python" -c 'import lm_eval, torch, transformers' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q 'lm-eval[hf]'
fi
own_binary=1
[ -n "${GPUEVAL_BIN:-}" ] && own_binary=0
for a in "$@"; do case "$a" in --gpueval|--gpueval=*) own_binary=0 ;; esac; done
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# lmeval_with_package SCRIPT ARGS...: for the scripts that run lm-eval's `gpueval` model
# (verify_lm_eval_backend.sh, bench_lm_eval_backend.sh): builds build/gpueval when it is the binary
# compared and missing, installs ./python into the venv, and runs SCRIPT with the venv's python.
lmeval_with_package() {
  if [ "$own_binary" = 1 ] && [ ! -x build/gpueval ]; then
    if [ -f build/build.ninja ]; then cmake --build build --target gpueval; else bash scripts/build.sh; fi
  fi
  "$venv/bin/pip" install -q --no-deps --force-reinstall ./python
  exec "$venv/bin/python" "$@"
}
