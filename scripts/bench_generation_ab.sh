#!/usr/bin/env bash
# Two gpueval builds side by side on a generation workload whose sequences end at varied lengths.
#
#   scripts/bench_generation_ab.sh OLD_BIN NEW_BIN [LIMIT [REPS]]
#
# The workload: the repository's gsm8k_cot (8-shot chain-of-thought prompts) on the first LIMIT
# (default 128) GSM8K test documents, sampled at temperature 1 with the stop string "K" and
# max_gen_toks 256, so that a random model's sequences end anywhere from 0 to 256 tokens; the
# random 134M Llama that scripts/bench_generation.py makes in its work folder (run it once first;
# WORK, default /tmp/bench_gen), float32, `--gpus cpu:2` (GPUS), the calibration cache in WORK.
# Runs alternate OLD, NEW, REPS (default 1) times; each prints its wall time, the compute window
# (results.json timing.compute_s), the tokens generated and the batch count. BATCH_SIZE=N adds
# `batch_size: N` to the run config (more, smaller batches: the look-ahead's case). The two samples files
# of the last pair are compared byte for byte: sampling is seeded per document, so they must match.
set -euo pipefail
old=$1 new=$2 limit=${3:-128} reps=${4:-1}
work=${WORK:-/tmp/bench_gen} gpus=${GPUS:-cpu:2}
repo=$(cd "$(dirname "$0")/.." && pwd)
[[ -d $work/model ]] || { echo "bench_generation_ab: no $work/model: run scripts/bench_generation.py first" >&2; exit 2; }
cat > "$work/ab_task.yaml" <<YAML
include: $repo/tasks/gsm8k/gsm8k_cot.yaml
task: gsm8k_cot_ab
generation_kwargs:
  until: ["K"]
  do_sample: true
  temperature: 1.0
  max_gen_toks: 256
YAML
for rep in $(seq "$reps"); do
  for side in old new; do
    bin=$old; [[ $side == new ]] && bin=$new
    out=$work/ab_$side
    printf '{"model": "%s/model", "tasks": ["%s/ab_task.yaml"], "dtype": "float32", "output": "%s", "limit": %d, %s"data": {"gsm8k": "%s/../shared/data/gsm8k"}}\n' \
      "$work" "$work" "$out" "$limit" "${BATCH_SIZE:+\"batch_size\": $BATCH_SIZE, }" "$repo" > "$out.yaml"
    rm -rf "$out"
    t0=$(date +%s.%N)
    GPUEVAL_CACHE_DIR=$work/cache GPUEVAL_TASKS_DIR=$repo/tasks "$bin" run --gpus "$gpus" "$out.yaml" > /dev/null 2> "$out.log"
    t1=$(date +%s.%N)
    python3 - "$out" "$side" "$rep" "$t0" "$t1" <<'PY'
import json, re, sys
out, side, rep, t0, t1 = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
t = json.load(open(out + "/results.json"))["timing"]
batches = re.search(r"requests, (\d+) batches", open(out + ".log").read())
print(f"{side} rep {rep}: wall {t1 - t0:.1f} s, compute {t['compute_s']:.1f} s, {t.get('tokens_scored')} tokens, "
      f"{batches.group(1) if batches else '?'} batches")
PY
  done
done
if cmp -s "$work/ab_old/samples_gsm8k_cot_ab.jsonl" "$work/ab_new/samples_gsm8k_cot_ab.jsonl"; then
  echo "samples: identical"
else
  echo "samples: DIFFER"; exit 1
fi
