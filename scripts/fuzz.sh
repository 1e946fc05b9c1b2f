#!/usr/bin/env bash
# Fuzzes one parser of outside input with libFuzzer:
#   scripts/fuzz.sh TARGET SECONDS [--build DIR] [--jobs N] [--campaign]
#   TARGET   a target of tests/fuzz/fuzz_targets.cpp (safetensors, checkpoint_index, model_config,
#            llama2c_checkpoint, tokenizer_json, llama2c_tokenizer, task_yaml, jsonl, run_config, csv,
#            hellaswag, template, wire), or "all" (one after another, SECONDS each)
#   SECONDS  how long (CI: 20 per target; a campaign: 600 or more)
#   --build  the GPUEVAL_FUZZ build directory (default build-fuzz; scripts/sanitize.sh makes it)
#   --jobs   parallel fuzzing processes on one corpus (default 1)
#   --campaign  go on past findings (libFuzzer -fork=1 -ignore_crashes/timeouts/ooms), saving each one;
#            without it the first finding ends the run (what CI wants)
# The corpus lives in BUILD/fuzz/corpus/TARGET and grows from one campaign to the next. Each run
# starts from it plus the seeds: tests/fuzz/seeds/TARGET (hand-made, tests/fuzz/make_seeds.py),
# tests/fuzz/regressions/TARGET (inputs that once broke a parser) and real files from models/,
# tasks/, configs/ and ../shared/data. A crash, hang (-timeout), out-of-memory (-rss_limit_mb,
# -malloc_limit_mb) or contract violation (fuzz_targets.h) is saved in BUILD/fuzz/artifacts/TARGET/
# and the script exits 1; make it a regression test by copying it into tests/fuzz/regressions/TARGET/.
# Prints one summary line per target: executions, edges covered (cov), features (ft), corpus size.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
[ $# -ge 2 ] || { sed -n '2,7p' "$0" >&2; exit 2; }
target=$1 seconds=$2; shift 2
build=build-fuzz jobs=1 campaign=0
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --campaign) campaign=1; shift ;;
    *) echo "fuzz.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
shared=$root/../shared/data
all=(safetensors checkpoint_index model_config llama2c_checkpoint tokenizer_json llama2c_tokenizer task_yaml jsonl
     run_config csv hellaswag template wire)
if [ "$target" = all ]; then
  rc=0
  more=(); [ "$campaign" = 1 ] && more=(--campaign)
  for t in "${all[@]}"; do "$0" "$t" "$seconds" --build "$build" --jobs "$jobs" "${more[@]}" || rc=1; done
  exit $rc
fi
bin=$build/fuzz_$target
[ -x "$bin" ] || { echo "fuzz.sh: $bin is not built (scripts/sanitize.sh builds the fuzz targets)" >&2; exit 2; }

work=$build/fuzz
seeds=$work/seeds/$target corpus=$work/corpus/$target artifacts=$work/artifacts/$target
rm -rf "$seeds"
mkdir -p "$seeds" "$corpus" "$artifacts"
add() { [ -f "$1" ] && cp "$1" "$seeds/$(echo "$1" | tr '/' '_' | tail -c 120)" || true; }
add_head() { [ -f "$1" ] && head -c "$2" "$1" > "$seeds/head_$(echo "$1" | tr '/' '_' | tail -c 100)" || true; }
for f in tests/fuzz/seeds/$target/* tests/fuzz/regressions/$target/*; do add "$f"; done

max_len=65536
case $target in
  safetensors) for f in models/*/model.safetensors; do add_head "$f" 4096; done ;;
  model_config) for f in models/*/config.json; do add "$f"; done ;;
  llama2c_checkpoint) add_head "$shared/stories260K/stories260K.bin" 65536 ;;
  llama2c_tokenizer) add "$shared/stories260K/tok512.bin" ;;
  tokenizer_json)
    for f in models/*/tokenizer.json; do add "$f"; done
    # Each family's configuration (NFC, regex splits, byte fallback, templates), a few KiB each.
    for f in tests/fixtures/tokenizers/*/tokenizer.json; do add "$f"; done
    # The real tokenizers are megabytes; their first 256 tokens and merges keep every other part.
    if command -v python3 >/dev/null; then
      for f in "$shared"/tokenizers/*/tokenizer.json; do
        [ -f "$f" ] || continue
        python3 - "$f" "$seeds/trimmed_$(basename "$(dirname "$f")").json" <<'PY' || true
