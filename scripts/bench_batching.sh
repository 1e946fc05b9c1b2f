#!/usr/bin/env bash
# Prefix reuse and workers on MMLU 5-shot: wall time and tokens of the same run with
# --prefix-reuse on and off, --gpus cpu:1 and cpu:2, on two models:
#   stories260K  models/stories260K (scripts/build.sh makes it): dim 64, 512-token context, so
#                5-shot prompts are left-truncated and the model is too small to be compute-bound;
#   llama768     a random-weight Llama, dim 768, 12 layers, 12 heads, ffn 2048, 2048-token context,
#                with the Llama-2 SentencePiece tokenizer (so prompts have their real lengths),
#                made once with `gpueval init-model` in BENCH_CACHE.
# Each cell runs REPS times, cells interleaved within a repetition; the table shows medians, and
# the off/on ratios are medians of ratios of runs made back to back. Reuse on and off must give the
# same per-task acc; the script says whether they do. Last, per model: batched scoring
# (`gpueval score`) vs token-at-a-time decoding (`gpueval score --stepwise`) of one short text.
#
# The default subjects fit llama768's 2048-token context with the Llama tokenizer (5-shot
# anatomy ~430 tokens, college physics ~600, abstract algebra ~500), so their few-shot prefix is
# shared; a subject such as high school european history (~3000 tokens) is left-truncated at a
# different offset for every question and shares only a question's four answers. With reuse off
# one rep of the llama768 cells scores ~24k tokens per worker setting at ~190 tokens/s per core;
# the default run takes about 15 minutes on 2 idle cores. Time grows linearly with LIMIT and REPS.
#
# Usage: scripts/bench_batching.sh
#   env: REPS=3 LIMIT=4 SUBJECTS=mmlu_anatomy,mmlu_college_physics,mmlu_abstract_algebra
#        MODELS="stories260K llama768" WORKERS="cpu:1 cpu:2" REUSE_MODES="on off"
#        BENCH_CACHE=~/.cache/gpueval/bench  BIG_MODEL=<dir> (instead of BENCH_CACHE/llama768-seed1)
#        SCORE_TOKENS=128 (length of the scoring-vs-stepwise text, in tokens)
# REUSE_MODES=off measures today's behaviour with a gpueval that has no --prefix-reuse flag.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${REPS:-3}
limit=${LIMIT:-4}
subjects=${SUBJECTS:-mmlu_anatomy,mmlu_college_physics,mmlu_abstract_algebra}
models=${MODELS:-stories260K llama768}
workers=${WORKERS:-cpu:1 cpu:2}
reuse_modes=${REUSE_MODES:-on off}
score_tokens=${SCORE_TOKENS:-128}
cache=${BENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpueval/bench}
mmlu=$(realpath -m ../shared/data/mmlu)
tokenizer=$(realpath -m ../shared/data/tokenizers/llama2_sentencepiece)
text_src=$(realpath -m ../shared/data/hellaswag/hellaswag_val_full.txt)
die() { echo "bench: $*" >&2; exit 1; }

[ -d "$mmlu" ] || die "$mmlu not found (the MMLU CSV release from ../shared)"
[ -f "$text_src" ] || die "$text_src not found"
[ -x build/gpueval ] && [ -d models/stories260K ] || bash scripts/build.sh >/dev/null
for r in $reuse_modes; do
  [ "$r" = on ] || [ "$r" = off ] || die "REUSE_MODES: '$r' is neither on nor off"
done
if build/gpueval run --help 2>&1 | grep -q -- '--prefix-reuse'; then
  has_reuse=1
else
  has_reuse=0
  [[ " $reuse_modes " != *" on "* ]] ||
    die "build/gpueval has no --prefix-reuse flag yet (it comes with the prefix-reuse change); rebuild with it, or run REUSE_MODES=off to measure today's behaviour"
fi

