#!/usr/bin/env python3
"""lm-eval's `hf` model against lm-eval's `gpueval` model (python/gpueval_lm_eval), task by task.

Not part of CI. Run it through scripts/verify_lm_eval_backend.sh, which makes (or reuses) lm-eval's
venv outside the repository (scripts/lmeval_venv.sh), installs ./python into it and builds gpueval.

Both sides are lm_eval.simple_evaluate over the same task YAMLs: lm-eval's own YAMLs `include:`d by
absolute path with only the dataset keys pointed at local files made from ../shared/data (as
scripts/verify_lm_eval.py does), plus a loglikelihood_rolling task over the repository's demo text
and a task of our own whose process_results is a Python !function (work/lm_eval_tasks/custom_*).
The chat rows run a random Llama checkpoint with the Llama-3 tokenizer and its chat template
(`gpueval init-model`), with apply_chat_template, fewshot_as_multiturn and a system instruction;
HumanEval (1,024 new tokens) runs on that checkpoint without a template. Its and MBPP's metric is
Hugging Face evaluate's code_eval, which evaluate.load fetches from the Hub: give a local copy with
--code-eval DIR, else those rows are skipped.
Per task it compares, document by document: the request arguments (lm-eval builds them on both
sides; for chat rows they carry the prompt each side's template engine rendered), every
loglikelihood (|delta| <= --tol), is_greedy, every generation (equal strings), the filtered
responses and every per-document metric, then the aggregated metrics (equal; perplexities within
--tol-rel). Each row runs a third time as a gpueval run's `lm_eval:` task (route 2: `gpueval run` on a
config with tasks [lm_eval:<row>], lm-eval building and scoring the requests through
python/gpueval_lm_eval/bridge.py), whose metrics must equal the `gpueval` model's. It prints a table with both sides' wall times and writes it
to WORK/table.md.

Exit status 0 when every row matches, 1 otherwise.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

for _k in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ[_k] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_ALLOW_CODE_EVAL", "1")

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "python"))
import verify_lm_eval as V  # noqa: E402  the data converters and the chat models

CONTINUOUS = ("perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte", "ll_per_char")
CHAT_SYSTEM = "You are a careful assistant."

CUSTOM_UTILS = '''\
"""A process_results of our own: lm-eval imports it from this folder on both sides."""


def process_results(doc, results):
    ll, is_greedy = results[0]
    target = " " + doc["text"].split(" ")[-1]
    return {"acc": 1.0 if is_greedy else 0.0, "ll_per_char": ll / max(1, len(target))}
'''


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def include(lm_dir: Path, name: str, builtin: Path, files: dict, extra: str = "") -> None:
    """lm_dir/name.yaml: lm-eval's `builtin` with dataset keys over local JSON files {split: path}."""
    splits = {"training_split": None, "validation_split": None, "test_split": None}
    for split in files:
        if split in ("train", "validation", "test"):
            splits[f"{'training' if split == 'train' else split}_split"] = split
    (lm_dir / f"{name}.yaml").write_text(
        f"include: {builtin}\ntask: {name}\ndataset_path: json\ndataset_name: null\n"
        "dataset_kwargs:\n  data_files:\n" + "".join(f"    {k}: {v}\n" for k, v in files.items())
        + "".join(f"{k}: {v if v else 'null'}\n" for k, v in splits.items()) + extra)


