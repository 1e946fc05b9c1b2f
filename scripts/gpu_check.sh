#!/usr/bin/env bash
# One-command GPU check (issues 7, 15), under 8 minutes on one H200, no network:
#   scripts/gpu_check.sh [--out DIR]   # a machine with a CUDA GPU and a python3 with torch + transformers
#   scripts/gpu_check.sh --cpu-smoke   # the same steps on the CPU: small model, float32, cpu:1 / cpu:2
#   scripts/gpu_check.sh --rehearse    # here, before a GPU is used: the CPU steps from .gpu-bundle alone,
#                                      # with the system's Debian -dev packages hidden (unshare -m)
# With a bundle (.gpu-bundle/ from scripts/gpu/bundle.sh, or --bundle DIR / $GPUEVAL_BUNDLE) it needs
# nothing beyond the checkout: the data come from the bundle, and the build is the bundle's carried
# binaries when they were built for this python's torch version, else (one line says so) a build from
# source against this torch with the bundle as the only prefix (scripts/gpu/build_bundled.sh);
# --rebuild forces the latter. Without a bundle it builds with scripts/build_cuda.sh as before.
# Steps: find python (torch, transformers) and the GPU; the device's peak (summarize.py peak); the
# build; the GPU unit tests (KernelsCuda.* and the CUDA instantiations of the device-parameterised
# tests, CUDA/*); a random-weight Llama-3-shaped 1.2B model (scripts/gpu/make_llama.py); our logits
# against LlamaForCausalLM in float32 and bfloat16 (compare_logits.py); MMLU 5-shot --limit with
# --gpus 0 and --gpus 0,0 (accuracy, measured tok/s, byte-equal samples); the same requests through a
# plain transformers loop (hf_score_bench.py); MFU of the device's peak (the smoke: of the CPU's);
# a real CUDA OOM met by `gpueval calibrate`'s probe; `load: broadcast` with two workers on one
# GPU (falls back to per-worker mmap; the row says what ran). Ends with one table
# (check | result | pass/fail) and exits 1 if a check failed.
# The table (table.txt), the log of every step (gpu_check.log) and the figures go to one folder:
# --out DIR, else $GPU_CHECK_OUT, else $OUT, else /tmp/gpu_check; the model and run directories to
# ${GPU_CHECK_WORK:-/tmp/gpu_check_work}.
# Env: GPUEVAL_BIN (a built gpueval: skips the build), GPUEVAL_TEST_PYTHON (the python to use),
#   GPUEVAL_SHARED_DATA (the shared data dir: tokenizers/llama3, mmlu; default the bundle's data/, then
#   ../shared/data, shared/data), GPU_CHECK_LIMIT (MMLU docs per subject; 60 on GPU, 25 in the smoke),
#   GPU_CHECK_PEAK_TFLOPS (the device's peak, where summarize.py has none for it),
#   GPU_CHECK_DEADLINE_S (450), GPU_CHECK_OOM_SPARE_GIB (GPU memory left to the probe beyond the weights; 4),
#   GPU_CHECK_BUILD_LIMIT_S (the rehearsal's from-source build limit; 3600), JOBS (its parallelism),
#   GPU_CHECK_MODEL (llama, or moe: make_llama.py's Mixtral of 8 of 64 experts in every step).
# Every figure is checked (scripts/gpu/summarize.py): a time under 10 ms, MFU above 100% of the device's
# peak or tokens/s above what the peak allows fail their row.
# In --cpu-smoke without a python holding torch + transformers, the model comes from `gpueval init-model`
# and the rows that need transformers are skipped, with their reason; no shared data is a skip: exit 77.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
args=("$@")
mode=gpu
rehearse=0
rebuild=0
out_dir=${GPU_CHECK_OUT:-${OUT:-/tmp/gpu_check}}
bundle=${GPUEVAL_BUNDLE:-}
[ -z "$bundle" ] && [ -f .gpu-bundle/MANIFEST ] && bundle=$repo/.gpu-bundle
while [ $# -gt 0 ]; do
  case $1 in
    --cpu-smoke) mode=cpu; shift ;;
    --rehearse) mode=cpu; rehearse=1; shift ;;
    --rebuild) rebuild=1; shift ;;
    --out) out_dir=$2; shift 2 ;;
    --bundle) bundle=$(cd "$2" && pwd); shift 2 ;;
    *) echo "usage: scripts/gpu_check.sh [--cpu-smoke | --rehearse] [--rebuild] [--out DIR] [--bundle DIR]" >&2; exit 2 ;;
  esac
