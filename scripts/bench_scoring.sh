#!/usr/bin/env bash
# Batched scoring vs token-at-a-time decoding (llama2.c style, through the KV
# cache) of the same text with the same model, on this machine's CPU.
# Prints tokens/s for each (median of REPS runs) and their ratio.
# Window lengths: 512 (stories260K's whole context, attention-heavy for a
# dim-64 model) and 128 (the length of a typical multiple-choice request).
# Usage: scripts/bench_scoring.sh [MODEL_DIR] [TEXT_FILE]
#   env: REPS=3 THREADS=$(nproc) WINDOWS=16 LENGTHS="512 128"
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-models/stories260K}
text=${2:-}
reps=${REPS:-3}
threads=${THREADS:-$(nproc)}
windows=${WINDOWS:-16}
lengths=${LENGTHS:-512 128}
[ -x build/gpueval ] || bash scripts/build.sh >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -z "$text" ]; then
  # Real English text: the first 400 HellaSwag contexts from ../shared.
  src=../shared/data/hellaswag/hellaswag_val_full.txt
  [ -f "$src" ] || { echo "bench: $src not found; pass a TEXT_FILE" >&2; exit 1; }
  awk 'NR % 6 == 1 && ++n <= 400' "$src" > "$tmp/text.txt"
  text=$tmp/text.txt
fi
run() {  # prints: tokens_per_second tokens sum_logprob
  build/gpueval --threads "$threads" score --model "$model" --text "$text" --batch-windows "$windows" \
      --max-length "$length" "$@" 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["tokens_per_second"], d["tokens"], d["sum_logprob"])'
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "model: $model   threads: $threads   runs: $reps per cell, batched and stepwise interleaved"
printf '%-8s %-8s %16s %16s %9s %14s\n' window tokens "batched tok/s" "stepwise tok/s" speed-up "|d sum_logp|"
for length in $lengths; do
  batched=(); stepwise=()
  for i in $(seq "$reps"); do
    read -r b tokens sum_b < <(run)
    read -r s _ sum_s < <(run --stepwise)
    batched+=("$b"); stepwise+=("$s")
  done
  mb=$(printf '%s\n' "${batched[@]}" | median)
  ms=$(printf '%s\n' "${stepwise[@]}" | median)
  python3 -c "print(f'{$length:<8} {$tokens:<8} {$mb:16.0f} {$ms:16.0f} {$mb/$ms:8.1f}x {abs($sum_b-$sum_s):14.2e}')"
done
