#!/usr/bin/env bash
# Installs the Debian packages gpueval builds against. Idempotent: re-running
# only installs what is missing.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config ccache
      libtorch-dev libopenblas0-pthread nlohmann-json3-dev libfmt-dev
      libdnnl-dev  # oneDNN, the library Debian's LibTorch links: float32 products on the CPU (src/model/kernels/cpu_matmul.h)
      libsleef-dev  # Sleef, which Debian's LibTorch loads too: the exponential of CPU attention's softmax (src/model/kernels/tile_softmax.h)
      libyaml-cpp-dev libgtest-dev libgmock-dev libsqlite3-dev libpcre2-dev
      libsentencepiece-dev libcli11-dev zlib1g-dev
      python3-venv  # the lm-eval package's tests: a venv with lm-eval from PyPI (scripts/test_lm_eval_package.sh)
      bubblewrap libseccomp-dev python3  # the code sandbox: one bwrap per program, its seccomp filter, the interpreter (src/sandbox/)
      libicu-dev  # ICU: Unicode normalization (NFC, NFKC, ...) and full case mapping (src/common/unicode_text.h)
      clang-format  # the style check (scripts/check_format.sh, .clang-format)
      slurm-wlm munge)  # Slurm: `gpueval slurm` and the single-node cluster tests (tests/slurm/)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "[setup] all build dependencies present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
echo "[setup] installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
