#!/usr/bin/env bash
# Builds gpueval against the CUDA LibTorch of a PyTorch install into build-cuda/ (the CPU build in
# build/ is untouched). CUDA, NCCL and the kernels are on when found; the configure step prints one
# "gpueval: Torch X, CUDA ON|OFF, NCCL ON|OFF, kernels ON|OFF" line.
# Usage: scripts/build_cuda.sh [python (default python3)] [extra cmake -D options]
#   TORCH_CUDA_ARCH_LIST (default 9.0, the H200) and BUILD_DIR (default build-cuda) are honoured.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-python3}
[ $# -gt 0 ] && shift
if ! "$python" -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 1)' 2>/dev/null; then
  echo "build_cuda.sh: $python has no CUDA-enabled torch (import torch; torch.version.cuda)" >&2
  exit 2
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
build_dir=${BUILD_DIR:-build-cuda}
# The toolkit is found through nvcc: the one on PATH, else /usr/local/cuda.
cuda_root=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")}
mkdir -p "$build_dir"
start=$(date +%s)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" \
  -DGPUEVAL_TORCH_PYTHON="$(command -v "$python")" \
  -DCUDA_TOOLKIT_ROOT_DIR="$cuda_root" -DCUDAToolkit_ROOT="$cuda_root" \
  -DCMAKE_CUDA_COMPILER="$cuda_root/bin/nvcc" \
  -DTORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}" "$@" >"$build_dir/configure.log" 2>&1 \
  || { tail -40 "$build_dir/configure.log" >&2; exit 1; }
grep '^-- gpueval:' "$build_dir/configure.log"
cmake --build "$build_dir" -j"$(nproc)" --target gpueval gpueval_tests
echo "build_cuda.sh: built $build_dir/gpueval and $build_dir/gpueval_tests in $(( $(date +%s) - start ))s"
