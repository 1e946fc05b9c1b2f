#!/usr/bin/env python3
"""Figures for scripts/gpu_check.sh, each checked against what the hardware can do.

  summarize.py peak --device cpu|cuda:N --dtype D     -> {peak_flops, source}: the device's dense peak
  summarize.py model MODEL_DIR                         -> {params, body_params, layers, hidden, vocab, ...}
  summarize.py run RUN_DIR MODEL_JSON PEAK_JSON        -> our run's figures and their problems
  summarize.py compare RUN_JSON HF_JSON MODEL_JSON PEAK_JSON -> transformers' loop against ours
  summarize.py mfu RUN_JSON MODEL_JSON PEAK_JSON [HF_JSON]   -> MFU of ours (and transformers')
  summarize.py oom CALIBRATION_JSON                    -> {pass, result}: the probe met an OOM, chose a budget

Every figure comes from a time the program measured itself, never from one time less another:
- our scoring time is results.json's timing.compute_s: the scheduler's clock from the first batch
  sent to a worker to the last result received (no model load, tokenizing or planning before it, no
  report after it); each worker's load_s and busy_s are beside it;
- transformers' time is hf_score_bench.py's `seconds`: its scoring loop after a warm-up, model load
  excluded.
What the rates count:
- requested tok/s: the requests' tokens (context + continuation, the forward's inputs; what a
  run without reuse computes: timing.tokens_requested) over the window. Both loops answer the same
  requests, so "ours/theirs" is the ratio of their times for the same requested tokens.
- computed tok/s: the tokens our forwards ran (timing.tokens_computed, after prefix reuse and
  context grouping, padding excluded); transformers computes every requested token.
Model FLOPs = tokens through the layers x (2 B + 2 L d T) + rows through the output head x 2 V d,
B the parameters of the layers (embedding and output head excluded), L layers, d hidden size, T the
mean request length (the attention term, Kaplan et al. 2020), V vocabulary; the head's rows are the
tokens scored (timing.tokens_scored: loglikelihood targets). Neither loop can do fewer FLOPs than
these (ours runs the head on target rows only, transformers on at least those), so:
MFU = model FLOPs / seconds / peak, and a figure fails its row when it is impossible or meaningless:
a time under 10 ms (too short to measure), a ratio from a zero or negative time, MFU above 100% or
below 0, tokens/s above what the peak allows for this model (peak / FLOPs per token).
The peak: a GPU's dense bf16/fp16 (or TF32 for float32) tensor-core peak from its name
(GPU_CHECK_PEAK_TFLOPS overrides it); a CPU's upper bound from /proc/cpuinfo: CPUs this process may
use x the clock (cpufreq's maximum, else the highest "cpu MHz" x 1.5 for turbo) x float32 FLOPs per
cycle (two FMA units: 64 with AVX-512, 32 with AVX2+FMA, 16 with AVX, else 8). An upper bound, so a
CPU MFU understates, and an impossible figure still fails.
Each figure's JSON has "problems": a list of one-line reasons; empty means the row passes.
"""
import glob
import json
import math
import os
import re
import struct
import sys

MIN_SECONDS = 0.010  # a window shorter than this measures timer noise, not scoring

# Dense (no sparsity) tensor-core peaks, FLOP/s: (bf16/fp16, tf32). Most specific names first.
GPU_PEAKS = [
    ("H100 PCIe", 756e12, 378e12), ("H100 NVL", 835e12, 418e12), ("H200", 989.4e12, 494.7e12),
    ("H100", 989.4e12, 494.7e12), ("GH200", 989.4e12, 494.7e12), ("H800", 989.4e12, 494.7e12),
    ("B200", 2250e12, 1100e12), ("B100", 1750e12, 875e12), ("A100", 312e12, 156e12), ("A800", 312e12, 156e12),
    ("L40S", 362e12, 183e12), ("L40", 181e12, 90.5e12), ("L4", 121e12, 60e12), ("A10", 125e12, 62.5e12),
    ("RTX 4090", 165.2e12, 82.6e12), ("RTX 6000 Ada", 364e12, 182e12), ("V100", 125e12, 125e12),
]