model_dir() {
  case $1 in
    stories260K) realpath models/stories260K ;;
    llama768) echo "${BIG_MODEL:-$cache/llama768-seed1}" ;;
    *) die "MODELS: unknown model '$1' (stories260K, llama768)" ;;
  esac
}
for m in $models; do model_dir "$m" >/dev/null; done
if [[ " $models " == *" llama768 "* ]]; then
  big=$(model_dir llama768)
  if [ ! -f "$big/config.json" ]; then
    [ -d "$tokenizer" ] || die "$tokenizer not found"
    echo "bench: creating $big (random Llama, dim 768, 12 layers)" >&2
    # config.json is written last, so a directory without one is an interrupted attempt: --force.
    build/gpueval init-model --tokenizer "$tokenizer" --out "$big" --hidden 768 --layers 12 --heads 12 \
      --kv-heads 12 --intermediate 2048 --max-positions 2048 --seed 1 --force
  fi
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

one() {  # model workers reuse rep -> appends one JSON line to $tmp/runs.jsonl
  local name=$1 gpus=$2 reuse=$3 rep=$4
  local out="$tmp/out_${name}_${gpus/:/}_${reuse}_$rep" flag=()
  [ "$has_reuse" = 1 ] && flag=(--prefix-reuse "$reuse")
  local t0 t1
  t0=$(date +%s.%N)
  build/gpueval run --gpus "$gpus" configs/demo.yaml --model "$(model_dir "$name")" --tasks "$subjects" \
    --num-fewshot 5 --limit "$limit" --data "mmlu=$mmlu" --output "$out" "${flag[@]}" 2>"$out.log" >/dev/null ||
    die "run failed ($name $gpus reuse $reuse); its log: $(tail -n 1 "$out.log")"
  t1=$(date +%s.%N)
  python3 - "$out" "$t0" "$t1" "$name" "$gpus" "$reuse" "$rep" >>"$tmp/runs.jsonl" <<'PY'
import json, re, sys
out, t0, t1, name, gpus, reuse, rep = sys.argv[1:]
res = json.load(open(out + "/results.json"))
b = res.get("batching")
if b is None:  # a gpueval without prefix reuse: the planner's line and status.json say the same
    log = open(out + ".log").read()
    m = re.search(r"\[sched\] .* \((\d+) tokens, ([\d.]+)% padding\)", log)
    padded = json.load(open(out + "/status.json"))["tokens_done"]
    b = {"tokens_requested": int(m.group(1)), "tokens_computed": padded, "padded_tokens": padded}
acc = {t: r.get("acc,none") for t, r in sorted(res["results"].items())}
print(json.dumps({"model": name, "gpus": gpus, "reuse": reuse, "rep": int(rep), "wall": float(t1) - float(t0),
                  "requested": b["tokens_requested"], "computed": b["tokens_computed"], "acc": acc}))
PY
}

# One discarded run per model first: it fills the calibration cache (batch_size auto probes the
# budget once per model and length bucket) and the page cache, so every timed run starts alike.
for m in $models; do
  one "$m" cpu:2 "$(echo $reuse_modes | cut -d' ' -f1)" 0
  echo "bench: warm-up $m: $(tail -n 1 "$tmp/runs.jsonl" | python3 -c 'import json,sys; print("%.1fs" % json.load(sys.stdin)["wall"])')" >&2
done
: >"$tmp/runs.jsonl"

for rep in $(seq "$reps"); do
  for m in $models; do
    for g in $workers; do
      for r in $reuse_modes; do
        one "$m" "$g" "$r" "$rep"
        echo "bench: rep $rep/$reps $m $g reuse $r: $(tail -n 1 "$tmp/runs.jsonl" | python3 -c 'import json,sys; print("%.1fs" % json.load(sys.stdin)["wall"])')" >&2
      done
    done
  done
done

