#!/usr/bin/env bash
# One-command GPU check (issue 7), under 8 minutes on one H200, no network:
#   scripts/gpu_check.sh              # on a machine with a CUDA GPU and a python3 with torch + transformers
#   scripts/gpu_check.sh --cpu-smoke  # the same steps on the CPU: tiny model, float32, cpu:1 / cpu:2
# Steps: find python (torch, transformers) and the GPU; build gpueval against that torch; GPU unit
# tests; a random-weight Llama-3-shaped 1.2B model (scripts/gpu/make_llama.py); our logits against
# LlamaForCausalLM (compare_logits.py); MMLU 5-shot --limit with --gpus 0 and --gpus 0,0 (accuracy,
# tok/s, byte-equal samples); the same requests through a plain transformers loop
# (hf_score_bench.py); MFU; a real CUDA OOM met by `gpueval calibrate`'s probe. Ends with one table
# (check | result | pass/fail) and exits 1 if a check failed.
# Logs and figures go to ${OUT:-/tmp/gpu_check} (gpu_check.log holds every step's output); the model
# and run directories to ${GPU_CHECK_WORK:-/tmp/gpu_check_work}.
# Env: GPUEVAL_BIN (a built gpueval: skips the build), GPUEVAL_TEST_PYTHON (the python to use),
#   GPUEVAL_SHARED_DATA (the shared data dir: tokenizers/llama3, mmlu; default ../shared/data, shared/data),
#   GPU_CHECK_LIMIT (MMLU docs per subject; 10 on GPU, 1 in the smoke), GPU_CHECK_DEADLINE_S (450),
#   GPU_CHECK_OOM_SPARE_GIB (GPU memory left to the probe beyond the weights; 4).
# In --cpu-smoke, no python with torch + transformers (or no shared data) is a skip: exit code 77.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
mode=gpu
[ "${1:-}" = --cpu-smoke ] && mode=cpu
OUT=${OUT:-/tmp/gpu_check}
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
  timeout --kill-after=5 "$secs" "$@" >>"$log" 2>&1 || rc=$?
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
    echo "mode: $mode; total wall time ${total}s; log: $log"
  } | tee -a "$log" | tee "$OUT/table.txt"
}

# ---- 1. python with torch and transformers; the GPU
py=
for cand in ${GPUEVAL_TEST_PYTHON:-} python3 /opt/torch/.venv/bin/python3; do
  command -v "$cand" >/dev/null 2>&1 || continue
  if "$cand" -c 'import torch, transformers' >/dev/null 2>&1; then py=$(command -v "$cand"); break; fi
done
if [ -z "$py" ]; then
  if [ "$mode" = cpu ]; then echo "gpu_check --cpu-smoke: SKIP: no python with torch and transformers"; exit 77; fi
  row python "no python3 with torch and transformers" FAIL
  table
  exit 1
fi
versions=$("$py" -c 'import sys, torch, transformers; print(f"python {sys.version.split()[0]}, torch {torch.__version__} (cuda {torch.version.cuda}, available {torch.cuda.is_available()}), transformers {transformers.__version__}")')
say "$py: $versions"
if [ "$mode" = gpu ]; then
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
data=
for d in ${GPUEVAL_SHARED_DATA:-} ../shared/data shared/data; do
  [ -f "$d/tokenizers/llama3/tokenizer.json.gz" ] && [ -d "$d/mmlu/test" ] && { data=$(cd "$d" && pwd); break; }
done
if [ -z "$data" ]; then
  if [ "$mode" = cpu ]; then echo "gpu_check --cpu-smoke: SKIP: no shared data (tokenizers/llama3, mmlu); set GPUEVAL_SHARED_DATA"; exit 77; fi
  row "shared data" "no tokenizers/llama3 and mmlu/ (set GPUEVAL_SHARED_DATA)" FAIL
  table
  exit 1
fi

# ---- 4 (started first, beside the build). The model.
if [ "$mode" = gpu ]; then size=1b; dtype=bfloat16; device=cuda:0; gpus1=0; gpus2=0,0; limit=${GPU_CHECK_LIMIT:-10}
else size=tiny; dtype=float32; device=cpu; gpus1=cpu:1; gpus2=cpu:2; limit=${GPU_CHECK_LIMIT:-1}; fi
model=$work/llama_$size
rm -rf "$model"
say "---- model (background): make_llama.py $model --size $size"
(timeout 240 "$py" "$repo/scripts/gpu/make_llama.py" "$model" --size "$size" --data "$data" >"$work/model.json" 2>"$work/model.err"
 echo $? >"$work/model.rc") &
model_pid=$!

# ---- 2. Build against that torch
bin=${GPUEVAL_BIN:-}
if [ -n "$bin" ]; then
  row build "given: $bin" PASS
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
    row build "build-cuda/ in $(($(date +%s) - t0))s, -j$(nproc)" PASS
  else
    row build "failed (exit $rc) after $(($(date +%s) - t0))s; see the log" FAIL
  fi
fi

