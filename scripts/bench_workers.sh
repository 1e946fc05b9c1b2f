#!/usr/bin/env bash
# One worker against two: wall time and tokens/s of the same run with
# --gpus cpu:1 and --gpus cpu:2 on this machine (median of REPS interleaved
# runs each). The workload is lm-evaluation-harness-style rolling perplexity
# over the first DOCS HellaSwag contexts from ../shared, plus the demo
# multiple-choice task, on the shipped stories260K.
# Usage: scripts/bench_workers.sh   (env: REPS=3 DOCS=1500 MODEL=models/stories260K)
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${REPS:-3}
docs=${DOCS:-1500}
model=$(realpath "${MODEL:-models/stories260K}")
src=../shared/data/hellaswag/hellaswag_val_full.txt
[ -f "$src" ] || { echo "bench: $src not found" >&2; exit 1; }
[ -x build/gpueval ] || bash scripts/build.sh >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk -v n="$docs" 'NR % 6 == 1 && ++k <= n' "$src" |
  python3 -c 'import json,sys; [print(json.dumps({"text": l.rstrip("\n")})) for l in sys.stdin]' > "$tmp/ctx.jsonl"
cat > "$tmp/bench_ppl.yaml" <<YAML
task: bench_ppl
dataset_path: ctx.jsonl
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{text}}"
metric_list:
  - metric: word_perplexity
YAML
cp tasks/demo_choice.yaml tasks/demo_choice.jsonl "$tmp/"
cat > "$tmp/run.yaml" <<YAML
model: $model
tasks: [bench_ppl, demo_choice]
output: out
YAML
one() {  # prints: wall_seconds tokens_per_second
  local out="$tmp/out_$1_$2"
  local t0 t1
  t0=$(date +%s.%N)
  build/gpueval run --gpus "$1" --output "$out" "$tmp/run.yaml" 2>"$out.log" >/dev/null
  t1=$(date +%s.%N)
  python3 - "$out" "$t0" "$t1" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/status.json"))
wall = float(sys.argv[3]) - float(sys.argv[2])
print(f"{wall:.3f} {s['tokens_done'] / wall:.0f} {s['tokens_done']}")
PY
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
declare -A wall tps
for i in $(seq "$reps"); do
  for g in cpu:1 cpu:2; do
    read -r w t tokens < <(one "$g" "$i")
    wall[$g]+="$w "; tps[$g]+="$t "
  done
done
cmp -s "$tmp/out_cpu:1_1/samples_bench_ppl.jsonl" "$tmp/out_cpu:2_1/samples_bench_ppl.jsonl" &&
  same="identical" || same="DIFFERENT"
echo "model: $model   workload: $tokens padded tokens ($docs rolling docs + 60 multiple-choice docs)   runs: $reps each"
printf '%-8s %12s %12s\n' gpus "wall (s)" "tokens/s"
for g in cpu:1 cpu:2; do
  printf '%-8s %12.2f %12.0f\n' "$g" "$(echo ${wall[$g]} | tr ' ' '\n' | median)" "$(echo ${tps[$g]} | tr ' ' '\n' | median)"
done
echo "per-document results cpu:1 vs cpu:2: $same"
