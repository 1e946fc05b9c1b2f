#!/usr/bin/env bash
# How long gpueval takes to turn full MMLU 5-shot (57 subjects, 14,042 questions, 56,168
# requests) into a plan with the Mistral tokenizer, whose whole prompt is one BPE word: the wall
# time of `gpueval plan --shards 1` (tokenizing, grouping, fingerprints, plan.json), median of
# REPS, and the plan fingerprint, which two builds that tokenize alike share. The model is a tiny
# random Llama (`gpueval init-model`) with ../shared/data/tokenizers/mistral7b_v0.1: planning does
# not depend on its size. Not in CI: about 10 s a repetition on 2 cores (a minute before
# 2026-12-03). BASELINE=PATH also times another gpueval binary, alternating with this one.
# Usage: scripts/bench_planning.sh   env: REPS=3 BASELINE= GPUEVAL_BIN=build/gpueval WORK=(a temp dir)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
bin=${GPUEVAL_BIN:-build/gpueval}
reps=${REPS:-3}
shared=$(cd .. && pwd)/shared
work=${WORK:-$(mktemp -d)}
[ -x "$bin" ] || { echo "bench_planning: $bin is missing (scripts/build.sh builds it)" >&2; exit 1; }
[ -d "$shared/data/mmlu" ] || { echo "bench_planning: $shared/data/mmlu is missing" >&2; exit 1; }
if [ ! -f "$work/model/model.safetensors" ]; then
  "$bin" init-model --tokenizer "$shared/data/tokenizers/mistral7b_v0.1" --out "$work/model" --force \
    --hidden 64 --intermediate 128 --layers 1 --heads 4 --kv-heads 4 >/dev/null 2>&1
fi
cat > "$work/mmlu.yaml" <<YAML
model: $work/model
tasks: [mmlu]
num_fewshot: 5
data: {mmlu: $shared/data/mmlu}
output: $work/plan
YAML
binaries=("$bin")
[ -n "${BASELINE:-}" ] && binaries+=("$BASELINE")
declare -A times fingerprints
for ((r = 1; r <= reps; r++)); do
  for b in "${binaries[@]}"; do
    rm -rf "$work/plan"
    start=$(date +%s.%N)
    line=$(GPUEVAL_TASKS_DIR="$repo/tasks" "$b" plan --shards 1 --batch-tokens 4096 "$work/mmlu.yaml" 2>&1 |
           grep '(plan [0-9a-f]*)' || true)
    end=$(date +%s.%N)
    [ -n "$line" ] || { echo "bench_planning: $b plan failed" >&2; exit 1; }
    seconds=$(printf '%.1f' "$(echo "$end - $start" | bc)")
    times[$b]+="$seconds "
    fingerprints[$b]=$(echo "$line" | grep -o 'plan [0-9a-f]*')
    echo "[bench] $b run $r: $seconds s (${fingerprints[$b]})" >&2
  done
done
echo "| binary | plan wall, median (s) | runs (s) | plan fingerprint |"
echo "|---|---|---|---|"
for b in "${binaries[@]}"; do
  median=$(echo "${times[$b]}" | tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  echo "| $b | $median | ${times[$b]}| ${fingerprints[$b]} |"
done
