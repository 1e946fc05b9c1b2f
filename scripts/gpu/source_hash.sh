#!/usr/bin/env bash
# Prints a 16-hex-digit hash of the sources a gpueval build reads (CMakeLists.txt, cmake/, include/,
# src/, kernels/, tests/), by content and relative path, without git: scripts/gpu/bundle.sh records it
# in the bundle's MANIFEST and scripts/gpu_check.sh compares it on the device, where a checkout that
# changed since the bundle's binaries were built is rebuilt from source rather than tested stale.
set -euo pipefail
cd "$(dirname "$0")/../.."
find CMakeLists.txt cmake include src kernels tests -type f ! -name '*.pyc' ! -path '*/__pycache__/*' \
  | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16
