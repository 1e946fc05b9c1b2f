#!/usr/bin/env bash
# Fails, naming each file, where clang-format (Debian's, with the repository's .clang-format) would
# change a tracked C++ or CUDA file. CTest runs it (Format.EveryFileAsClangFormatWritesIt).
# Usage: scripts/check_format.sh [--fix]   (--fix: format those files in place instead)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null; then
  echo "check_format: clang-format is missing (scripts/install_deps.sh installs it)" >&2
  exit 1
fi
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "check_format: not a git checkout; nothing to list, skipped" >&2
  exit 77
fi
bad=0
while IFS= read -r -d '' f; do
  if [ "${1:-}" = "--fix" ]; then
    clang-format -i "$f"
  elif ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "check_format: $f differs from clang-format's output (scripts/check_format.sh --fix)"
    bad=1
  fi
done < <(git ls-files -z -- '*.cpp' '*.h' '*.cu' '*.cuh')
exit $bad
