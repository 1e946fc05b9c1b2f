#!/usr/bin/env python3
"""lm-eval's command line with `--model hf` beside `--model gpueval`, on this machine's cores: wall times,
start-up, and agreement.

Not part of CI. Run it through scripts/bench_lm_eval_backend.sh, which provides lm-eval's venv for the hf
side (the one scripts/verify_lm_eval.sh makes, torch and transformers included) and the package's own for the
gpueval side (`pip install ./python`: lm-eval without torch, as the package's users have it; with torch in
the same venv lm-eval imports it and collects torch's environment report, about 5 s here), and builds gpueval.
The gpueval side's launcher caches lm-eval's task index (python/gpueval_lm_eval/task_index.py) in
<work>/lm_eval_index: built (and timed) once before the runs, as a user's first launch with these task
files builds it.

Workloads, on the random 134M-parameter Llama of scripts/bench_vs_lmeval.py (`gpueval init-model`
defaults with the Mistral 7B v0.1 tokenizer from ../shared, float32):
  mmlu: MMLU 5-shot over --subjects (8) x --limit (50) questions: lm-eval's own mmlu_<subject>.yaml
        over cais/mmlu rows made from the shared CSVs (verify_lm_eval.write_mmlu_task);
  gsm8k: lm-eval's gsm8k_cot 8-shot over --gen-limit (16) documents of the shared test.jsonl, greedy,
        its own generation_kwargs (256 new tokens at most; a random model never says "Q:");
  startup: one MMLU question 0-shot, so that what is measured is each side's start-up.
Each side is one lm-eval process, timed from start to exit (imports, model load, engine start-up
included), and inside it the time its model's loglikelihood / generate_until calls took (the
requests computed, apart from lm-eval's own work: task loading, prompts, metrics; the hf side's
model load is outside them, the gpueval side's engine start-up inside): `lm-eval run --model hf --model_args pretrained=M,dtype=float32 --device cpu --batch_size 1`
(HFLM's default batch, torch's default threads: every core) and `gpueval-lm-eval run --model gpueval
--model_args pretrained=M,dtype=float32,gpus=cpu:N,journal_dir=<fresh> --batch_size auto` (N = the
cores; a fresh journal each run, so nothing is resumed; an empty calibration cache, so the batch
budget is probed as on a first run of this architecture here; with --warm-cache, one more run reads the
cache that one filled, as every later run does). Runs alternate between the sides, --reps times each. Agreement from the samples files: every request's arguments identical, max |delta
loglikelihood|, generations identical, metrics equal. Also timed: importing the package, and
`gpueval requests --describe` (the check before any compute).

Exit 0 when every row agrees, else 1.
"""

from __future__ import annotations

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
import verify_lm_eval as V  # noqa: E402

SUBJECTS = ["abstract_algebra", "anatomy", "astronomy", "business_ethics", "clinical_knowledge",
            "college_biology", "college_chemistry", "college_computer_science"]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def prepare(args, work: Path) -> None:
    import lm_eval
    builtin = Path(lm_eval.__file__).parent / "tasks"
    data = Path(args.data)
    lm_dir, dd = work / "lm_eval_tasks", work / "data"
    for d in (lm_dir, dd):
        d.mkdir(parents=True, exist_ok=True)
    for s in args.subjects:
        V.write_mmlu_task(data, dd, lm_dir / f"mmlu_{s}.yaml", builtin / "mmlu" / "default" / f"mmlu_{s}.yaml", s)
    gsm = (data / "gsm8k" / "test.jsonl").resolve()
    (lm_dir / "gsm8k_cot.yaml").write_text(
        f"include: {builtin / 'gsm8k' / 'gsm8k-cot.yaml'}\ntask: gsm8k_cot\ndataset_path: json\n"
        f"dataset_name: null\ndataset_kwargs:\n  data_files:\n    test: {gsm}\n"
        "training_split: null\nvalidation_split: null\ntest_split: test\n")
    model = work / "model"
    if not (model / "config.json").exists():
        if args.model:
            shutil.copytree(args.model, model)
        else:
            tok = work / "tokenizer"
            tok.mkdir(exist_ok=True)
            for f in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(data / "tokenizers" / "mistral7b_v0.1" / f, tok / f)
            subprocess.run([args.gpueval, "init-model", "--tokenizer", str(tok), "--out", str(model), "--force"],
                           check=True, stdout=subprocess.DEVNULL)


def child(side: str, times: str) -> None:
    """lm-eval's CLI (sys.argv after `--child SIDE TIMES`), with the model's request methods timed:
    what each side spends computing requests, apart from lm-eval's own work. The `gpueval` side is
    what `gpueval-lm-eval` runs (its main()); the hf side what `lm-eval` runs."""
    import atexit
    import functools

    spent = {"model_s": 0.0}
    if side == "hf":
        from lm_eval.models.huggingface import HFLM as cls
    else:
        from gpueval_lm_eval.model import GpuevalLM as cls
    for name in ("loglikelihood", "loglikelihood_rolling", "generate_until"):
        method = getattr(cls, name)

        @functools.wraps(method)
        def timed_method(self, *a, __m=method, **kw):
            t0 = time.monotonic()
            try:
                return __m(self, *a, **kw)
            finally:
                spent["model_s"] += time.monotonic() - t0

        setattr(cls, name, timed_method)
    atexit.register(lambda: Path(times).write_text(json.dumps(spent)))
    sys.argv = ["lm-eval"] + sys.argv[4:]
    if side == "hf":
        from lm_eval.__main__ import cli_evaluate
        cli_evaluate()
    else:
        from gpueval_lm_eval.cli import main as launcher
        sys.exit(launcher())


