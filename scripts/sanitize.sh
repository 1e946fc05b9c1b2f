#!/usr/bin/env bash
# The sanitizer and fuzzing build and its checks: build-fuzz/, clang with -DGPUEVAL_FUZZ=ON, so every
# object has AddressSanitizer + UndefinedBehaviorSanitizer and libFuzzer coverage (cmake/sanitize.cmake).
#   scripts/sanitize.sh                  build; the parser, wire and CPU kernel unit tests under the sanitizers;
#                                        then every fuzz target for 20 s (what CI runs)
#   scripts/sanitize.sh --all-tests      the whole unit suite under the sanitizers instead of the
#                                        parser, wire and CPU kernel tests
#   scripts/sanitize.sh --fuzz SECONDS   seconds per fuzz target (0: none)
# Installs clang and its libFuzzer runtime (Debian clang, libclang-rt-14-dev) if missing. Prints the
# time of each step. A sanitizer report, a failed test or a fuzzing finding exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
all_tests=0 fuzz_seconds=20
while [ $# -gt 0 ]; do
  case $1 in
    --all-tests) all_tests=1; shift ;;
    --fuzz) fuzz_seconds=$2; shift 2 ;;
    *) echo "sanitize.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
bash scripts/install_deps.sh
if ! command -v clang++ >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  echo "[sanitize] installing clang libclang-rt-14-dev"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends clang libclang-rt-14-dev
fi
step() { echo "[sanitize] $1: $(( $(date +%s) - t0 )) s"; t0=$(date +%s); }
t0=$(date +%s)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" \
      -DGPUEVAL_FUZZ=ON >/dev/null
cmake --build build-fuzz -j"$(nproc)"
step "build (clang, ASan+UBSan, libFuzzer)"

# Leaks are reported for the parser tests; LibTorch's own start-up allocations are not ours to fix,
# so the whole suite runs without leak detection. A finding aborts (-fno-sanitize-recover).
parsers='Safetensors*:Llama2c*:ModelConfig*:AddedToken*:BpeModel*:Decoder*:Digits*:Metaspace*:PostProcessor*'
parsers+=':PreTokenizer*:Regex*:SplitBehavior*:TokenizerConfig*:Unsupported*:TokenizerLoad*:ReferenceTokenizer*'
parsers+=':SharedTokenizer*:Csv*:Template*:Task*:RunConfig*:ResolveAddBos*:Wire*:FrameChannel*:Filters*'
parsers+=':FuzzRegressions*:ArcHellaswag*:DirectoryLock*'
# The model's CPU kernels that index raw buffers (attention tiles, their vector softmax, oneDNN call sites).
parsers+=':CpuAttention*:TileSoftmax*:CpuMatmul*:CpuParallel*'
# The generation engine's bookkeeping (rows refilled, prompts prefilled a chunk at a time beside the
# decoding rows) and the ragged forward under it, on every family.
parsers+=':ContinuousBatching*:GenerateRowCheck*:Families/ArchitectureFixture.ARaggedForward*'
# Batches joining a running generation (the look-ahead), and the Jinja engine and chat templates
# (hostile templates are untrusted input: the corpus, the differential fixture, lm-eval's requests).
parsers+=':Executor.BatchesThatJoin*:DispatchTest*:ChatTemplate*:JinjaEngine*:ChatRequests*'
# The code sandbox: its pipes, /proc parsing and descriptor juggling, the hostile battery, and the
# run's program runner (its threads beside the caller's). Not the code-task runs end to end
# (CodeTask.ARun...): an ASan gpueval run counted a program as timed out at the wall-clock ceiling
# in 2 of 40 tries under load (sessions 29 and 30; never in the gcc build, 0 of 70 outside gtest).
# Until that is understood they run in the main suite only.
parsers+=':Sandbox*:Hostile/SandboxBattery*:ExecuteCommand*:CodeTask.HumanEval*:CodeTask.PassAtK*'
parsers+=':CodeTask.TheProgramRunner*:CodeTask.Mbpp*:CodeTask.DocumentRange*:CodeTask.BitsPerByte*'
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
if [ "$all_tests" = 1 ]; then
  ASAN_OPTIONS=detect_leaks=0 ctest --test-dir build-fuzz --output-on-failure -j"$(nproc)" --timeout 1200 -LE fuzz
  step "whole unit suite under ASan+UBSan"
else
  ASAN_OPTIONS=detect_leaks=0 build-fuzz/gpueval_tests --gtest_filter="$parsers" --gtest_brief=1
  step "parser, wire and CPU kernel tests under ASan+UBSan"
fi
if [ "$fuzz_seconds" -gt 0 ]; then
  # Two targets at a time on two cores; each prints its executions, edges and findings.
  targets=(safetensors checkpoint_index model_config llama2c_checkpoint tokenizer_json llama2c_tokenizer task_yaml
           jsonl run_config csv hellaswag template wire)
  rc=0
  printf '%s\n' "${targets[@]}" | xargs -P "$(nproc)" -I{} scripts/fuzz.sh {} "$fuzz_seconds" --build build-fuzz || rc=1
  step "fuzz ${#targets[@]} targets, $fuzz_seconds s each"
  exit $rc
fi
