#!/usr/bin/env bash
# Generation with the code task's programs running beside it, against the same generation with
# no program run (mbpp's file with exact_match instead of pass_at_1), interleaved, on the shipped
# model: the generation tok/s of each run, the programs' line and the wall time.
# Usage: scripts/bench_code_exec.sh [LIMIT] [REPEATS]   (after scripts/build.sh; ../shared beside)
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${1:-100}
repeats=${2:-2}
data=${GPUEVAL_SHARED:-../shared}/data/mbpp
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'include: %s\ntask: mbpp_noexec\nunsafe_code: false\nmetric_list:\n  - metric: exact_match\n' \
  "$PWD/tasks/mbpp/mbpp.yaml" > "$work/mbpp_noexec.yaml"
for r in $(seq 1 "$repeats"); do
  for task in mbpp "$work/mbpp_noexec.yaml"; do
    rm -rf "$work/out"
    start=$(date +%s.%N)
    build/gpueval --gpus cpu:1 --tasks "$task" --data mbpp="$data" --limit "$limit" --batch-size 4 \
      --output "$work/out" configs/demo.yaml 2> "$work/log" > /dev/null
    end=$(date +%s.%N)
    name=$(basename "$task" .yaml)
    grep -E '^\[sched\] [0-9]+/[0-9]+ batches \(100%\)' "$work/log" | tail -1 | sed "s/^/$r $name: /" | cut -c1-160
    grep -E '^\[exec\] [0-9]+ programs' "$work/log" | sed "s/^/$r $name: /" || true
    awk -v r="$r" -v n="$name" -v s="$start" -v e="$end" 'BEGIN { printf "%s %s: wall %.2f s\n", r, n, e - s }'
  done
done