def command(args, work: Path, side: str, tasks: list[str], shots: int | None, limit: int, out: Path) -> list[str]:
    model = work / "model"
    python = sys.executable if side == "hf" else args.gpueval_python
    cmd = [python, __file__, "--child", side, str(out) + ".times.json"]
    if side == "hf":
        cmd += ["run", "--model", "hf", "--model_args", f"pretrained={model},dtype=float32", "--device", "cpu",
                "--batch_size", "1"]
    else:
        journal = out.parent / (out.name + "_journal")
        cmd += ["run", "--model", "gpueval", "--model_args",
                f"pretrained={model},dtype=float32,gpus={args.gpus},cpu_threads={args.cpu_threads},"
                f"binary={args.gpueval},journal_dir={journal}",
                "--batch_size", "auto"]
    cmd += ["--tasks", ",".join(tasks), "--include_path", str(work / "lm_eval_tasks"), "--limit", str(limit),
            "--output_path", str(out), "--log_samples"]
    if shots is not None:
        cmd += ["--num_fewshot", str(shots)]
    return cmd


def timed(cmd: list[str], log_path: Path, env: dict | None = None) -> float:
    t0 = time.monotonic()
    with log_path.open("w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}; see {log_path}")
    return wall


def read_out(out: Path, tasks: list[str]) -> dict:
    results = json.loads(next(out.rglob("results_*.json")).read_text())
    body = {}
    for t in tasks:
        samples = {}
        for line in next(out.rglob(f"samples_{t}_*.jsonl")).read_text().splitlines():
            s = json.loads(line)
            samples[(s["doc_id"], s.get("filter", "none"))] = s
        body[t] = {"samples": samples, "metrics": V._metrics_of(results["results"][t])}
    return body


def agree(ours: dict, theirs: dict) -> dict:
    st = {"requests": 0, "args_equal": 0, "max_dll": 0.0, "gens": 0, "gens_equal": 0, "metrics_equal": True}
    for t, b in theirs.items():
        a = ours[t]
        st["metrics_equal"] &= a["metrics"] == b["metrics"]
        for key, sb in b["samples"].items():
            sa = a["samples"].get(key)
            st["requests"] += len(sb["arguments"])
            if sa is None:
                continue
            st["args_equal"] += sum(x == y for x, y in zip(sa["arguments"], sb["arguments"]))
            for ra, rb in zip(sa["resps"], sb["resps"]):
                if isinstance(rb[0], str):
                    st["gens"] += 1
                    st["gens_equal"] += ra[0] == rb[0]
                else:
                    st["max_dll"] = max(st["max_dll"], abs(float(ra[0][0]) - float(rb[0][0])))
    return st


