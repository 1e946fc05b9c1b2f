#!/usr/bin/env python3
"""Figures for scripts/gpu_check.sh from a finished MMLU run (and optionally the transformers bench).

  summarize.py run RUN_DIR RUN_LOG              -> JSON: accuracy, tokens, seconds, tok/s of our run
  summarize.py mfu RUN_JSON MODEL_JSON [HF_JSON] -> JSON: FLOPs/token, MFU of ours (and transformers')
  summarize.py oom CALIBRATION_JSON             -> JSON: {pass, result}: the probe met an OOM, chose a budget

Our scoring time is the scheduler's elapsed_s (status.json) less the slowest worker's model load
("loaded in X s" in the run log). tok/s counts the requested tokens (context + continuation of every
request, batching.tokens_requested), the work both loops answer; `computed_tok_s` counts the tokens
our forward passes ran (tokens_computed, after prefix reuse, padding excluded), which is what MFU uses.
MFU = FLOPs/token x computed tok/s / 989e12 (H200 SXM dense bf16 peak), FLOPs/token = 2 N + 2 L d T:
N parameters (tied embedding counted once, as the lm_head matmul), L layers, d hidden size, T the mean
request length (Kaplan et al. 2020's forward cost with its attention term).
"""
import json
import os
import re
import sys

PEAK = 989e12


def run_figures(run_dir, log):
    res = json.load(open(os.path.join(run_dir, "results.json")))
    status = json.load(open(os.path.join(run_dir, "status.json")))
    b = res["batching"]
    loads = [float(x) for x in re.findall(r"loaded in ([0-9.]+)s", open(log, errors="replace").read())]
    seconds = max(status["elapsed_s"] - (max(loads) if loads else 0.0), 1e-9)
    acc = res.get("groups", {}).get("mmlu", {}).get("acc,none")
    if acc is None:  # a subset of subjects: the mean over tasks
        accs = [v["acc,none"] for v in res["results"].values() if isinstance(v.get("acc,none"), (int, float))]
        acc = sum(accs) / max(len(accs), 1)
    return {"acc": acc, "tokens_requested": b["tokens_requested"], "tokens_computed": b["tokens_computed"],
            "padded_tokens": b["padded_tokens"], "batches": b["batches"], "elapsed_s": status["elapsed_s"],
            "load_s": max(loads) if loads else 0.0, "seconds": seconds,
            "tok_s": b["tokens_requested"] / seconds, "computed_tok_s": b["tokens_computed"] / seconds,
            "documents": sum(t["documents_done"] for t in status.get("task_progress", {}).values())}


def mfu(run, model, hf=None):
    cfg = json.load(open(os.path.join(model["out"], "config.json")))
    n, L, d = model["params"], cfg["num_hidden_layers"], cfg["hidden_size"]
    t_mean = (hf["tokens"] / hf["requests"]) if hf else run["tokens_requested"] / max(run["documents"] * 4, 1)
    flops = 2 * n + 2 * L * d * t_mean
    out = {"flops_per_token": flops, "mean_request_tokens": t_mean, "params": n,
           "ours_mfu": flops * run["computed_tok_s"] / PEAK}
    if hf:
        out["hf_mfu"] = flops * hf["tokens_per_second"] / PEAK
    return out


def oom(calibration):
    """The probe met a real CUDA OOM (a point noted "out of memory") and still chose a budget."""
    d = calibration["devices"][0]
    points = d["probe"]["points"]
    at = [p["batch_tokens"] for p in points if p["note"] == "out of memory"]
    fit = [p["batch_tokens"] for p in points if p["fits"]]
    ok = bool(at) and d["batch_tokens"] > 0
    return {"pass": ok, "result": f"OOM at {at or 'none'} tokens; fitted {fit}; chose {d['batch_tokens']}"}


if __name__ == "__main__":
    if sys.argv[1] == "run":
        print(json.dumps(run_figures(sys.argv[2], sys.argv[3])))
    elif sys.argv[1] == "mfu":
        load = lambda p: json.load(open(p)) if p and os.path.exists(p) else None
        print(json.dumps(mfu(load(sys.argv[2]), load(sys.argv[3]), load(sys.argv[4]) if len(sys.argv) > 4 else None)))
    elif sys.argv[1] == "oom":
        print(json.dumps(oom(json.load(open(sys.argv[2])))))
    else:
        sys.exit(__doc__)