done
if [ "$rehearse" = 1 ]; then
  [ -n "$bundle" ] && [ -f "$bundle/MANIFEST" ] || { echo "gpu_check --rehearse: no bundle (run scripts/gpu/bundle.sh)" >&2; exit 2; }
  if [ -z "${GPU_CHECK_HIDDEN:-}" ]; then
    # Again, in a private mount namespace where the system's -dev packages are hidden.
    exec unshare -m --propagation private env GPU_CHECK_HIDDEN=1 GPUEVAL_BUNDLE="$bundle" \
      bash "$repo/scripts/gpu/hide_system.sh" bash "$repo/scripts/gpu_check.sh" "${args[@]}"
  fi
fi
OUT=$out_dir
# No network there: nothing may wait on the hub.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
work=${GPU_CHECK_WORK:-/tmp/gpu_check_work}
mkdir -p "$OUT" "$work"
log=$OUT/gpu_check.log
: >"$log"
start=$(date +%s)
deadline=$((start + ${GPU_CHECK_DEADLINE_S:-450}))
rows=()
failed=0

say() { echo "$*" | tee -a "$log"; }
row() {  # check, result, PASS|FAIL|SKIP
  rows+=("$1"$'\x1f'"$2"$'\x1f'"$3")
  [ "$3" = FAIL ] && failed=1
  say "== $1: $2 [$3]"
  return 0
}
left() {  # seconds a step may take: min(want, time to the deadline less a 10 s reserve), at least 5
  local want=$1 rest=$((deadline - $(date +%s) - 10))
  [ "$rest" -lt "$want" ] && want=$rest
  [ "$want" -lt 5 ] && want=5
  echo "$want"
}
step() {  # NAME SECONDS CMD...: runs CMD under timeout, output appended to the log; returns its status
  local name=$1 secs=$2
  shift 2
  local t0=$(date +%s) rc=0
  say "---- $name (limit ${secs}s): $*"
  local from=$(($(wc -l <"$log") + 1))
  timeout --kill-after=5 "$secs" "$@" >>"$log" 2>&1 || rc=$?
  [ "$rc" != 0 ] && tail -n +"$from" "$log" | tail -15 | sed "s/^/[$name] /"
  say "---- $name: exit $rc in $(($(date +%s) - t0))s"
  [ "$rc" = 124 ] && say "---- $name: TIMED OUT"
  return "$rc"
}
field() { "$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], dict(d)))' "$@"; }
table() {
  local total=$(($(date +%s) - start))
  {
    echo
    printf '%-32s | %-62s | %s\n' check result pass/fail
    printf '%s\n' "---------------------------------+----------------------------------------------------------------+----------"
    for r in "${rows[@]}"; do
      IFS=$'\x1f' read -r c res st <<<"$r"
      printf '%-32s | %-62s | %s\n' "$c" "$res" "$st"
    done
    echo "mode: $mode$([ "$rehearse" = 1 ] && echo " (rehearsal)"); bundle: ${bundle:-none}; total wall time ${total}s; log: $log"
  } | tee -a "$log" | tee "$OUT/table.txt"
}

# ---- 1. python with torch and transformers; the GPU
# The smoke runs without them too (CI has no torch): the model then comes from `gpueval init-model`,
# and the rows that need transformers say they are skipped and why; the figures are still checked.
py=
have_torch=1
for cand in ${GPUEVAL_TEST_PYTHON:-} python3 /opt/torch/.venv/bin/python3; do
  command -v "$cand" >/dev/null 2>&1 || continue
  if "$cand" -c 'import torch, transformers' >/dev/null 2>&1; then py=$(command -v "$cand"); break; fi
done
if [ -z "$py" ] && [ "$mode" = cpu ] && [ "$rehearse" = 0 ] && command -v python3 >/dev/null 2>&1; then
  py=$(command -v python3)
  have_torch=0
fi
if [ -z "$py" ]; then
  if [ "$mode" = cpu ]; then echo "gpu_check --cpu-smoke: SKIP: no python3"; exit 77; fi
  row python "no python3 with torch and transformers" FAIL
  table
  exit 1
fi
if [ "$have_torch" = 1 ]; then
  versions=$("$py" -c 'import sys, torch, transformers; print(f"python {sys.version.split()[0]}, torch {torch.__version__} (cuda {torch.version.cuda}, available {torch.cuda.is_available()}), transformers {transformers.__version__}")')
else
  versions="python $("$py" -c 'import sys; print(sys.version.split()[0])'), no torch/transformers"
fi
say "$py: $versions"
if [ "$have_torch" = 0 ]; then
  row python "${versions:0:40}: transformers rows skip" SKIP
elif [ "$mode" = gpu ]; then
  nvidia-smi -L 2>&1 | tee -a "$log" || true
  if "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    row python+GPU "$(nvidia-smi -L 2>/dev/null | head -1 | cut -c1-40); ${versions#python }" PASS
  else
    row python+GPU "torch sees no CUDA GPU: $versions" FAIL
    table
    exit 1
  fi
else
  row python "${versions:0:62}" PASS
fi
if [ "$rehearse" = 1 ]; then
  if [ ! -s /usr/include/yaml-cpp/yaml.h ] && [ ! -s /usr/include/sqlite3.h ]; then
    row "system -dev packages hidden" "${GPU_CHECK_HIDDEN_SUMMARY:-?} (unshare -m)" PASS
  else
    row "system -dev packages hidden" "/usr/include/yaml-cpp/yaml.h still visible" FAIL
  fi
fi
if [ -n "$bundle" ]; then
  # Every library of the bundle must load with this system's glibc and libstdc++ (ldd resolves each
  # dependency and checks its symbol versions: "not found" either way is a failure).
  nlib=0 bad=()
  for f in "$bundle"/prefix/usr/lib/x86_64-linux-gnu/*.so.*; do
    [ -L "$f" ] && continue
    nlib=$((nlib + 1))
    out=$(ldd "$f" 2>&1) || true
    grep -q 'not found' <<<"$out" && bad+=("$(basename "$f"): $(grep -m1 'not found' <<<"$out" | tr -s ' \t' ' ')")
  done
  glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | cut -d' ' -f2)
  cxx=$(strings "$(ldconfig -p | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')" 2>/dev/null | grep -E '^GLIBCXX_[0-9.]+$' | sort -V | tail -1)
  need=$(sed -n 's/^\[needs\] //p' "$bundle/MANIFEST")
  say "bundle: $(head -1 "$bundle/MANIFEST"); needs $need; this system: glibc $glibc, ${cxx:-GLIBCXX ?}"
  if [ "${#bad[@]}" = 0 ] && [ "$nlib" -gt 0 ]; then
    row "bundle libraries load" "$nlib .so (ldd); glibc $glibc, ${cxx#GLIBCXX_} here" PASS
  else
    row "bundle libraries load" "${bad[0]:-no libraries in $bundle}" FAIL
  fi
fi
data=
for d in ${GPUEVAL_SHARED_DATA:-} ${bundle:+$bundle/data} ../shared/data shared/data; do
  [ -f "$d/tokenizers/llama3/tokenizer.json.gz" ] && [ -d "$d/mmlu/test" ] && { data=$(cd "$d" && pwd); break; }
done
if [ -z "$data" ]; then
  if [ "$mode" = cpu ]; then echo "gpu_check --cpu-smoke: SKIP: no shared data (tokenizers/llama3, mmlu); set GPUEVAL_SHARED_DATA"; exit 77; fi
  row "shared data" "no tokenizers/llama3 and mmlu/ (set GPUEVAL_SHARED_DATA)" FAIL
  table
  exit 1
fi

# ---- 4 (started first, beside the build). The model, and the device's peak.
# The MMLU runs are sized so that scoring takes seconds, not milliseconds (docs/gpu.md):
# on the GPU, --limit 60 per subject is 3,420 documents, 13,680 requests, 8.15M requested and 334k
# computed tokens (counted on the CPU with the same tokenizer and data): 6.7e14 model FLOPs for the
# 1.24B model, so at least 0.68 s at 100% of an H200's 989 TFLOP/s and 1.7-3.4 s at 20-40% MFU;
# transformers' loop computes all 8.15M (1.6e16 FLOPs, ~30-80 s). On the CPU, the smoke's model
# (36.8M parameters, 3.9M in its layers: make_llama.py --size smoke, or the same shape from `gpueval
# init-model`) on 4 subjects x --limit 25 scores for about a second on 2 cores.
# GPU_CHECK_MODEL=moe: every step on make_llama.py's mixture of experts instead (a Mixtral, 8 of 64
# experts: --size moe on the GPU, moe-smoke on the CPU; issue 36).
if [ "$mode" = gpu ]; then size=1b; dtype=bfloat16; device=cuda:0; gpus1=0; gpus2=0,0; limit=${GPU_CHECK_LIMIT:-60}
else size=smoke; dtype=float32; device=cpu; gpus1=cpu:1; gpus2=cpu:2; limit=${GPU_CHECK_LIMIT:-25}; fi
case ${GPU_CHECK_MODEL:-llama} in
  llama) ;;
  moe) if [ "$mode" = gpu ]; then size=moe; else size=moe-smoke; fi ;;
  *) echo "gpu_check: GPU_CHECK_MODEL is llama or moe, not '$GPU_CHECK_MODEL'" >&2; exit 2 ;;
esac
model=$work/llama_$size
rm -rf "$model"
if [ "$have_torch" = 1 ]; then
  say "---- model (background): make_llama.py $model --size $size"
  (timeout 240 "$py" "$repo/scripts/gpu/make_llama.py" "$model" --size "$size" --data "$data" >"$work/model.json" 2>"$work/model.err"
   echo $? >"$work/model.rc") &
  model_pid=$!
else
  model_pid=
fi
if "$py" scripts/gpu/summarize.py peak --device "$device" --dtype "$dtype" >"$OUT/peak.json" 2>>"$log"; then
  say "peak: $(cat "$OUT/peak.json")"
  if [ "$(field "$OUT/peak.json" 'peak_flops is not None')" = True ]; then
    row "device peak" "$(field "$OUT/peak.json" 'f"{peak_flops/1e12:,.3f} TFLOP/s: {source}"')" PASS
  else
    row "device peak" "$(field "$OUT/peak.json" 'source')" FAIL
  fi
else
  echo '{"peak_flops": null, "source": "summarize.py peak failed"}' >"$OUT/peak.json"
  row "device peak" "summarize.py peak failed; see the log" FAIL
fi

# ---- 2. Build against that torch (or the bundle's build for it)
# Carried binaries find the bundle's libraries by RUNPATH ($ORIGIN) and this torch's (and its nvidia
# wheels') through LD_LIBRARY_PATH: the same files python's torch loads.
torch_ld_path() {
  local toolkit=${CUDA_HOME:-/usr/local/cuda}/lib64
  "$py" -c 'import glob, os, sys, torch; d = os.path.dirname(torch.__file__)
dirs = [os.path.join(d, "lib")] + sorted(glob.glob(os.path.join(os.path.dirname(d), "nvidia", "*", "lib")))
print(":".join(dirs + [t for t in sys.argv[1:] if os.path.isdir(t)]))' "$toolkit"
}
bin=${GPUEVAL_BIN:-}
tests_bin=
[ -n "$bin" ] && tests_bin=$(dirname "$bin")/gpueval_tests
from_source=0
if [ -n "$bin" ]; then
  row build "given: $bin" PASS
elif [ -n "$bundle" ]; then
  torch_here=$("$py" -c 'import torch; print(torch.__version__)')
  torch_bundle=$(sed -n 's/^torch_version=//p' "$bundle/MANIFEST")
  if [ "$rebuild" = 1 ]; then
    say "gpu_check: --rebuild: building from source against torch $torch_here with the bundled prefix"
    from_source=1
  elif [ ! -x "$bundle/build/gpueval" ]; then
    say "gpu_check: the bundle carries no build: building from source against torch $torch_here with the bundled prefix"
    from_source=1
  elif [ "$torch_here" != "$torch_bundle" ]; then
    say "gpu_check: torch $torch_here here, but the bundle's build is for torch $torch_bundle: building from source against this torch with the bundled prefix"
    from_source=1
  elif [ "$(scripts/gpu/source_hash.sh)" != "$(sed -n 's/^sources=//p' "$bundle/MANIFEST")" ]; then
    say "gpu_check: the sources changed since the bundle's build: building from source against torch $torch_here with the bundled prefix"
    from_source=1
  else
    export LD_LIBRARY_PATH=$(torch_ld_path)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    missing=$(for f in "$bundle"/build/*; do ldd "$f" 2>&1 | grep 'not found' | sed "s#^#$(basename "$f"): #"; done | head -3 | tr -s ' \t' ' ') || true
    version=$("$bundle/build/gpueval" --version 2>>"$log" | head -1) || true
    if [ -z "$missing" ] && [ -n "$version" ]; then
      bin=$bundle/build/gpueval
      tests_bin=$bundle/build/gpueval_tests
      export GPUEVAL_TASKS_DIR=$repo/tasks  # the binary looks in <its dir>/../tasks otherwise
      say "$(grep '^gpueval: Torch' "$bundle/MANIFEST" || true)"
      row build "carried, for torch $torch_bundle: ldd clean, --version $version" PASS
    else
      say "gpu_check: the bundle's build does not load here (${missing:-gpueval --version failed}): building from source"
      from_source=1
    fi
  fi
  if [ "$from_source" = 1 ]; then
    # On the device: build-cuda/, within the 450 s deadline. The rehearsal: a fresh build-rehearse/
    # on this machine's few cores, which the deadline does not count (it moves by the build's time).
    dir=build-cuda
    build_limit=$(left 400)
    if [ "$mode" = cpu ]; then dir=build-rehearse; build_limit=${GPU_CHECK_BUILD_LIMIT_S:-3600}; rm -rf "$dir"; fi
    t0=$(date +%s)
    rc=0
    step build "$build_limit" scripts/gpu/build_bundled.sh "$bundle" "$py" "$dir" || rc=$?
    [ "$mode" = cpu ] && deadline=$((deadline + $(date +%s) - t0))
    if [ "$rc" = 0 ] && [ -x "$dir/gpueval" ]; then
      bin=$repo/$dir/gpueval
      tests_bin=$repo/$dir/gpueval_tests
      row build "from source, $dir/ in $(($(date +%s) - t0))s -j${JOBS:-$(nproc)} (bundled prefix only)" PASS
    else
      row build "from source failed (exit $rc) after $(($(date +%s) - t0))s; see the log" FAIL
    fi
  fi
elif [ "$mode" = cpu ]; then
  for b in build-cuda/gpueval build/gpueval; do [ -x "$b" ] && { bin=$repo/$b; break; }; done
  if [ -n "$bin" ]; then row build "existing ${bin#$repo/}" PASS; else row build "no build/gpueval (scripts/build.sh)" FAIL; fi
else
  t0=$(date +%s)
  rc=0
  if [ -x scripts/build_cuda.sh ]; then
    step build "$(left 300)" scripts/build_cuda.sh "$py" || rc=$?
  else
    prefix=$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)')
    launcher=()
    command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
    step configure "$(left 120)" cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" "${launcher[@]}" || rc=$?
    [ "$rc" = 0 ] && { step build "$(left 300)" cmake --build build-cuda -j"$(nproc)" --target gpueval gpueval_tests || rc=$?; }
  fi
  if [ "$rc" = 0 ] && [ -x build-cuda/gpueval ]; then
    bin=$repo/build-cuda/gpueval
    tests_bin=$repo/build-cuda/gpueval_tests
    row build "build-cuda/ in $(($(date +%s) - t0))s, -j$(nproc)" PASS
  else
    row build "failed (exit $rc) after $(($(date +%s) - t0))s; see the log" FAIL
  fi
fi

# ---- 3. Unit tests: KernelsCuda.* and the CUDA instantiations of the device-parameterised suites
# (Kernels, TinyModel, ModelBatch: CUDA/*). The rehearsal runs the same binary's CPU instantiations.
if [ "$mode" = gpu ]; then
  filter='KernelsCuda.*:CUDA/*'
  name="GPU unit tests"
elif [ "$rehearse" = 1 ]; then
  filter='KernelsCuda.*:CPU/Kernels.*:CPU/TinyModel.*:CPU/ModelBatch.*'
  name="unit tests (CPU instances)"
fi
if [ "$mode" = cpu ] && [ "$rehearse" = 0 ]; then
  row "GPU unit tests" "skipped (no GPU)" SKIP
elif [ -n "$tests_bin" ] && [ -x "$tests_bin" ]; then
  rc=0
  from=$(($(wc -l <"$log") + 1))
  GPUEVAL_CACHE_DIR=$work/test_cache step unit-tests "$(left 120)" "$tests_bin" --gtest_filter="$filter" --gtest_brief=1 || rc=$?
  tests_out=$(tail -n +"$from" "$log")
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' <<<"$tests_out" | tail -1)
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' <<<"$tests_out" | tail -1)
  failed_n=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' <<<"$tests_out" | tail -1)
  res="${passed:-0} passed, ${skipped:-0} skipped, ${failed_n:-0} failed ($filter)"
  # On the GPU a skipped CUDA test means the device was not seen: a failure, like no test at all.
  if [ "$rc" = 0 ] && [ "${passed:-0}" -gt 0 ] && { [ "$mode" = cpu ] || [ -z "$skipped" ]; }; then
    row "$name" "${res:0:62}" PASS
  else
    row "$name" "exit $rc: ${res:0:52}" FAIL
  fi
else
  row "${name:-GPU unit tests}" "no gpueval_tests beside the binary" FAIL
fi

# ---- 4. The model (wait for the background job, or write it with gpueval init-model)
if [ -n "$model_pid" ]; then
  wait "$model_pid" || true
  cat "$work/model.err" >>"$log" 2>/dev/null || true
  cat "$work/model.json" >>"$log" 2>/dev/null || true
  if [ "$(cat "$work/model.rc" 2>/dev/null)" = 0 ] && [ -s "$work/model.json" ]; then
    cp "$work/model.json" "$OUT/model.json"
    row "model ($size)" "$(field "$work/model.json" 'f"{params/1e9:.3f}B params, {dtype}, made in {seconds:.0f}s"')" PASS
  else
    row "model ($size)" "make_llama.py failed; see the log" FAIL
    model=
  fi
elif [ -n "$bin" ] && [ "${GPU_CHECK_MODEL:-llama}" = moe ]; then
  row "model ($size)" "skipped: the mixture is written by transformers (no torch here)" SKIP
  model=
elif [ -n "$bin" ]; then
  # make_llama.py's smoke shape (Llama-3 tokenizer, tied, 4 layers of 256), written by gpueval itself.
  tok=$work/llama3_tokenizer
  rm -rf "$tok" && mkdir -p "$tok"
  gunzip -c "$data/tokenizers/llama3/tokenizer.json.gz" >"$tok/tokenizer.json"
  cp "$data/tokenizers/llama3/tokenizer_config.json" "$tok/"
  t0=$(date +%s)
  if step init-model "$(left 60)" "$bin" init-model --tokenizer "$tok" --out "$model" --hidden 256 --intermediate 1024 \
      --layers 4 --heads 8 --kv-heads 4 --max-positions 8192 --rope-theta 500000 --tied --seed 1234; then
    row "model ($size)" "gpueval init-model (no torch), made in $(($(date +%s) - t0))s" PASS
  else
    row "model ($size)" "gpueval init-model failed; see the log" FAIL
    model=
  fi
else
  row "model ($size)" "skipped (no binary)" FAIL
  model=
fi
if [ -n "$model" ] && ! "$py" scripts/gpu/summarize.py model "$model" >"$OUT/model_info.json" 2>>"$log"; then
  row "model FLOPs" "summarize.py model failed; see the log" FAIL
fi

# ---- 5. Logits against LlamaForCausalLM, in float32 and in bfloat16 (the smoke: float32 only)
logit_dtypes=(float32 bfloat16)
[ "$mode" = cpu ] && [ "$rehearse" = 0 ] && logit_dtypes=(float32)
for ld in "${logit_dtypes[@]}"; do
  short=${ld/float32/fp32}
  short=${short/bfloat16/bf16}
  if [ "$have_torch" = 0 ]; then row "logits vs transformers ($short)" "skipped: no torch/transformers to compare with" SKIP; continue; fi
  if [ -z "$bin" ] || [ -z "$model" ]; then row "logits vs transformers ($short)" "skipped (no binary or model)" FAIL; continue; fi
  prompts=4  # each prompt is one `gpueval logits` call (model load + [T, 128256] logits as JSON)
  [ "$ld" = float32 ] && prompts=3
  [ "$mode" = cpu ] && prompts=3
  rc=0
  step "logits-$ld" "$(left 120)" "$py" scripts/gpu/compare_logits.py "$model" --gpueval "$bin" --device "$device" \
    --dtype "$ld" --prompts "$prompts" --out "$OUT/logits_$ld.json" || rc=$?
  if [ -s "$OUT/logits_$ld.json" ]; then
    res=$(field "$OUT/logits_$ld.json" 'f"argmax {argmax:.1f}%, max|d| {max_abs:.2g}, rel {max_rel:.2g}, tok {tokenizer_agree}"')
    row "logits vs transformers ($short)" "$res" "$([ "$rc" = 0 ] && echo PASS || echo FAIL)"
  else
    row "logits vs transformers ($short)" "compare_logits.py failed (exit $rc)" FAIL
  fi
done

# ---- 6. MMLU 5-shot, one worker and two
config=$work/gpu_check_mmlu.yaml
sed -e "s#^model: .*#model: $model#" -e "s#^  mmlu: .*#  mmlu: $data/mmlu#" -e "s#^output: .*#output: $work/mmlu#" \
  configs/gpu_check_mmlu.yaml >"$config"
echo "limit: $limit" >>"$config"
tasks=()
[ "$mode" = cpu ] && tasks=(--tasks mmlu_abstract_algebra,mmlu_anatomy,mmlu_astronomy,mmlu_college_biology)
export GPUEVAL_CACHE_DIR=$work/cache GPUEVAL_HISTORY=$work/history.sqlite
mmlu_ok=()
for g in "$gpus1" "$gpus2"; do
  name=mmlu_${g//[:,]/_}
  rm -rf "${work:?}/$name"
  if [ -z "$bin" ] || [ -z "$model" ]; then row "MMLU --gpus $g" "skipped (no binary or model)" FAIL; continue; fi
  rc=0
  step "$name" "$(left 120)" "$bin" run "$config" --gpus "$g" --output "$work/$name" --fresh "${tasks[@]}" || rc=$?
  if [ "$rc" = 0 ] && [ -f "$work/$name/results.json" ] &&
     "$py" scripts/gpu/summarize.py run "$work/$name" "$OUT/model_info.json" "$OUT/peak.json" >"$OUT/$name.json" 2>>"$log"; then
    cp "$work/$name/results.json" "$OUT/${name}_results.json" 2>/dev/null || true
    cat "$OUT/$name.json" >>"$log"
    mmlu_ok+=("$name")
    if [ "$(field "$OUT/$name.json" 'len(problems)')" = 0 ]; then
      row "MMLU --gpus $g (limit $limit)" "$(field "$OUT/$name.json" 'f"acc {acc:.3f}, {documents} docs, {tok_s:,.0f} req tok/s, {computed_tok_s:,.0f} computed ({compute_s:.2f}s; load {load_s or 0:.1f}s)"')" PASS
    else
      row "MMLU --gpus $g (limit $limit)" "$(field "$OUT/$name.json" 'problems[0]')" FAIL
    fi
  else
    row "MMLU --gpus $g (limit $limit)" "gpueval run exit $rc; see the log" FAIL
  fi
done
if [ "${#mmlu_ok[@]}" = 2 ]; then
  a=$work/${mmlu_ok[0]} b=$work/${mmlu_ok[1]} n=0 same=0
  for f in "$a"/samples_*.jsonl; do
    n=$((n + 1))
    cmp -s "$f" "$b/$(basename "$f")" && same=$((same + 1))
  done
  if [ "$n" -gt 0 ] && [ "$same" = "$n" ]; then row "samples $gpus1 vs $gpus2" "$same/$n samples_*.jsonl byte-equal" PASS
  else row "samples $gpus1 vs $gpus2" "$same/$n samples_*.jsonl byte-equal" FAIL; fi
else
  row "samples $gpus1 vs $gpus2" "skipped (a run failed)" FAIL
fi

# ---- 7. The same requests through a plain transformers loop
first=${mmlu_ok[0]:-}
if [ "$have_torch" = 0 ]; then
  row "transformers loop, same reqs" "skipped: no torch/transformers to run it" SKIP
elif [ -n "$first" ]; then
  rc=0
  budget=$(field "$work/$first/results.json" 'batching["batch_tokens"]')
  step hf-bench "$(left 150)" "$py" scripts/gpu/hf_score_bench.py "$model" "$work/$first" --device "$device" \
    --dtype "$dtype" --batch-tokens "$budget" --out "$OUT/hf_bench.json" || rc=$?
  if [ "$rc" = 0 ] && [ -s "$OUT/hf_bench.json" ] &&
     "$py" scripts/gpu/summarize.py compare "$OUT/$first.json" "$OUT/hf_bench.json" "$OUT/model_info.json" \
       "$OUT/peak.json" >"$OUT/compare.json" 2>>"$log"; then
    cat "$OUT/compare.json" >>"$log"
    # Same requests, same choices: in float32 every document must pick the same answer; in bf16 nearly all.
    need=100
    [ "$dtype" != float32 ] && need=95
    if [ "$(field "$OUT/compare.json" 'len(problems)')" != 0 ]; then
      row "transformers loop, same reqs" "$(field "$OUT/compare.json" 'problems[0]')" FAIL
    else
      res=$(field "$OUT/compare.json" 'f"{hf_tok_s:,.0f} tok/s; ours/theirs {ours_over_theirs:.2f}x (time); choice agree {choice_agreement:.0f}%"')
      ok=$(field "$OUT/compare.json" "choice_agreement >= $need")
      row "transformers loop, same reqs" "$res" "$([ "$ok" = True ] && echo PASS || echo FAIL)"
    fi
  else
    row "transformers loop, same reqs" "hf_score_bench.py exit $rc; see the log" FAIL
  fi
else
  row "transformers loop, same reqs" "skipped (no MMLU run)" FAIL
fi

# ---- 8. MFU: model FLOPs (summarize.py's docstring) over the measured time, against the peak
# (the CPU smoke against the CPU's upper bound: the same rules).
if [ -n "$first" ] && [ -s "$OUT/model_info.json" ]; then
  hf_json=
  [ "$have_torch" = 1 ] && hf_json=$OUT/hf_bench.json
  if "$py" scripts/gpu/summarize.py mfu "$OUT/$first.json" "$OUT/model_info.json" "$OUT/peak.json" $hf_json \
       >"$OUT/mfu.json" 2>>"$log"; then
    cat "$OUT/mfu.json" >>"$log"
    if [ "$(field "$OUT/mfu.json" 'len(problems)')" != 0 ]; then
      row "MFU of the device's peak" "$(field "$OUT/mfu.json" 'problems[0]')" FAIL
    else
      row "MFU of the device's peak" "$(field "$OUT/mfu.json" '(f"ours {100*ours_mfu:.2f}%, transformers {100*hf_mfu:.2f}%" if "hf_mfu" in globals() else f"ours {100*ours_mfu:.2f}%") + f" of {peak_flops/1e12:,.3f} TFLOP/s ({flops_per_token/1e9:.3f} GFLOP/tok)"')" PASS
    fi
  else
    row "MFU of the device's peak" "summarize.py mfu failed; see the log" FAIL
  fi
else
  row "MFU of the device's peak" "skipped (no MMLU run or model)" FAIL
fi

# ---- 9. A real CUDA OOM while probing: fill the GPU but for the weights + a few GiB, then calibrate.
if [ "$mode" = cpu ]; then
  row "OOM during probe" "skipped (no GPU)" SKIP
elif [ -n "$bin" ] && [ -n "$model" ]; then
  weights=$(du -b "$model"/model*.safetensors | awk '{s += $1} END {print s}')
  spare=$("$py" -c "print(int($weights + ${GPU_CHECK_OOM_SPARE_GIB:-4} * 2**30))")
  cat >"$work/ballast.py" <<'EOF'
import sys, time, torch
free, total = torch.cuda.mem_get_info()
keep = int(sys.argv[1])
x = torch.empty(max(free - keep, 0), dtype=torch.uint8, device="cuda")
print(f"ballast: holding {x.numel() / 2**30:.1f} GiB of {total / 2**30:.1f} GiB; {keep / 2**30:.1f} GiB left", flush=True)
open(sys.argv[2], "w").write("ready")
time.sleep(float(sys.argv[3]))
EOF
  rm -f "$work/ballast.ready"
  "$py" "$work/ballast.py" "$spare" "$work/ballast.ready" 300 >>"$log" 2>&1 &
  ballast=$!
  for _ in $(seq 60); do [ -f "$work/ballast.ready" ] && break; sleep 1; done
  rc=0
  rm -rf "$work/calibrate"
  step calibrate "$(left 120)" "$bin" calibrate "$config" --gpus 0 --recalibrate --output "$work/calibrate" || rc=$?
  kill "$ballast" 2>/dev/null || true
  wait "$ballast" 2>/dev/null || true
  if [ -f "$work/calibrate/calibration.json" ]; then
    cp "$work/calibrate/calibration.json" "$OUT/calibration.json"
    "$py" scripts/gpu/summarize.py oom "$OUT/calibration.json" >"$work/oom.json"
    res=$(field "$work/oom.json" 'result')
    oom=$(field "$work/oom.json" '"True" if globals()["pass"] else "False"')
    row "OOM during probe" "$res" "$([ "$oom" = True ] && [ "$rc" = 0 ] && echo PASS || echo FAIL)"
  else
    row "OOM during probe" "calibrate exit $rc, no calibration.json; see the log" FAIL
  fi
else
  row "OOM during probe" "skipped (no binary or model)" FAIL
fi

# ---- 10. load: broadcast with two workers on one device: NCCL needs one rank per GPU, so the
# scheduler must fall back to per-worker mmap, say why, and still finish the run.
if [ -n "$bin" ] && [ -n "$model" ]; then
  bconfig=$work/gpu_check_broadcast.yaml
  cp "$config" "$bconfig"
  echo "load: broadcast" >>"$bconfig"
  rm -rf "$work/broadcast"
  rc=0
  from=$(($(wc -l <"$log") + 1))
  step broadcast "$(left 90)" "$bin" run "$bconfig" --gpus "$gpus2" --output "$work/broadcast" --fresh \
    --tasks mmlu_abstract_algebra --limit 2 || rc=$?
  why=$(tail -n +"$from" "$log" | sed -n 's/.*load: broadcast falls back to per-worker mmap: //p' | head -1)
  want='two workers share GPU 0'
  [ "$mode" = cpu ] && want='the workers are not all on GPUs|this build has no NCCL'
  if [ "$rc" = 0 ] && [ -f "$work/broadcast/results.json" ] && grep -qE "$want" <<<"$why"; then
    row "load: broadcast, --gpus $gpus2" "falls back, runs mmap x2: ${why:0:40}" PASS
  else
    row "load: broadcast, --gpus $gpus2" "exit $rc; fallback line: ${why:-none}" FAIL
  fi
else
  row "load: broadcast, --gpus $gpus2" "skipped (no binary or model)" FAIL
fi

table
exit "$failed"