import json, sys
t = json.load(open(sys.argv[1], encoding="utf-8"))
m = t.get("model", {})
if isinstance(m.get("vocab"), dict):
    keep = dict(sorted(m["vocab"].items(), key=lambda kv: kv[1])[:256])
    m["vocab"] = keep
    merges = m.get("merges", [])
    pair = lambda x: x.split(" ", 1) if isinstance(x, str) else x
    m["merges"] = [x for x in merges if all(p in keep for p in pair(x)) and "".join(pair(x)) in keep][:256]
t["added_tokens"] = [a for a in t.get("added_tokens", []) if a.get("id", 0) < 256][:8]
json.dump(t, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
PY
      done
    fi ;;
  task_yaml) for f in $(find tasks -name '*.yaml' | sort | head -60); do add "$f"; done ;;
  jsonl)
    for f in tasks/*.jsonl; do add_head "$f" 8192; done
    for f in $(find "$shared" -name '*.jsonl' 2>/dev/null | sort | head -12); do add_head "$f" 4096; done ;;
  run_config) for f in configs/*.yaml; do add "$f"; done ;;
  csv) for f in $(find "$shared/mmlu" -name '*.csv' 2>/dev/null | sort | head -8); do add_head "$f" 4096; done ;;
  hellaswag) add_head "$shared/hellaswag/hellaswag_val_full.txt" 8192 ;;
  chat_template)
    for f in "$shared"/chat_templates/*.jinja tests/fixtures/chat_templates/*.jinja; do add "$f"; done ;;
  template)
    # Every doc_to_* template of the shipped tasks, one file each.
    n=0
    while IFS= read -r line; do
      n=$((n + 1)); printf '%s' "$line" > "$seeds/task_template_$n.txt"
    done < <(grep -rhoE '^(doc_to_text|doc_to_target|doc_to_choice): .*' tasks | sed -E 's/^[a-z_]+: //; s/^"(.*)"$/\1/' |
             sort -u | head -200) ;;
esac

log=$work/$target.log
echo "[fuzz] $target: $seconds s, $jobs job(s), corpus $corpus ($(ls "$corpus" | wc -l) files), seeds $(ls "$seeds" | wc -l)"
# Leaks are findings too; only the first of each kind is kept, so one bug does not fill the disk.
# -jobs N writes fuzz-<i>.log into the current directory: each target gets its own.
run=$work/run/$target
rm -rf "$run"; mkdir -p "$run"
parallel=()
[ "$jobs" -gt 1 ] && parallel=(-jobs="$jobs" -workers="$jobs")
[ "$campaign" = 1 ] && parallel=(-fork="$jobs" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
# A short run (CI) mutates in a fixed order (-seed=1): a slower machine explores a prefix of what a
# faster one does from the same corpus, so a run that passed here does not fail there by chance.
[ "$campaign" = 0 ] && [ "$jobs" -le 1 ] && parallel+=(-seed="${FUZZ_SEED:-1}")
abs() { case $1 in /*) echo "$1" ;; *) echo "$root/$1" ;; esac; }
set +e
(cd "$run" && ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
  "$(abs "$bin")" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=$max_len \
         -print_final_stats=1 "${parallel[@]}" -artifact_prefix="$(abs "$artifacts")/" \
         "$(abs "$corpus")" "$(abs "$seeds")") > "$log" 2>&1
rc=$?
set -e
cat "$run"/fuzz-*.log >> "$log" 2>/dev/null || true
execs=$(grep -ao 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{s += $2} END {print s + 0}' || true)
# Fork mode prints "#<execs>: cov: ..." lines instead of final stats.
[ "$campaign" = 1 ] && execs=$( (grep -aoE '^#[0-9]+: cov' "$log" || true) | tr -dc '0-9\n' | sort -n | tail -1)
cov=$( (grep -aoE 'cov: [0-9]+' "$log" || true) | awk '{print $2}' | sort -n | tail -1)
ft=$( (grep -aoE 'ft: [0-9]+' "$log" || true) | awk '{print $2}' | sort -n | tail -1)
crashes=$(ls "$artifacts" | wc -l)
kinds=$( (grep -aoE 'oom/timeout/crash: [0-9]+/[0-9]+/[0-9]+' "$log" || true) | tail -1)
echo "[fuzz] $target: ${execs} executions, cov ${cov:-0} edges, ft ${ft:-0}, corpus $(ls "$corpus" | wc -l) files," \
     "$crashes artifacts${kinds:+ ($kinds)} in $artifacts, log $log"
if [ "$rc" -ne 0 ] || [ "$crashes" -gt 0 ]; then
  grep -m1 -E 'ERROR: |contract violated|SUMMARY: ' "$log" >&2 || tail -5 "$log" >&2
  exit 1
fi