def load(path):
    with open(path) as f:
        return json.load(f)


# ---- the device's peak

def cpu_peak(text=None, cpus=None, max_khz=None):
    """The CPU's float32 upper bound; the arguments (for tests) default to this machine's."""
    text = open("/proc/cpuinfo").read() if text is None else text
    m = re.search(r"^flags\s*:\s*(.*)$", text, re.M)
    flags = set(m.group(1).split()) if m else set()
    cpus = len(os.sched_getaffinity(0)) if cpus is None else cpus
    if "avx512f" in flags:
        per_cycle, isa = 64, "AVX-512"
    elif "avx2" in flags and "fma" in flags:
        per_cycle, isa = 32, "AVX2+FMA"
    elif "avx" in flags:
        per_cycle, isa = 16, "AVX"
    else:
        per_cycle, isa = 8, "SSE"
    if max_khz is None:
        max_khz = 0
        for p in glob.glob("/sys/devices/system/cpu/cpu*/cpufreq/cpuinfo_max_freq"):
            try:
                max_khz = max(max_khz, int(open(p).read()))
            except (OSError, ValueError):
                pass
    if max_khz:
        ghz, clock = max_khz / 1e6, "cpufreq max"
    else:
        mhz = [float(x) for x in re.findall(r"^cpu MHz\s*:\s*([0-9.]+)", text, re.M)]
        named = re.findall(r"@\s*([0-9.]+)\s*GHz", text)
        base = max(mhz + [float(g) * 1000 for g in named] + [0.0]) / 1000
        if base <= 0:
            return {"peak_flops": None, "source": "cpu: no clock in /proc/cpuinfo or cpufreq"}
        ghz, clock = base * 1.5, f"cpu MHz {base * 1000:.0f} x 1.5 turbo allowance"
    m = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
    model = m.group(1).strip() if m else ""
    peak = cpus * ghz * 1e9 * per_cycle
    return {"peak_flops": peak, "device": model or "cpu", "kind": "cpu",
            "source": f"{cpus} CPUs x {ghz:.2f} GHz ({clock}) x {per_cycle} FLOP/cycle ({isa} fp32), an upper bound"}


def gpu_peak(name, dtype):
    for key, half, tf32 in GPU_PEAKS:
        if key in name:
            peak = tf32 if dtype == "float32" else half
            what = "TF32" if dtype == "float32" else "bf16/fp16"
            return {"peak_flops": peak, "device": name, "kind": "cuda",
                    "source": f"{name}: {peak / 1e12:.1f} TFLOP/s dense {what} (datasheet)"}
    return {"peak_flops": None, "device": name, "kind": "cuda",
            "source": f"no peak known for {name}: set GPU_CHECK_PEAK_TFLOPS"}


def device_peak(device, dtype):
    override = os.environ.get("GPU_CHECK_PEAK_TFLOPS")
    if override:
        return {"peak_flops": float(override) * 1e12, "device": device, "kind": device.split(":")[0],
                "source": f"GPU_CHECK_PEAK_TFLOPS={override}"}
    if device == "cpu":
        return cpu_peak()
    import torch  # only where there is a GPU to ask
    return gpu_peak(torch.cuda.get_device_name(torch.device(device)), dtype)


# ---- the model's FLOPs

def safetensors_shapes(model_dir):
    """{name: shape} of every tensor in the checkpoint, from the safetensors headers alone."""
    shapes = {}
    for path in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        for k, v in header.items():
            if k != "__metadata__":
                shapes[k] = v["shape"]
    return shapes


