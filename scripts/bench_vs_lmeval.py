#!/usr/bin/env python3
"""gpueval beside lm-evaluation-harness on one workload, on this machine's CPU: wall times and agreement.

Not part of CI. Run it through scripts/bench_vs_lmeval.sh, which provides lm-eval's venv (the one
scripts/verify_lm_eval.sh makes) and builds gpueval.

The workload (issue 17): MMLU 5-shot, four subjects x 25 questions (400 requests), a random
134M-parameter Llama (`gpueval init-model` defaults: hidden 768, 12 layers, MLP 2048) with the
Mistral 7B v0.1 tokenizer from ../shared, float32; or --model DIR, any float32 checkpoint with a
32,000-token vocabulary (a mixture of experts from bench_architectures.py's shapes, say). lm-eval runs its own mmlu_<subject>.yaml over the
same rows (cais/mmlu layout, written by verify_lm_eval.py's write_mmlu_task) with its `hf` backend
(HFLM, batch size --lm-eval-batch, torch's default threads); gpueval runs its tasks over the CSV
release. Every measured run is a fresh process with a fresh output folder; the rows alternate
between the systems run by run (lm-eval, gpueval cpu:1, gpueval cpu:2, and the same two with an
empty calibration cache, which is a first run on a new model), --reps times each. Wall time is
the whole process, start to exit (imports and model load included on both sides).

Printed: per system the median (and every run's) wall time, its ratio to lm-eval's median, tokens
computed (lm-eval: the forward inputs HFLM builds, one per distinct context + continuation[:-1],
as its Collator groups them; gpueval: results.json batching.tokens_computed, the rows and the shared
prefixes its workers computed), gpueval's padding, and its tokens computed per second of worker busy time
(status.json's busy time: tokens_done / tokens_per_second, summed over workers); and the
agreement with lm-eval: prompts identical, max |delta loglikelihood| over the 400 requests, acc
equal per task, and gpueval's loglikelihoods identical (bit for bit) between cpu:1 and cpu:2.
With --speed (default on) one more gpueval cpu:1 run with prefix_reuse: false gives the
per-token speed without prefix sharing, against which the speed with it is compared.

Exit 0 when the agreement holds (every prompt identical, |delta| <= --tol, acc equal, cpu:1 ==
cpu:2), else 1.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import verify_lm_eval as V  # noqa: E402  (data layouts: write_mmlu_task)

SUBJECTS = ["abstract_algebra", "anatomy", "astronomy", "business_ethics"]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def lm_eval_child(work: Path, out: Path, limit: int, shots: int, batch: int, count_tokens: bool) -> None:
    """Runs in its own process (timed by the parent): lm-eval on the workload, samples to `out`."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    lm = HFLM(pretrained=str(work / "model"), dtype="float32", device="cpu", batch_size=batch)
    tm = TaskManager(include_path=str(work / "lm_eval_tasks"), include_defaults=False)
    tasks = [f"mmlu_{s}" for s in SUBJECTS]
    res = lm_eval.simple_evaluate(model=lm, tasks=tasks, num_fewshot=shots, limit=limit, log_samples=True,
                                  task_manager=tm, bootstrap_iters=0)
    body = {"tasks": {}, "tokens": None}
    keys = set()
    for task in tasks:
        samples = {}
        for s in res["samples"][task]:
            samples[s["doc_id"]] = {"args": [list(a) for a in s["arguments"]],
                                    "ll": [float(r[0][0]) for r in s["resps"]]}
            if count_tokens:
                for context, continuation in s["arguments"]:
                    ctx, cont = lm._encode_pair(context, continuation)
                    inp = (ctx + cont)[-(lm.max_length + 1):][:-1]
                    keys.add(tuple(inp))
        body["tasks"][task] = {"samples": samples, "acc": res["results"][task]["acc,none"]}
    if count_tokens:
        body["tokens"] = sum(len(k) for k in keys)
    out.write_text(json.dumps(body))


def prepare(args, work: Path) -> None:
    model = work / "model"
    if args.model:  # a given checkpoint (e.g. a mixture of experts) with the Mistral tokenizer's files beside it
        shutil.rmtree(model, ignore_errors=True)
        shutil.copytree(args.model, model)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(Path(args.data) / "tokenizers" / "mistral7b_v0.1" / name, model / name)
    elif not (model / "model.safetensors").exists():
        tok = Path(args.data) / "tokenizers" / "mistral7b_v0.1"
        subprocess.run([args.gpueval, "init-model", "--tokenizer", str(tok), "--out", str(model), "--force"],
                       check=True, stdout=subprocess.DEVNULL)
    import lm_eval
    builtin = Path(lm_eval.__file__).parent / "tasks"
    lm_dir, dd = work / "lm_eval_tasks", work / "data"
    for d in (lm_dir, dd):
        d.mkdir(parents=True, exist_ok=True)
    for s in SUBJECTS:
        V.write_mmlu_task(Path(args.data), dd, lm_dir / f"mmlu_{s}.yaml",
                          builtin / "mmlu" / "default" / f"mmlu_{s}.yaml", s)