# Scoring vs stepwise: the first hellaswag contexts, about SCORE_TOKENS tokens (4 bytes a token) in
# one window: stepwise decoding of the dim-768 model manages only tens of tokens/s on one core.
awk -v bytes=$((score_tokens * 4)) 'NR % 6 == 1 { print; n += length($0) + 1 } n >= bytes { exit }' "$text_src" \
  >"$tmp/text.txt"
score() {  # model [--stepwise] -> tokens_per_second tokens
  build/gpueval --threads 1 score --model "$(model_dir "$1")" --text "$tmp/text.txt" --max-length "$score_tokens" \
      --batch-windows 8 "${@:2}" 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["tokens_per_second"], d["tokens"])'
}
: >"$tmp/score.txt"
for m in $models; do
  for rep in $(seq "$reps"); do
    echo "$m batched $(score "$m")" >>"$tmp/score.txt"
    echo "$m stepwise $(score "$m" --stepwise)" >>"$tmp/score.txt"
  done
done

python3 - "$tmp/runs.jsonl" "$tmp/score.txt" "$limit" "$subjects" "$has_reuse" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
limit, subjects, has_reuse = sys.argv[3], sys.argv[4], sys.argv[5] == "1"
med = statistics.median
cells = {}
for r in runs:
    cells.setdefault((r["model"], r["gpus"], r["reuse"]), []).append(r)
print(f"MMLU 5-shot, {subjects}, limit {limit} per subject, {len(next(iter(cells.values())))} runs per cell"
      + ("" if has_reuse else "   (no --prefix-reuse in this gpueval: 'off' is today's behaviour)"))
print(f"{'model':<12} {'workers':<8} {'reuse':<6} {'tok requested':>13} {'tok computed':>13} {'wall s':>8} "
      f"{'requested/s':>12} {'computed off/on':>16} {'wall off/on':>12}")
for (model, gpus, reuse), rs in cells.items():
    wall = med(r["wall"] for r in rs)
    line = (f"{model:<12} {gpus:<8} {reuse:<6} {rs[0]['requested']:>13} {med(r['computed'] for r in rs):>13.0f} "
            f"{wall:>8.2f} {rs[0]['requested'] / wall:>12.0f}")
    off = cells.get((model, gpus, "off"))
    if reuse == "on" and off:
        pairs = list(zip(sorted(off, key=lambda r: r["rep"]), sorted(rs, key=lambda r: r["rep"])))
        line += (f" {med(o['computed'] / n['computed'] for o, n in pairs):>15.2f}x"
                 f" {med(o['wall'] / n['wall'] for o, n in pairs):>11.2f}x")
    print(line)
accs = {}
for r in runs:
    accs.setdefault((r["model"], r["gpus"], r["reuse"]), set()).add(json.dumps(r["acc"], sort_keys=True))
for (model, gpus, reuse), a in sorted(accs.items()):
    if len(a) != 1:
        print(f"acc: {model} {gpus} reuse {reuse}: differs between repetitions: {sorted(a)}")
for model in dict.fromkeys(r["model"] for r in runs):
    mine = {k: v for k, v in accs.items() if k[0] == model}
    if len({x for v in mine.values() for x in v}) == 1:
        print(f"acc {model}: identical across workers and reuse modes: {next(iter(next(iter(mine.values()))))}")
    else:
        for k, v in sorted(mine.items()):
            print(f"acc {model} {k[1]} reuse {k[2]}: {sorted(v)}")
        print(f"acc {model}: DIFFERENT across runs")
score, ntok = {}, {}
for line in open(sys.argv[2]):
    model, kind, tps, tokens = line.split()
    score.setdefault((model, kind), []).append(float(tps))
    ntok[model] = tokens
for model in dict.fromkeys(k[0] for k in score):
    b, s = med(score[(model, "batched")]), med(score[(model, "stepwise")])
    print(f"score {model} ({ntok[model]} tokens, 1 thread): batched {b:.0f} tok/s vs stepwise {s:.0f} tok/s = {b / s:.1f}x")
PY
