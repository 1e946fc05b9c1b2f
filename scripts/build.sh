#!/usr/bin/env bash
# Installs the build dependencies (if missing) and builds gpueval into build/: the `gpueval`
# target and what it loads at run time (the SentencePiece module, a dependency of the core
# library), not the test executables (scripts/test.sh builds those).
# Usage: scripts/build.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" "$@" >/dev/null
cmake --build build -j"$(nproc)" --target gpueval