def main() -> int:
    if len(sys.argv) > 3 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpueval", default=os.environ.get("GPUEVAL_BIN") or str(REPO / "build" / "gpueval"))
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--model", help="a float32 checkpoint instead of the random 134M Llama")
    ap.add_argument("--work", default="/tmp/gpueval-backend-bench")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--subjects", type=lambda s: s.split(","), default=SUBJECTS)
    ap.add_argument("--limit", type=int, default=50)
    ap.add_argument("--gen-limit", type=int, default=16)
    ap.add_argument("--gpus", default=f"cpu:{os.cpu_count()}")
    ap.add_argument("--cpu-threads", type=int, default=1,
                    help="threads of each CPU worker (cpu_threads= in --model_args); --gpus cpu:1 --cpu-threads 2 "
                    "is one worker on both cores, whose decode steps read the weights once for both")
    ap.add_argument("--gpueval-python", default=sys.executable,
                    help="the interpreter of the gpueval side: a venv made by `pip install ./python` (lm-eval and "
                    "the package, no torch), as a user of the package has; default: this one")
    ap.add_argument("--workloads", default="startup,mmlu,gsm8k")
    ap.add_argument("--warm-cache", action="store_true",
                    help="after each cold gpueval run (an empty calibration cache: a first run of this "
                    "architecture on this machine, which probes its batch budget), time one more with the "
                    "cache that run filled: what every later run, a new checkpoint of the same architecture "
                    "included, does")
    args = ap.parse_args()
    args.gpueval = str(Path(args.gpueval).resolve())
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    prepare(args, work)
    t0 = time.monotonic()
    subprocess.run([args.gpueval_python, "-c", "import gpueval_lm_eval"], check=True)
    t_import = time.monotonic() - t0
    t0 = time.monotonic()
    subprocess.run([args.gpueval, "requests", "--model", str(work / "model"), "--gpus", args.gpus, "--describe"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t_describe = time.monotonic() - t0
    # The launcher's task index for these task files (prepare() rewrites them): built here, timed apart,
    # so that every run below starts as a user's launch does once it has run with these files.
    t0 = time.monotonic()
    subprocess.run([args.gpueval_python, "-c", "from lm_eval.tasks import TaskManager\nfrom gpueval_lm_eval import "
                    f"task_index\ntask_index.install()\nTaskManager(include_path={str(work / 'lm_eval_tasks')!r})"],
                   check=True, env=dict(os.environ, GPUEVAL_LM_EVAL_INDEX_CACHE=str(work / "lm_eval_index")),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t_index = time.monotonic() - t0
    log(f"[startup] the launcher's task index built in {t_index:.2f} s (lm-eval's import included; later "
        "launches read it)")
    log(f"[startup] import gpueval_lm_eval {t_import:.2f} s (lm-eval and its dependencies included); "
        f"gpueval requests --describe {t_describe:.2f} s")
    workloads = {"startup": ([f"mmlu_{args.subjects[0]}"], 0, 1),
                 "mmlu": ([f"mmlu_{s}" for s in args.subjects], 5, args.limit),
                 "gsm8k": (["gsm8k_cot"], None, args.gen_limit)}
    rows, ok = [], True
    for name in args.workloads.split(","):
        tasks, shots, limit = workloads[name]
        sides = ("hf", "gpueval", "warm") if args.warm_cache else ("hf", "gpueval")
        walls = {side: [] for side in sides}
        model_s = {side: [] for side in sides}
        outs = {}
        for rep in range(args.reps):
            for side in sides:
                out = work / f"out_{name}_{side}_{rep}"
                shutil.rmtree(out, ignore_errors=True)
                shutil.rmtree(out.parent / (out.name + "_journal"), ignore_errors=True)
                cmd = command(args, work, "hf" if side == "hf" else "gpueval", tasks, shots, limit, out)
                log(f"[{name}] {side} rep {rep + 1}: {' '.join(cmd)}")
                # A calibration cache of its own per cold run (a first run on this architecture); the
                # warm run reads the one its cold run filled (a fresh journal all the same).
                env = None
                if side != "hf":
                    cache = work / f"out_{name}_gpueval_{rep}_cache"
                    if side == "gpueval":
                        shutil.rmtree(cache, ignore_errors=True)
                    env = dict(os.environ, GPUEVAL_CACHE_DIR=str(cache),
                               GPUEVAL_LM_EVAL_INDEX_CACHE=str(work / "lm_eval_index"))
                walls[side].append(timed(cmd, work / f"log_{name}_{side}_{rep}.txt", env))
                model_s[side].append(json.loads(Path(str(out) + ".times.json").read_text())["model_s"])
                log(f"[{name}] {side} rep {rep + 1}: {walls[side][-1]:.1f} s, {model_s[side][-1]:.1f} s in the model")
                outs[side] = out
        for side in sides[1:]:
            st = agree(read_out(outs[side], tasks), read_out(outs["hf"], tasks))
            good = st["args_equal"] == st["requests"] and st["max_dll"] <= 1e-4 and \
                st["gens_equal"] == st["gens"] and st["metrics_equal"]
            ok &= good
            rows.append((name, side, tasks, shots, limit, walls, st, model_s))
    print(f"lm-eval CLI, --model hf (batch 1, cpu, torch threads {os.cpu_count()}; {sys.executable}) vs --model "
          f"gpueval (gpus {args.gpus}, cpu_threads {args.cpu_threads}, batch auto; {args.gpueval_python}); import {t_import:.2f} s, "
          f"describe {t_describe:.2f} s\n")
    print("| workload | gpueval run | requests | hf wall (s) | gpueval wall (s) | x hf | hf in model (s) | "
          "gpueval in model (s) | x hf in model | args equal | max abs dloglik | generations equal | metrics equal |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---|")
    for name, side, tasks, shots, limit, walls, st, model_s in rows:
        hf, ours = statistics.median(walls["hf"]), statistics.median(walls[side])
        mh, mo = statistics.median(model_s["hf"]), statistics.median(model_s[side])
        print(f"| {name} ({len(tasks)} task(s), {'default' if shots is None else shots}-shot, limit {limit}) | "
              f"{'cold calibration cache' if side == 'gpueval' else 'warm calibration cache'} | "
              f"{st['requests']} | {' / '.join(f'{w:.1f}' for w in walls['hf'])} | "
              f"{' / '.join(f'{w:.1f}' for w in walls[side])} | {hf / ours:.2f} | "
              f"{' / '.join(f'{w:.1f}' for w in model_s['hf'])} | {' / '.join(f'{w:.1f}' for w in model_s[side])} | "
              f"{mh / mo:.2f} | "
              f"{st['args_equal']}/{st['requests']} | {st['max_dll']:.2e} | {st['gens_equal']}/{st['gens']} | "
              f"{'yes' if st['metrics_equal'] else 'NO'} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
