#!/usr/bin/env bash
# Builds gpueval and every test executable, then runs the whole test suite (GoogleTest through
# CTest). Tests that need ../shared (real model, tokenizers, references) skip with a message
# when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cmake --build build -j"$(nproc)"  # every target: gpueval_tests, gpueval_slurm_tests, ...
# The code sandbox's tests fail, not skip, where bubblewrap or user namespaces are missing
# (install_deps.sh installs bubblewrap): CI must run them.
export GPUEVAL_REQUIRE_SANDBOX=1
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 600
# The same parsers and wire under AddressSanitizer + UndefinedBehaviorSanitizer, and each fuzz
# target for 20 s (scripts/sanitize.sh; its own build in build-fuzz/).
bash scripts/sanitize.sh
