#!/usr/bin/env bash
# Builds gpueval + gpueval_tests against a PyTorch install's CUDA LibTorch with the bundle
# (scripts/gpu/bundle.sh) as the only prefix: /usr and /usr/local are ignored by every find_*
# (CMAKE_IGNORE_PREFIX_PATH), pkg-config reads only the bundle's .pc files, so a build that succeeds
# here needs nothing of the system's Debian -dev packages. The same script builds the binaries that
# bundle.sh carries (route b) and the fallback build on the device (route a).
#   scripts/gpu/build_bundled.sh BUNDLE PYTHON BUILD_DIR
# Env: JOBS (default nproc), TORCH_CUDA_ARCH_LIST (default 9.0). Prints the configure summary line,
# then "build_bundled: <dir> in <s>s (-j<n>)"; configure/build output goes to BUILD_DIR/*.log.
# Ends with a leak check: no include or library the build used may come from the system prefixes.
set -euo pipefail
cd "$(dirname "$0")/../.."
bundle=$(cd "$1" && pwd)
python=$2
dir=$3
jobs=${JOBS:-$(nproc)}
prefix=$bundle/prefix/usr
[ -f "$prefix/include/yaml-cpp/yaml.h" ] || { echo "build_bundled: $bundle has no prefix (run scripts/gpu/bundle.sh)" >&2; exit 2; }
cuda_root=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")}
cuda=()
[ -x "$cuda_root/bin/nvcc" ] && cuda=(-DCUDA_TOOLKIT_ROOT_DIR="$cuda_root" -DCUDAToolkit_ROOT="$cuda_root"
                                      -DCMAKE_CUDA_COMPILER="$cuda_root/bin/nvcc")
mkdir -p "$dir"
start=$(date +%s)
# The $ORIGIN entry lets the stripped copies in BUNDLE/build/ find the bundle's libraries wherever the
# checkout lies; the build tree itself also gets CMake's absolute entries.
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_IGNORE_PREFIX_PATH="/usr;/usr/local" -DCMAKE_PREFIX_PATH="$prefix" \
  -DPKG_CONFIG_EXECUTABLE="$bundle/bin/pkg-config" \
  -DGPUEVAL_TORCH_PYTHON="$(command -v "$python")" "${cuda[@]}" \
  -DTORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}" \
  -DCMAKE_BUILD_RPATH='$ORIGIN/../prefix/usr/lib/x86_64-linux-gnu' >"$dir/configure.log" 2>&1 \
  || { tail -40 "$dir/configure.log" >&2; exit 1; }
grep '^-- gpueval:' "$dir/configure.log" || true
cmake --build "$dir" -j"$jobs" --target gpueval gpueval_tests >"$dir/build.log" 2>&1 \
  || { grep -E 'error|Error' "$dir/build.log" | head -30 >&2; tail -20 "$dir/build.log" >&2; exit 1; }
echo "build_bundled: $dir in $(($(date +%s) - start))s (-j$jobs)"

# Leak check: the headers every object read (ninja's deps log) and the libraries on the link lines.
hidden='^/usr(/local)?/(include/(yaml-cpp|fmt|nlohmann|gtest|gmock|CLI|sentencepiece|torch|ATen|c10|caffe2)/|include/(sqlite3|sqlite3ext|pcre2|zlib|zconf)\.h|lib/x86_64-linux-gnu/lib(yaml-cpp|fmt|sqlite3|pcre2|sentencepiece|z|gtest|gmock|torch|c10)[._])'
leaks=$( { ninja -C "$dir" -t deps 2>/dev/null | sed -n 's/^ *//p'
           ninja -C "$dir" -t commands gpueval gpueval_tests 2>/dev/null | tr ' ' '\n'; } \
         | grep -E "$hidden" | sort -u | head -5 || true)
if [ -n "$leaks" ]; then
  echo "build_bundled: LEAK: the build used system files:" >&2
  echo "$leaks" >&2
  exit 3
fi
echo "build_bundled: leak check passed (no header or library from /usr or /usr/local's -dev packages)"