def run_lm_eval(args, work: Path, n: int) -> dict:
    out = work / f"lm_eval_{n}.json"
    cmd = [sys.executable, __file__, "--child", str(out), "--work", str(work), "--limit", str(args.limit),
           "--shots", str(args.shots), "--lm-eval-batch", str(args.lm_eval_batch)]
    if n == 0:
        cmd.append("--count-tokens")
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    body = json.loads(out.read_text())
    body["wall"] = wall
    return body


def run_gpueval(args, work: Path, name: str, gpus: str, fresh_cache: bool, extra: dict | None = None) -> dict:
    out_dir = work / f"gpueval_{name}"
    shutil.rmtree(out_dir, ignore_errors=True)
    cfg = work / f"gpueval_{name}.yaml"
    cfg.write_text(json.dumps({
        "model": str(work / "model"), "tasks": [f"mmlu_{s}" for s in SUBJECTS], "dtype": "float32",
        "output": str(out_dir), "limit": args.limit, "num_fewshot": args.shots,
        "data": {"mmlu": str((Path(args.data) / "mmlu").resolve())}, **(extra or {})}, indent=1) + "\n")
    cache = work / ("cache_empty" if fresh_cache else "cache")
    if fresh_cache:
        shutil.rmtree(cache, ignore_errors=True)
    env = dict(os.environ, GPUEVAL_CACHE_DIR=str(cache), GPUEVAL_TASKS_DIR=str(REPO / "tasks"))
    cmd = [args.gpueval, "run", "--gpus", gpus, str(cfg)]
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit(f"bench: {' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    results = json.loads((out_dir / "results.json").read_text())
    status = json.loads((out_dir / "status.json").read_text())
    b = results["batching"]
    tasks = {}
    for s in SUBJECTS:
        task = f"mmlu_{s}"
        samples = {}
        with (out_dir / f"samples_{task}.jsonl").open(encoding="utf-8") as f:
            for line in f:
                x = json.loads(line)
                samples[x["doc_id"]] = {"args": [list(a.values()) for a in x["arguments"].values()],
                                        "ll": [float(r[0][0]) for r in x["resps"]]}
        tasks[task] = {"samples": samples, "acc": results["results"][task]["acc,none"]}
    probe = [ln for ln in p.stderr.splitlines() if "probed in" in ln]
    return {"wall": wall, "tasks": tasks, "tokens": b["tokens_computed"],  # prefixes included
            "padding": b["padding_fraction"], "batch_tokens": b.get("batch_tokens"),
            # tokens computed (rows and prefixes) per second of a worker's busy time; status.json's
            # tokens_per_second counts padded tokens
            "worker_tps": [b["tokens_computed"] /
                           max(sum(w["tokens_done"] / w["tokens_per_second"] for w in status["workers"]
                                   if w["tokens_per_second"] > 0), 1e-9)] * len(status["workers"]),
            "probe": probe[0].split("] ", 1)[-1] if probe else ""}


def cpu_model() -> str:
    """The processor's name: the ratios depend on it (lm-eval's torch and our oneDNN pick kernels by it)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown processor"


def agreement(ours: dict, theirs: dict) -> dict:
    st = {"requests": 0, "prompts_same": 0, "max_delta": 0.0, "acc_equal": 0, "tasks": 0}
    for task, t in theirs["tasks"].items():
        o = ours["tasks"][task]
        st["tasks"] += 1
        st["acc_equal"] += abs(o["acc"] - t["acc"]) < 1e-12
        for doc, s in t["samples"].items():
            g = o["samples"][int(doc)] if int(doc) in o["samples"] else o["samples"][str(doc)]
            for a, b, la, lb in zip(g["args"], s["args"], g["ll"], s["ll"]):
                st["requests"] += 1
                st["prompts_same"] += a == b
                st["max_delta"] = max(st["max_delta"], abs(la - lb))
    return st


def identical(a: dict, b: dict) -> bool:
    return all(a["tasks"][t]["samples"][d]["ll"] == b["tasks"][t]["samples"][d]["ll"]
               for t in a["tasks"] for d in a["tasks"][t]["samples"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpueval", default=os.environ.get("GPUEVAL_BIN") or str(REPO / "build" / "gpueval"))
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--work", default="/tmp/bench_vs_lmeval")
    ap.add_argument("--model", help="a float32 checkpoint with a 32,000-token vocabulary to use instead of the "
                                    "init-model Llama (the Mistral tokenizer is copied beside it)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--limit", type=int, default=25)
    ap.add_argument("--shots", type=int, default=5)
    ap.add_argument("--lm-eval-batch", type=int, default=1)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--no-speed", dest="speed", action="store_false",
                    help="skip the prefix_reuse: false run that gives the per-token speed without sharing")
    ap.add_argument("--no-first-run", dest="first_run", action="store_false",
                    help="skip the runs with an empty calibration cache")
    ap.add_argument("--table", help="also write the table here (default: WORK/table.md)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--count-tokens", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    work = Path(args.work).resolve()
    if args.child:
        lm_eval_child(work, Path(args.child), args.limit, args.shots, args.lm_eval_batch, args.count_tokens)
        return 0
    work.mkdir(parents=True, exist_ok=True)
    prepare(args, work)

    systems = [("lm-eval", None), ("gpueval cpu:1", ("cpu:1", False)), ("gpueval cpu:2", ("cpu:2", False))]
    if args.first_run:
        systems += [("gpueval cpu:1, first run", ("cpu:1", True)), ("gpueval cpu:2, first run", ("cpu:2", True))]
    runs = {name: [] for name, _ in systems}
    # One warm-up gpueval run fills the calibration cache the cached rows use (and the page cache).
    log("[bench] warm-up: gpueval cpu:1 (fills the calibration cache)")
    run_gpueval(args, work, "warmup", "cpu:1", False)
    for rep in range(args.reps):
        for name, spec in systems:
            log(f"[bench] run {rep + 1}/{args.reps}: {name}")
            r = run_lm_eval(args, work, rep) if spec is None else run_gpueval(
                args, work, name.replace(" ", "_").replace(",", "").replace(":", ""), spec[0], spec[1])
            log(f"[bench]   {r['wall']:.1f} s" + (f"  ({r['probe']})" if r.get("probe") else ""))
            runs[name].append(r)
    speed = None
    if args.speed:
        log("[bench] gpueval cpu:1 with prefix_reuse: false (per-token speed without prefix sharing)")
        speed = run_gpueval(args, work, "no_prefix_sharing", "cpu:1", False, {"prefix_reuse": False})

    lm_median = statistics.median(r["wall"] for r in runs["lm-eval"])
    lm_tokens = runs["lm-eval"][0]["tokens"]
    model = f"{args.model}" if args.model else "random 134M Llama"
    lines = [f"MMLU {args.shots}-shot, {len(SUBJECTS)} subjects x {args.limit} questions, {model} "
             f"(Mistral tokenizer), float32; {args.reps} runs per row, alternating; lm-eval batch "
             f"{args.lm_eval_batch}", "",
             "| system | wall, median (s) | runs (s) | x lm-eval | tokens computed | padding | worker tok/s | "
             "prompts identical | max abs delta ll | acc equal |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    ok = True
    for name, spec in systems:
        rs = runs[name]
        walls = [r["wall"] for r in rs]
        med = statistics.median(walls)
        cells = [name, f"{med:.1f}", " ".join(f"{w:.1f}" for w in walls), f"{lm_median / med:.2f}"]
        if spec is None:
            cells += [str(lm_tokens), "-", "-", "-", "-", "-"]
        else:
            st = agreement(rs[0], runs["lm-eval"][0])
            tps = statistics.median(sum(r["worker_tps"]) / len(r["worker_tps"]) for r in rs)
            cells += [str(rs[0]["tokens"]), f"{100 * rs[0]['padding']:.1f}%", f"{tps:.0f}",
                      f"{st['prompts_same']}/{st['requests']}", f"{st['max_delta']:.2e}",
                      f"{st['acc_equal']}/{st['tasks']}"]
            ok = ok and st["prompts_same"] == st["requests"] and st["max_delta"] <= args.tol and \
                st["acc_equal"] == st["tasks"]
        lines.append("| " + " | ".join(cells) + " |")
    same_workers = identical(runs["gpueval cpu:1"][0], runs["gpueval cpu:2"][0])
    ok = ok and same_workers
    lines.append("")
    lines.append(f"gpueval cpu:1 and cpu:2 loglikelihoods identical: {'yes' if same_workers else 'NO'}")
    if args.first_run:
        for w in ("cpu:1", "cpu:2"):
            first = statistics.median(r["wall"] for r in runs[f"gpueval {w}, first run"])
            cached = statistics.median(r["wall"] for r in runs[f"gpueval {w}"])
            lines.append(f"first run / cached run, {w}: {first / cached:.2f} ({runs[f'gpueval {w}, first run'][0]['probe']})")
    if speed:
        with_tps = statistics.median(sum(r["worker_tps"]) for r in runs["gpueval cpu:1"])
        without_tps = sum(speed["worker_tps"])
        lines.append(f"per-token speed, cpu:1: {with_tps:.0f} tok/s with prefix sharing, {without_tps:.0f} without "
                     f"({with_tps / without_tps:.2f}); without sharing: {speed['tokens']} tokens, "
                     f"{100 * speed['padding']:.1f}% padding, {speed['wall']:.1f} s, "
                     f"identical to lm-eval's token count: {'yes' if speed['tokens'] == lm_tokens else 'no'}")
    try:
        import lm_eval
        import torch
        lines.append(f"lm-eval {lm_eval.__version__ if hasattr(lm_eval, '__version__') else '?'}, torch "
                     f"{torch.__version__}, {os.cpu_count()} cores ({cpu_model()}); gpueval {args.gpueval}")
    except ImportError:
        pass
    table = "\n".join(lines) + "\n"
    print(table)
    Path(args.table or work / "table.md").write_text(table)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