def model_info(model_dir):
    cfg = load(os.path.join(model_dir, "config.json"))
    shapes = safetensors_shapes(model_dir)
    if not shapes:
        raise SystemExit(f"summarize: no *.safetensors in {model_dir}")
    numel = {k: math.prod(s) for k, s in shapes.items()}
    total = sum(numel.values())
    outside = sum(v for k, v in numel.items() if "embed_tokens" in k or k.startswith("lm_head") or ".lm_head" in k)
    d, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    # A mixture of experts computes num_experts_per_tok of its experts per token: body_params counts
    # the active ones (the FLOPs per token), params every stored one.
    body = total - outside
    experts = sum(v for k, v in numel.items() if ".experts." in k)
    n_experts = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts")
    if experts and n_experts and cfg.get("num_experts_per_tok"):
        body = body - experts + experts * cfg["num_experts_per_tok"] / n_experts
    return {"dir": os.path.abspath(model_dir), "params": total, "body_params": body, "layers": L,
            "hidden": d, "vocab": V, "tied": bool(cfg.get("tie_word_embeddings", False)),
            "head_flops_per_row": 2 * V * d}


def flops_per_token(model, mean_tokens):
    return 2 * model["body_params"] + 2 * model["layers"] * model["hidden"] * mean_tokens


def model_flops(model, tokens_through_layers, rows_through_head, mean_tokens):
    return tokens_through_layers * flops_per_token(model, mean_tokens) + rows_through_head * model["head_flops_per_row"]


def time_problem(what, seconds):
    if seconds is None:
        return f"{what}: no measured time"
    if seconds <= 0:
        return f"{what}: time {seconds:g} s is not positive"
    if seconds < MIN_SECONDS:
        return f"{what}: {seconds * 1e3:.2f} ms is under 10 ms, too short to measure"
    return None


def rate_problem(what, tokens_per_s, model, mean_tokens, peak):
    """tokens/s through the layers above what the peak allows for this model."""
    if not peak.get("peak_flops") or tokens_per_s is None:
        return None
    most = peak["peak_flops"] / flops_per_token(model, mean_tokens)
    if tokens_per_s > most:
        return f"{what}: {tokens_per_s:,.0f} tok/s through the layers is above the {most:,.0f} the peak allows"
    return None


# ---- our run, transformers', MFU

def run_figures(run_dir, model, peak):
    res = load(os.path.join(run_dir, "results.json"))
    status = load(os.path.join(run_dir, "status.json"))
    problems = []
    t = res.get("timing") or {}
    b = res.get("batching") or {}
    if "compute_s" not in t:
        problems.append(f"{run_dir}/results.json has no timing.compute_s: the run did not measure its scoring")
    compute = t.get("compute_s")
    p = time_problem("our compute window", compute)
    if p:
        problems.append(p)
    ok = not problems
    requested, computed = t.get("tokens_requested", 0), t.get("tokens_computed", 0)
    items = max(b.get("items") or b.get("batches") or 1, 1)
    mean_tokens = b.get("tokens_requested", requested) / items
    loads = [w["load_s"] for w in t.get("workers", []) if isinstance(w.get("load_s"), (int, float))]
    acc = res.get("groups", {}).get("mmlu", {}).get("acc,none")
    if acc is None:  # a subset of subjects: the mean over tasks
        accs = [v["acc,none"] for v in res["results"].values() if isinstance(v.get("acc,none"), (int, float))]
        acc = sum(accs) / max(len(accs), 1)
    out = {"acc": acc, "documents": sum(x["documents_done"] for x in status.get("task_progress", {}).values()),
           "compute_s": compute, "before_first_batch_s": t.get("before_first_batch_s"),
           "load_s": max(loads) if loads else None, "wall_s": float(res.get("total_evaluation_time_seconds", 0)),
           "tokens_requested": requested, "tokens_computed": computed, "tokens_scored": t.get("tokens_scored", 0),
           "mean_request_tokens": mean_tokens, "batches": b.get("batches"),
           "workers": [{k: w.get(k) for k in ("name", "load_s", "busy_s", "busy_fraction", "tokens_computed")}
                       for w in t.get("workers", [])],
           "tok_s": requested / compute if ok else None, "computed_tok_s": computed / compute if ok else None}
    if ok:
        p = rate_problem("ours", out["computed_tok_s"], model, mean_tokens, peak)
        if p:
            problems.append(p)
    out["problems"] = problems
    return out