# ---- 3. GPU unit tests
if [ "$mode" = cpu ]; then
  row "GPU unit tests" "skipped (no GPU)" SKIP
elif [ -x build-cuda/gpueval_tests ]; then
  rc=0
  step unit-tests "$(left 90)" build-cuda/gpueval_tests --gtest_filter='Kernel*:*Cuda*:*Gpu*' --gtest_brief=1 || rc=$?
  summary=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$log" | tail -3 | tr '\n' ' ' | tr -s ' ')
  [ -z "$summary" ] && summary="0 tests matched"
  if [ "$rc" = 0 ]; then row "GPU unit tests" "${summary:0:62}" PASS; else row "GPU unit tests" "exit $rc: ${summary:0:50}" FAIL; fi
else
  row "GPU unit tests" "no build-cuda/gpueval_tests" FAIL
fi

# ---- 4. The model (wait for the background job)
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

# ---- 5. Logits against LlamaForCausalLM
if [ -n "$bin" ] && [ -n "$model" ]; then
  prompts=4  # each prompt is one `gpueval logits` call (model load + [T, 128256] logits as JSON)
  [ "$mode" = cpu ] && prompts=3
  rc=0
  step logits "$(left 120)" "$py" scripts/gpu/compare_logits.py "$model" --gpueval "$bin" --device "$device" \
    --dtype "$dtype" --prompts "$prompts" --out "$OUT/logits.json" || rc=$?
  if [ -s "$OUT/logits.json" ]; then
    res=$(field "$OUT/logits.json" 'f"argmax {argmax:.1f}%, max|d| {max_abs:.2g}, rel {max_rel:.2g}, tok {tokenizer_agree}"')
    row "logits vs transformers ($dtype)" "$res" "$([ "$rc" = 0 ] && echo PASS || echo FAIL)"
  else
    row "logits vs transformers ($dtype)" "compare_logits.py failed (exit $rc)" FAIL
  fi
else
  row "logits vs transformers" "skipped (no binary or model)" FAIL
fi

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
  if [ "$rc" = 0 ] && [ -f "$work/$name/results.json" ]; then
    sed -n "/---- $name (limit/,\$p" "$log" >"$work/$name.log"
    "$py" scripts/gpu/summarize.py run "$work/$name" "$work/$name.log" >"$OUT/$name.json"
    cp "$work/$name/results.json" "$OUT/${name}_results.json" 2>/dev/null || true
    mmlu_ok+=("$name")
    row "MMLU --gpus $g (limit $limit)" "$(field "$OUT/$name.json" 'f"acc {acc:.3f}, {documents} docs, {tok_s:,.0f} tok/s ({seconds:.1f}s + {load_s:.1f}s load)"')" PASS
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
if [ -n "$first" ]; then
  rc=0
  budget=$(field "$work/$first/results.json" 'batching["batch_tokens"]')
  step hf-bench "$(left 120)" "$py" scripts/gpu/hf_score_bench.py "$model" "$work/$first" --device "$device" \
    --dtype "$dtype" --batch-tokens "$budget" --out "$OUT/hf_bench.json" || rc=$?
  if [ "$rc" = 0 ] && [ -s "$OUT/hf_bench.json" ]; then
    ours=$(field "$OUT/$first.json" 'tok_s')
    res=$(field "$OUT/hf_bench.json" 'f"{tokens_per_second:,.0f} tok/s; ours/theirs {'"$ours"'/tokens_per_second:.2f}x; choice agree {choice_agreement:.0f}%"')
    # Same requests, same choices: in float32 every document must pick the same answer; in bf16 nearly all.
    need=100
    [ "$dtype" != float32 ] && need=95
    ok=$(field "$OUT/hf_bench.json" "choice_agreement >= $need")
    row "transformers loop, same reqs" "$res" "$([ "$ok" = True ] && echo PASS || echo FAIL)"
  else
    row "transformers loop, same reqs" "hf_score_bench.py exit $rc; see the log" FAIL
  fi
else
  row "transformers loop, same reqs" "skipped (no MMLU run)" FAIL
fi

# ---- 8. MFU
if [ "$mode" = cpu ]; then
  row MFU "skipped (no GPU)" SKIP
elif [ -n "$first" ] && [ -s "$OUT/model.json" ]; then
  "$py" scripts/gpu/summarize.py mfu "$OUT/$first.json" "$OUT/model.json" "$OUT/hf_bench.json" >"$OUT/mfu.json" 2>>"$log" || true
  if [ -s "$OUT/mfu.json" ]; then
    cat "$OUT/mfu.json" >>"$log"
    row "MFU (2N+2LdT)*tok/s/989T" "$(field "$OUT/mfu.json" 'f"ours {100*ours_mfu:.1f}%, transformers {100*hf_mfu:.1f}% ({flops_per_token/1e9:.2f} GFLOP/token)" if "hf_mfu" in globals() else f"ours {100*ours_mfu:.1f}%"')" PASS
  else
    row MFU "summarize.py failed" FAIL
  fi
else
  row MFU "skipped (no MMLU run)" FAIL
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

table
exit "$failed"