def prepare(args, work: Path, lm_tasks: Path) -> list[dict]:
    """The task YAMLs; returns the rows: {name, shots, chat}."""
    data = Path(args.data)
    lm_dir, dd = work / "lm_eval_tasks", work / "data"
    for d in (lm_dir, dd):
        d.mkdir(parents=True, exist_ok=True)
    rows = []
    for subject in ("abstract_algebra", "anatomy", "astronomy"):
        V.write_mmlu_task(data, dd, lm_dir / f"mmlu_{subject}.yaml",
                          lm_tasks / "mmlu" / "default" / f"mmlu_{subject}.yaml", subject)
        rows.append({"name": f"mmlu_{subject}", "shots": 5})
    for subject in ("abstract_algebra", "anatomy"):
        V.write_mmlu_task(data, dd, lm_dir / f"mmlu_{subject}_continuation.yaml",
                          lm_tasks / "mmlu" / "continuation" / f"mmlu_{subject}.yaml", subject)
        rows.append({"name": f"mmlu_{subject}_continuation", "shots": 5})
    V.write_mmlu_task(data, dd, lm_dir / "mmlu_abstract_algebra_generative.yaml",
                      lm_tasks / "mmlu" / "generative" / "mmlu_abstract_algebra.yaml", "abstract_algebra")
    rows.append({"name": "mmlu_abstract_algebra_generative", "shots": 5})
    for name in ("arc_easy", "arc_challenge"):
        f = dd / f"{name}_test.jsonl"
        V.write_jsonl(f, V.arc_rows(data / "arc" / f"{name}_test_mosaic.jsonl", 10**9))
        include(lm_dir, name, lm_tasks / "arc" / f"{name}.yaml", {"test": f})
        rows.append({"name": name, "shots": 0})
    f = dd / "hellaswag_val.jsonl"
    V.write_jsonl(f, V.hellaswag_rows(data / "hellaswag" / "hellaswag_val_full.txt", 10**9))
    include(lm_dir, "hellaswag", lm_tasks / "hellaswag" / "hellaswag.yaml", {"validation": f})
    rows.append({"name": "hellaswag", "shots": 0})
    for task, (rel, split, data_file) in V.SUITE.items():
        if task == "gsm8k_cot":
            continue
        include(lm_dir, task, lm_tasks / rel, {split: (data / data_file).resolve()})
        rows.append({"name": task, "shots": 0})
    include(lm_dir, "lambada_standard", lm_tasks / "lambada" / "lambada_standard.yaml",
            {"test": (data / "lambada_openai" / "lambada_openai.jsonl").resolve()})
    rows.append({"name": "lambada_standard", "shots": 0})
    gsm = (data / "gsm8k" / "test.jsonl").resolve()
    for name, rel, shots in (("gsm8k", "gsm8k.yaml", 5), ("gsm8k_cot", "gsm8k-cot.yaml", 8),
                             ("gsm8k_cot_zeroshot", "gsm8k-cot-zeroshot.yaml", 0)):
        include(lm_dir, name, lm_tasks / "gsm8k" / rel, {"test": gsm, "train": gsm}, "fewshot_split: test\n")
        rows.append({"name": name, "shots": shots, "gen": True})
    he = dd / "humaneval.jsonl"
    with gzip.open(data / "humaneval" / "HumanEval.jsonl.gz", "rb") as src:
        he.write_bytes(src.read())
    include(lm_dir, "humaneval", lm_tasks / "humaneval" / "humaneval.yaml", {"test": he})
    # HumanEval asks for 1,024 new tokens, past stories260K's 512 positions: the Llama-3-tokenizer model.
    rows.append({"name": "humaneval", "shots": 0, "gen": True, "unsafe": True, "model": "llama3"})
    mbpp = [json.loads(l) for l in (data / "mbpp" / "mbpp.jsonl").read_text().splitlines() if l.strip()]
    for split, lo, hi in (("test", 11, 510), ("prompt", 1, 10)):
        V.write_jsonl(dd / f"mbpp_{split}.jsonl", [r for r in mbpp if lo <= r["task_id"] <= hi])
    include(lm_dir, "mbpp", lm_tasks / "mbpp" / "mbpp.yaml",
            {"test": dd / "mbpp_test.jsonl", "prompt": dd / "mbpp_prompt.jsonl"})
    rows.append({"name": "mbpp", "shots": 3, "gen": True, "unsafe": True})
    # loglikelihood_rolling over local text: the repository's demo task (lm-eval's YAML form).
    import yaml
    cfg = yaml.safe_load((REPO / "tasks" / "demo_perplexity.yaml").read_text())
    text = REPO / "tasks" / cfg["dataset_path"]
    cfg.update(task="demo_perplexity", dataset_path="json", dataset_kwargs={"data_files": {"test": str(text)}},
               test_split="test")
    (lm_dir / "demo_perplexity.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    rows.append({"name": "demo_perplexity", "shots": 0})
    # A task with a Python !function process_results of our own.
    custom = lm_dir / "custom"
    custom.mkdir(exist_ok=True)
    (custom / "utils.py").write_text(CUSTOM_UTILS)
    (custom / "custom_lambada_fn.yaml").write_text(
        "task: custom_lambada_fn\ndataset_path: json\ndataset_name: null\n"
        f"dataset_kwargs:\n  data_files:\n    test: {(data / 'lambada_openai' / 'lambada_openai.jsonl').resolve()}\n"
        "test_split: test\noutput_type: loglikelihood\n"
        "doc_to_text: \"{{text.split(' ')[:-1]|join(' ')}}\"\n"
        "doc_to_target: \"{{' ' + text.split(' ')[-1]}}\"\n"
        "process_results: !function utils.process_results\n"
        "metric_list:\n  - {metric: acc, aggregation: mean, higher_is_better: true}\n"
        "  - {metric: ll_per_char, aggregation: mean, higher_is_better: true}\n"
        "metadata:\n  version: 1.0\n")
    rows.append({"name": "custom_lambada_fn", "shots": 0})
    # Chat-templated rows, on the chat model.
    for name, shots in (("mmlu_abstract_algebra", 5), ("arc_easy", 0), ("gsm8k", 5)):
        rows.append({"name": name, "shots": shots, "chat": True, "gen": name == "gsm8k"})
    return rows


def samples_of(res: dict, task: str) -> dict:
    out = {}
    for s in res["samples"][task]:
        out[(s["doc_id"], s.get("filter", "none"))] = {
            "args": [list(a) for a in s["arguments"]], "resps": s["resps"], "filtered": s["filtered_resps"],
            "metrics": {m: V._first(s[m]) for m in s.get("metrics", []) if m in s}}
    return out


def run(lm, lm_dir: Path, row: dict, limit: int) -> tuple[dict, float]:
    import lm_eval
    from lm_eval.tasks import TaskManager
    tm = TaskManager(include_path=str(lm_dir), include_defaults=False)
    kw = {}
    if row.get("chat"):
        kw = dict(apply_chat_template=True, fewshot_as_multiturn=True, system_instruction=CHAT_SYSTEM)
    if row.get("unsafe"):
        kw["confirm_run_unsafe_code"] = True
    t0 = time.perf_counter()
    res = lm_eval.simple_evaluate(model=lm, tasks=[row["name"]], num_fewshot=row["shots"], limit=limit,
                                  log_samples=True, task_manager=tm, bootstrap_iters=0, **kw)
    return res, time.perf_counter() - t0


def run_bridge(args, model: Path, lm_dir: Path, row: dict, limit: int, work: Path) -> dict:
    """The same row as a gpueval run's `lm_eval:` task (issue 55's route 2): `gpueval run` on a config
    with tasks [lm_eval:<row>], which asks lm-eval for the requests, computes them in its own plan and
    journal, and has lm-eval score them (src/evaluation/lm_eval_tasks.h). Its results.json."""
    out = work / "route2" / (row["name"] + ("_chat" if row.get("chat") else ""))
    cfg = {"model": str(model), "tasks": [f"lm_eval:{row['name']}"], "limit": limit, "num_fewshot": row["shots"],
           "dtype": "float32", "output": str(out),
           "lm_eval": {"python": sys.executable, "include_path": str(lm_dir), "include_defaults": False,
                       "confirm_run_unsafe_code": bool(row.get("unsafe"))}}
    if row.get("chat"):
        cfg.update(apply_chat_template=True, fewshot_as_multiturn=True, system_instruction=CHAT_SYSTEM)
    path = out.with_suffix(".yaml")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg))  # JSON is YAML
    # evaluate.load("code_eval") looks in the working directory first: run where the copy is.
    proc = subprocess.run([args.gpueval, "run", str(path), "--gpus", args.gpus, "--quiet"], cwd=work,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"gpueval run with lm_eval:{row['name']}: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads((out / "results.json").read_text())


def same_metrics(a: dict, b: dict, tol_rel: float) -> bool:
    return set(a) == set(b) and all(
        abs(a[k] - v) <= (tol_rel * max(1.0, abs(v)) if k.split(",")[0] in CONTINUOUS else 0) for k, v in b.items())


def compare(row: dict, ours: dict, theirs: dict, tol: float, tol_rel: float) -> dict:
    task = row["name"]
    a, b = samples_of(ours, task), samples_of(theirs, task)
    st = {"task": task + (" (chat)" if row.get("chat") else " (llama3)" if row.get("model") else ""), "docs": len(b), "args": 0, "n_args": 0,
          "max_dll": 0.0, "greedy": 0, "n_ll": 0, "gens": 0, "n_gen": 0, "doc_metrics": 0, "problems": []}
    if set(a) != set(b):
        st["problems"].append(f"documents differ: {len(a)} vs {len(b)}")
    for key in sorted(set(a) & set(b), key=str):
        x, y = a[key], b[key]
        st["n_args"] += 1
        st["args"] += x["args"] == y["args"]
        for rx, ry in zip(x["resps"], y["resps"]):
            vx, vy = rx[0], ry[0]
            if isinstance(vy, str):
                st["n_gen"] += 1
                st["gens"] += vx == vy
            elif isinstance(vy, (list, tuple)):
                st["n_ll"] += 1
                st["max_dll"] = max(st["max_dll"], abs(float(vx[0]) - float(vy[0])))
                st["greedy"] += str(vx[1]) == str(vy[1])
            else:
                st["n_ll"] += 1
                st["max_dll"] = max(st["max_dll"], abs(float(vx) - float(vy)))
                st["greedy"] += 1
        # Filtered responses: generations must be equal strings; loglikelihoods were compared above.
        texts = [f for f in (x["filtered"], y["filtered"]) if isinstance(f, str) or
                 (isinstance(f, list) and all(isinstance(e, str) for e in f))]
        same = (len(texts) < 2 or x["filtered"] == y["filtered"]) and set(x["metrics"]) == set(y["metrics"]) and all(
            abs(x["metrics"][m] - v) <= (tol * max(1.0, abs(v)) if m in CONTINUOUS else 0)
            for m, v in y["metrics"].items())
        st["doc_metrics"] += same
    ma, mb = V._metrics_of(ours["results"][task]), V._metrics_of(theirs["results"][task])
    st["metrics"] = mb
    st["metrics_equal"] = same_metrics(ma, mb, tol_rel)
    if st["args"] != st["n_args"]:
        st["problems"].append(f"arguments differ in {st['n_args'] - st['args']} documents")
    if st["max_dll"] > tol:
        st["problems"].append(f"max |delta loglik| {st['max_dll']:.2e} > {tol}")
    if st["greedy"] != st["n_ll"]:
        st["problems"].append("is_greedy differs")
    if st["gens"] != st["n_gen"]:
        st["problems"].append(f"{st['n_gen'] - st['gens']} generations differ")
    if st["doc_metrics"] != st["n_args"]:
        st["problems"].append("per-document metrics differ")
    if not st["metrics_equal"]:
        st["problems"].append(f"metrics differ: {ma} vs {mb}")
    return st


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpueval", default=os.environ.get("GPUEVAL_BIN") or str(REPO / "build" / "gpueval"))
    ap.add_argument("--model", default=str(REPO / "models" / "stories260K"))
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--work", help="work directory (default: a new temporary one, kept)")
    ap.add_argument("--limit", type=int, default=20, help="documents per task")
    ap.add_argument("--gen-limit", type=int, default=5, help="documents per generate_until task")
    ap.add_argument("--tasks", default="", help="only these rows (comma-separated names)")
    ap.add_argument("--gpus", default="cpu:1", help="the gpueval model's devices")
    ap.add_argument("--code-eval", help="a local copy of huggingface/evaluate's metrics/code_eval (code_eval.py, "
                    "execute.py): humaneval's and mbpp's metric, which evaluate.load fetches from the Hub otherwise; "
                    "see scripts/verify_code_eval.py. Without it those rows are skipped")
    ap.add_argument("--route2-only", action="store_true",
                    help="skip hf: each row through the gpueval model and as a gpueval run's lm_eval: task only")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--tol-rel", type=float, default=1e-6)
    args = ap.parse_args()
    args.verbose = False
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="gpueval-backend-"))
    work.mkdir(parents=True, exist_ok=True)
    log(f"[work] {work}")
    import lm_eval
    import transformers
    from lm_eval.models.huggingface import HFLM

    from gpueval_lm_eval import GpuevalLM
    lm_tasks = Path(lm_eval.__file__).parent / "tasks"
    model_dir = work / "model"
    if model_dir.exists():
        shutil.rmtree(model_dir)
    shutil.copytree(args.model, model_dir)
    rows = prepare(args, work, lm_tasks)
    if args.code_eval:  # evaluate.load("code_eval") reads ./code_eval/code_eval.py first
        shutil.copytree(args.code_eval, work / "code_eval", dirs_exist_ok=True)
        os.chdir(work)
    else:
        log("[rows] humaneval and mbpp skipped: give --code-eval DIR")
        rows = [r for r in rows if not r.get("unsafe")]
    if args.tasks:
        wanted = set(args.tasks.split(","))
        rows = [r for r in rows if r["name"] in wanted or f"{r['name']}(chat)" in wanted]
    chat_dir = V.chat_models(args, work)["llama3"] if any(r.get("chat") or r.get("model") for r in rows) else None
    journal = work / "journal"
    lms = {}

    def models(chat: bool):
        d = chat_dir if chat else model_dir
        if d not in lms:
            lms[d] = (GpuevalLM(pretrained=str(d), gpus=args.gpus, dtype="float32", batch_size="auto",
                                binary=args.gpueval, journal_dir=str(journal)),
                      HFLM(pretrained=str(d), dtype="float32", device="cpu", batch_size=1))
        return lms[d]

    table, ok = [], True
    for row in rows:
        limit = args.gen_limit if row.get("gen") else args.limit
        ours_lm, hf_lm = models(bool(row.get("chat") or row.get("model")))
        log(f"[row] {row['name']}{' (chat)' if row.get('chat') else ''}, {row['shots']}-shot, limit {limit}")
        try:
            if args.route2_only:
                theirs, t_hf = None, float("nan")
                ours, t_ours = run(ours_lm, work / "lm_eval_tasks", row, limit)
                mb = V._metrics_of(ours["results"][row["name"]])
                st = {"task": row["name"] + (" (chat)" if row.get("chat") else " (llama3)" if row.get("model") else ""),
                      "docs": len(samples_of(ours, row["name"])), "metrics": mb, "problems": []}
            else:
                theirs, t_hf = run(hf_lm, work / "lm_eval_tasks", row, limit)
                ours, t_ours = run(ours_lm, work / "lm_eval_tasks", row, limit)
                st = compare(row, ours, theirs, args.tol, args.tol_rel)
            t0 = time.perf_counter()
            bridged = run_bridge(args, chat_dir if row.get("chat") or row.get("model") else model_dir,
                                 work / "lm_eval_tasks", row, limit, work)
            st["t_route2"] = time.perf_counter() - t0
            st["route2_equal"] = same_metrics(V._metrics_of(bridged["results"][row["name"]]),
                                              V._metrics_of(ours["results"][row["name"]]), args.tol_rel)
            if not st["route2_equal"]:
                st["problems"].append("route 2's metrics differ from --model gpueval's")
        except Exception as e:  # noqa: BLE001  a row that fails is reported, the others still run
            st = {"task": row["name"], "problems": [f"{type(e).__name__}: {e}"]}
            t_hf = t_ours = float("nan")
        st.update(shots=row["shots"], t_hf=t_hf, t_ours=t_ours)
        ok = ok and not st["problems"]
        log(f"[row] {st['task']}: {'ok' if not st['problems'] else '; '.join(st['problems'])}")
        table.append(st)
    versions = (f"lm-eval {lm_eval.__version__}, transformers {transformers.__version__}, gpueval {args.gpueval} "
                f"on {args.gpus}")
    lines = [f"hf vs gpueval as lm-eval models ({versions}; float32; hf batch_size 1 on cpu, gpueval batch_size "
             "auto)", "",
             "| task | shots | docs | requests equal | max abs dloglik | is_greedy | generations equal | "
             "doc metrics equal | metrics (hf) | metrics equal | route 2 metrics equal | hf s | gpueval s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for st in [] if args.route2_only else table:
        if "docs" not in st:
            lines.append(f"| {st['task']} | {st['shots']} | FAILED: {'; '.join(st['problems'])} |||||||||")
            continue
        m = ", ".join(f"{k.replace(',none', '')}={v:.4g}" for k, v in sorted(st["metrics"].items()))
        lines.append(
            f"| {st['task']} | {st['shots']} | {st['docs']} | {st['args']}/{st['n_args']} | {st['max_dll']:.2e} | "
            f"{st['greedy']}/{st['n_ll']} | {st['gens']}/{st['n_gen']} | {st['doc_metrics']}/{st['n_args']} | "
            f"{m} | {'yes' if st['metrics_equal'] else 'NO'} | {'yes' if st.get('route2_equal') else 'NO'} | "
            f"{st['t_hf']:.1f} | {st['t_ours']:.1f} |")
    if args.route2_only:
        lines = [f"route 2 (a gpueval run's lm_eval: task) vs lm-eval's gpueval model ({versions}; float32)", "",
                 "| task | shots | docs | metrics (gpueval model) | route 2 metrics equal | gpueval model s | "
                 "gpueval run s |", "|---|---|---|---|---|---|---|"]
        for st in table:
            if "docs" not in st:
                lines.append(f"| {st['task']} | {st['shots']} | FAILED: {'; '.join(st['problems'])} |||||")
                continue
            m = ", ".join(f"{k.replace(',none', '')}={v:.4g}" for k, v in sorted(st["metrics"].items()))
            lines.append(f"| {st['task']} | {st['shots']} | {st['docs']} | {m} | "
                         f"{'yes' if st.get('route2_equal') else 'NO'} | {st['t_ours']:.1f} | {st['t_route2']:.1f} |")
    text = "\n".join(lines) + "\n"
    (work / "table.md").write_text(text)
    print(text)
    log(f"[done] {'every row matches' if ok else 'MISMATCH'}; table in {work / 'table.md'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