def compare(run, hf, model, peak):
    problems = list(run["problems"])
    p = time_problem("transformers' loop", hf.get("seconds"))
    if p:
        problems.append(p)
    out = {"hf_tok_s": None, "ours_over_theirs": None}
    if not p:
        out["hf_tok_s"] = hf["tokens"] / hf["seconds"]
        q = rate_problem("transformers", out["hf_tok_s"], model, hf["tokens"] / max(hf["requests"], 1), peak)
        if q:
            problems.append(q)
    if not problems:
        out["ours_over_theirs"] = hf["seconds"] / run["compute_s"]  # the same requests: the ratio of the times
    out["choice_agreement"] = hf.get("choice_agreement")
    out["problems"] = problems
    return out


def mfu(run, model, peak, hf=None):
    problems = list(run["problems"])
    if not peak.get("peak_flops"):
        problems.append(peak.get("source", "no peak"))
    out = {"peak_flops": peak.get("peak_flops"), "peak_source": peak.get("source"),
           "flops_per_token": flops_per_token(model, run["mean_request_tokens"]),
           "mean_request_tokens": run["mean_request_tokens"], "params": model["params"],
           "body_params": model["body_params"], "ours_mfu": None}
    checks = []
    if not problems:
        ours = model_flops(model, run["tokens_computed"], run["tokens_scored"], run["mean_request_tokens"])
        out["ours_flops"] = ours
        out["ours_mfu"] = ours / run["compute_s"] / peak["peak_flops"]
        checks.append(("ours", out["ours_mfu"]))
    if hf is not None and not problems:
        if time_problem("transformers' loop", hf.get("seconds")):
            problems.append(time_problem("transformers' loop", hf.get("seconds")))
        else:
            theirs = model_flops(model, hf["tokens"], run["tokens_scored"], hf["tokens"] / max(hf["requests"], 1))
            out["hf_mfu"] = theirs / hf["seconds"] / peak["peak_flops"]
            checks.append(("transformers", out["hf_mfu"]))
    for who, m in checks:
        if m > 1:
            problems.append(f"{who}: MFU {100 * m:.1f}% is above the peak: impossible")
        elif m < 0:
            problems.append(f"{who}: MFU {100 * m:.1f}% is negative")
    out["problems"] = problems
    return out


def oom(calibration):
    """The probe met a real CUDA OOM (a point noted "out of memory") and still chose a budget."""
    d = calibration["devices"][0]
    points = d["probe"]["points"]
    at = [p["batch_tokens"] for p in points if p["note"] == "out of memory"]
    fit = [p["batch_tokens"] for p in points if p["fits"]]
    ok = bool(at) and d["batch_tokens"] > 0
    return {"pass": ok, "result": f"OOM at {at or 'none'} tokens; fitted {fit}; chose {d['batch_tokens']}"}


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    cmd, args = argv[1], argv[2:]
    opt = lambda i: load(args[i]) if len(args) > i and args[i] and os.path.exists(args[i]) else None
    if cmd == "peak":
        kv = dict(zip(args[::2], args[1::2]))
        out = device_peak(kv.get("--device", "cpu"), kv.get("--dtype", "float32"))
    elif cmd == "model":
        out = model_info(args[0])
    elif cmd == "run":
        out = run_figures(args[0], load(args[1]), load(args[2]))
    elif cmd == "compare":
        out = compare(load(args[0]), load(args[1]), load(args[2]), load(args[3]))
    elif cmd == "mfu":
        out = mfu(load(args[0]), load(args[1]), load(args[2]), opt(3))
    elif cmd == "oom":
        out = oom(load(args[0]))
    else:
        sys.exit(__doc__)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv)
