#!/usr/bin/env bash
# Batched scoring vs token-at-a-time decoding (llama2.c style, through the KV
# cache) of the same text with the same model, on this machine's CPU.
# Prints tokens/s for each (median of REPS runs) and their ratio.
# Usage: scripts/bench_scoring.sh [MODEL_DIR] [TEXT_FILE]   (env: REPS=3 THREADS=2 WINDOWS=8)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-models/stories260K}
text=${2:-}
reps=${REPS:-3}
threads=${THREADS:-$(nproc)}
windows=${WINDOWS:-8}
[ -x build/gpueval ] || bash scripts/build.sh >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -z "$text" ]; then
  # Real English text: the first 400 HellaSwag contexts from ../shared.
  src=../shared/data/hellaswag/hellaswag_val_full.txt
  [ -f "$src" ] || { echo "bench: $src not found; pass a TEXT_FILE" >&2; exit 1; }
  awk 'NR % 6 == 1' "$src" | head -n 400 > "$tmp/text.txt"
  text=$tmp/text.txt
fi
run() {  # prints tokens_per_second of one run
  build/gpueval --threads "$threads" score --model "$model" --text "$text" --batch-windows "$windows" "$@" 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["tokens_per_second"], d["tokens"], d["sum_logprob"])'
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
batched=(); stepwise=()
for i in $(seq "$reps"); do
  read -r b tokens sum_b < <(run)
  read -r s _ sum_s < <(run --stepwise)
  batched+=("$b"); stepwise+=("$s")
done
mb=$(printf '%s\n' "${batched[@]}" | median)
ms=$(printf '%s\n' "${stepwise[@]}" | median)
echo "model: $model   text: $tokens tokens   threads: $threads   runs: $reps (interleaved)"
printf '%-34s %12s\n' "mode" "tokens/s"
printf '%-34s %12.0f\n' "batched ($windows windows/forward)" "$mb"
printf '%-34s %12.0f\n' "token-at-a-time (KV cache)" "$ms"
python3 -c "print(f'speed-up: {$mb/$ms:.1f}x   |sum_logprob batched - stepwise| = {abs($sum_b-$sum_s):.2e}')"
