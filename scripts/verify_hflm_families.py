#!/usr/bin/env python3
"""Per model family: gpueval gives lm-evaluation-harness's HFLM numbers on real tasks.

  scripts/verify_hflm_families.sh [--families llama,gemma2] [--gpueval PATH] [--work DIR] [--limit N]

Not run in CI (it needs torch, transformers and lm-eval: LMEVAL_VENV=DIR names the venv).
For every row of scripts/verify_architectures.py's FAMILIES (its random_model(): hidden 64,
4 layers, every parameter perturbed) with the vocabulary of a real tokenizer (--tokenizer, default
the GPT-2 byte-level BPE of the shared data) and 2048 positions, windows of --window (64) tokens
where the row has a sliding window (shorter than the prompts, so they matter), saved in float32:
  1. lm-eval (HFLM, CPU, float32, batch_size 1, add_bos_token unset) on 5-shot MMLU --subject
     (the subject's 5 dev examples are a long prefix every context shares) and gsm8k (5 examples
     drawn from its own test lines, max_gen_toks --max-gen-toks), first --limit documents,
     log_samples on;
  2. gpueval (`run`, float32, add_bos auto) on the same tasks and documents four times:
     prefix_reuse on and off, each with --gpus cpu:1 and cpu:2;
  3. compares, with verify_lm_eval.py's compare_suite(): every request's context and continuation,
     MMLU's per-request loglikelihoods (max |Δ| over the four runs, pass <= --tol, 1e-4), is_greedy,
     gsm8k's greedy generations and filtered answers, the per-document and aggregated metrics; and the
     four gpueval runs with each other (bit-identical: every loglikelihood and generation equal).
Prints a markdown table (also written to WORK/table.md), details of each difference on stderr.
Exit 0 when every family passes, 1 otherwise, 2 on a setup error. Prefix reuse on and off must agree
within --tol (the docs promise 1e-5 per token in float32, not bit-identity); --strict-reuse asks for
bit-identity there too. The model dir's tokenizer files are those transformers saves for the family's
model type (transformers 5 builds Qwen2Tokenizer for qwen2 whatever tokenizer_config.json declares).

Measured 2026-12-05 with gpueval 0e0016e+ (build/gpueval, with gpt_neox, gpt2 and gemma3), lm-eval 0.4.13,
torch 2.11.0, transformers 5.25.0, 274 s on 2 cores:
  LMEVAL_VENV=.venv-gpu scripts/verify_hflm_families.sh --gpueval build/gpueval --limit 20
all 22 rows pass: 80 MMLU requests and 20 gsm8k documents each, prompts 100/100, max |Δ loglik| vs HFLM
9.5e-7..2.9e-6 (gemma3_text 1.34e-5, gemma3 1.14e-5), cpu:1 = cpu:2 bit-identical, prefix reuse on vs off
within 5.7e-6 (not bit-identical), greedy generations 20/20.
The mixtures of experts, 2026-12-05 (session 24's build, 113 s): --families mixtral,qwen3_moe,
qwen3_moe-unnormalized,olmoe,deepseek_v3,deepseek_v3-plain --limit 20: all 6 rows pass, prompts 100/100,
max |Δ loglik| vs HFLM 1.9e-6..3.8e-6, cpu:1 = cpu:2 bit-identical, greedy generations 20/20.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import verify_architectures as va  # noqa: E402
import verify_lm_eval as vle  # noqa: E402  (sets the HF_*_OFFLINE switches on import)

REPO = vle.REPO
# (prefix_reuse, --gpus): the four gpueval runs; the first is the one compared in full with lm-eval.
RUNS = [(True, "cpu:1"), (False, "cpu:1"), (True, "cpu:2"), (False, "cpu:2")]


def build_model(family: str, model_dir: Path, tokenizer: Path, window: int) -> None:
    """verify_architectures.random_model() with the tokenizer's vocabulary and special ids."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(tokenizer))
    shape = dict(va.VERIFY_SHAPE, vocab_size=len(tok), max_position_embeddings=2048)
    saved = va.WINDOW
    va.WINDOW = dict(saved, verify=window)
    try:
        model = va.random_model(family, shape, fixture=False, seed=1234)
    finally:
        va.WINDOW = saved
    special = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    for cfg in (model.config, model.generation_config):
        for k, v in special.items():
            setattr(cfg, k, v)
    if model_dir.exists():
        shutil.rmtree(model_dir)
    model.save_pretrained(str(model_dir), safe_serialization=True)
    for f in tokenizer.iterdir():
        if f.name in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"):
            shutil.copy(f, model_dir / f.name)
    # The tokenizer files transformers writes for this model type: transformers 5 builds some families'
    # own tokenizer class whatever tokenizer_config.json declares (e.g. Qwen2Tokenizer for qwen2, with
    # Qwen's pre-tokenizer regex and NFC instead of tokenizer.json's GPT-2 split), so the saved
    # tokenizer.json is the pipeline HFLM tokenizes with, and the one gpueval reads.
    AutoTokenizer.from_pretrained(str(model_dir)).save_pretrained(str(model_dir))


def prepare_tasks(args, work: Path, lm_eval_tasks: Path) -> dict:
    """lm-eval task YAMLs (work/lm_eval_tasks: its own mmlu_<subject>.yaml and gsm8k.yaml over the
    shared data) and gpueval's gsm8k YAML (work/gpueval_tasks); returns {task: gpueval spec}.
    gsm8k's test file is its first max(12, --limit) lines, and both draw the few-shot examples from
    it (lm-eval: fewshot_split test; gpueval: no train.jsonl), the document asked left out."""
    import yaml
    data = Path(args.data)
    lm_dir, gp_dir, dd = work / "lm_eval_tasks", work / "gpueval_tasks", work / "data"
    for d in (lm_dir, gp_dir, dd / "gsm8k"):
        d.mkdir(parents=True, exist_ok=True)
    vle.write_mmlu_task(data, dd, lm_dir / f"mmlu_{args.subject}.yaml",
                        lm_eval_tasks / "mmlu" / "default" / f"mmlu_{args.subject}.yaml", args.subject)
    lines = (data / "gsm8k" / "test.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    test = dd / "gsm8k" / "test.jsonl"
    test.write_text("".join(lines[:max(12, args.limit)]), encoding="utf-8")
    builtin = lm_eval_tasks / "gsm8k" / "gsm8k.yaml"
    gen = dict(yaml.safe_load(builtin.read_text())["generation_kwargs"], max_gen_toks=args.max_gen_toks)
    (lm_dir / "gsm8k.yaml").write_text(json.dumps({
        "include": str(builtin), "task": "gsm8k", "dataset_path": "json", "dataset_name": None,
        "dataset_kwargs": {"data_files": {"test": str(test)}}, "training_split": None, "fewshot_split": "test",
        "generation_kwargs": gen}, indent=1) + "\n")
    ours = yaml.safe_load((REPO / "tasks" / "gsm8k" / "gsm8k.yaml").read_text())
    ours["generation_kwargs"]["max_gen_toks"] = args.max_gen_toks
    (gp_dir / "gsm8k.yaml").write_text(yaml.safe_dump(ours, sort_keys=False, allow_unicode=True))
    return {f"mmlu_{args.subject}": str(REPO / "tasks" / "mmlu" / f"mmlu_{args.subject}.yaml"),
            "gsm8k": str(gp_dir / "gsm8k.yaml")}


def identical(st: dict) -> bool:
    """compare_suite() of two gpueval runs at tol 0: same prompts, loglikelihoods, generations, metrics."""
    return (not st["missing"] and st["prompts_same"] == st["requests"] and not st["max_delta"]
            and not st["greedy_diff"] and st["gen_same"] == st["gen_docs"] and not st["doc_metric_diff"]
            and not st["metric_diff"])


def verify_family(args, family: str, lm_eval_tasks: Path, details: list[str]) -> dict:
    from lm_eval.models.huggingface import HFLM
    work = Path(args.work) / family
    work.mkdir(parents=True, exist_ok=True)
    model_dir = work / "model"
    build_model(family, model_dir, Path(args.tokenizer), args.window)
    fargs = argparse.Namespace(**vars(args), model=str(model_dir), suite_limit=args.limit, suite_bos="auto")
    specs = prepare_tasks(fargs, work, lm_eval_tasks)
    mmlu, tasks = f"mmlu_{args.subject}", list(specs)
    kw = dict(attn_implementation="eager") if family in va.EAGER else {}
    lm_cache = {None: HFLM(pretrained=str(model_dir), dtype="float32", device="cpu", batch_size=1, **kw)}
    theirs = vle.run_suite_lm_eval(fargs, work, tasks, 5, lm_cache)
    runs = {}
    for reuse, gpus in RUNS:
        tag = f"_reuse_{'on' if reuse else 'off'}_{gpus.replace(':', '')}"
        runs[(reuse, gpus)] = vle.run_suite_gpueval(fargs, work, specs, tasks, 5, roots={"gsm8k": str(work / "data" / "gsm8k")},
                                                    tag=tag, gpus=gpus, config={"prefix_reuse": reuse})
    row = {"family": family}
    vs = {k: {t: vle.compare_suite(f"{family} {t} (reuse {'on' if k[0] else 'off'}, {k[1]})", r[t], theirs[t],
                                   args.tol, details) for t in tasks} for k, r in runs.items()}
    base = vs[RUNS[0]]
    row["requests"] = base[mmlu]["requests"]
    row["prompts"] = (f"{min(sum(st[t]['prompts_same'] for t in tasks) for st in vs.values())}/"
                      f"{sum(base[t]['requests'] for t in tasks)}")
    row["max_delta"] = max(st[mmlu]["max_delta"] for st in vs.values())
    row["where"] = max((st[mmlu] for st in vs.values()), key=lambda st: st["max_delta"])["where"]
    row["gens"] = f"{min(st['gsm8k']['gen_same'] for st in vs.values())}/{base['gsm8k']['gen_docs']}"
    row["hflm_ok"] = all(vle.suite_ok(st[t], args.tol, strict=True) for st in vs.values() for t in tasks)

    def same(a, b) -> tuple[bool, float, bool]:
        """(bit-identical, max |delta loglik|, equal within --tol: prompts, generations, metrics too)."""
        sts = [vle.compare_suite(f"{family} {t}: gpueval {a} vs {b}", runs[a][t], runs[b][t], 0.0, details)
               for t in tasks]
        delta = max(st["max_delta"] or 0.0 for st in sts)
        near = [vle.compare_suite(t, runs[a][t], runs[b][t], args.tol, []) for t in tasks]
        return all(identical(st) for st in sts), delta, all(vle.suite_ok(st, args.tol, strict=True) for st in near)

    reuse = [same((True, g), (False, g)) for g in ("cpu:1", "cpu:2")]
    workers = [same((r, "cpu:1"), (r, "cpu:2")) for r in (True, False)]
    row["reuse_same"], row["reuse_delta"] = all(s[0] for s in reuse), max(s[1] for s in reuse)
    row["workers_same"], row["workers_delta"] = all(s[0] for s in workers), max(s[1] for s in workers)
    reuse_ok = row["reuse_same"] if args.strict_reuse else all(s[2] for s in reuse)
    row["ok"] = row["hflm_ok"] and reuse_ok and row["workers_same"]
    # Evidence that the runs differ where they should: the prefix computed once with reuse on, and
    # the batches each of cpu:2's workers took.
    on1, on2 = (json.loads((work / f"gpueval_suite{t}_5shot_bos_auto" / "results.json").read_text())
                for t in ("_reuse_on_cpu1", "_reuse_on_cpu2"))
    b = on1["batching"]
    row["prefixes"] = f"{b['shared_prefixes']} ({b['prefix_tokens_computed']} tokens)"
    row["split"] = "+".join(str(w["batches"]) for w in on2["timing"]["workers"])
    return row


def fmt_same(same: bool, delta: float) -> str:
    return "identical" if same else (f"no (max Δ {delta:.3g})" if delta else "no")


def table(args, rows: list[dict], versions: str) -> list[str]:
    out = [f"gpueval vs lm-eval's HFLM per family: random models (hidden 64, 4 layers, window {args.window} where the "
           f"family slides), vocabulary of {args.tokenizer}, CPU float32; 5-shot mmlu_{args.subject} and gsm8k "
           f"(max_gen_toks {args.max_gen_toks}), first {args.limit} documents; {versions}",
           "requests = MMLU loglikelihood requests; prompts = every request's context and continuation (MMLU and "
           "gsm8k) identical in all four gpueval runs (prefix reuse on/off x cpu:1/cpu:2) and lm-eval; max |Δ loglik| "
           "over the four runs vs HFLM; reuse on = off and cpu:1 = cpu:2: bit-identical loglikelihoods, generations "
           "and metrics, else the largest Δ; greedy gens: gsm8k's generations and filtered answers equal to HFLM's; "
           "shared prefixes: computed once per worker with reuse on (cpu:1); cpu:2 batches: per worker.",
           f"pass: prompts identical, every run within {args.tol:g} of HFLM with the same is_greedy, generations and "
           "metrics; cpu:1 = cpu:2 bit-identical; reuse on = off "
           + ("bit-identical." if args.strict_reuse else f"within {args.tol:g} (float32 rounding, see "
                                                          "docs/configuration.md) with the same generations and metrics."),
           "",
           "| family | requests | prompts identical | max \\|Δ loglik\\| vs HFLM | reuse on = off | cpu:1 = cpu:2 "
           "| greedy gens identical (n/n) | shared prefixes | cpu:2 batches | pass |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['family']} | - | - | - | - | - | - | - | - | ERROR: {r['error'].replace('|', '/')} |")
            continue
        out.append(f"| {r['family']} | {r['requests']} | {r['prompts']} | {r['max_delta']:.3g} | "
                   f"{fmt_same(r['reuse_same'], r['reuse_delta'])} | {fmt_same(r['workers_same'], r['workers_delta'])} | "
                   f"{r['gens']} | {r['prefixes']} | {r['split']} | {'yes' if r['ok'] else 'NO'} |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", default=",".join(va.FAMILIES), help="rows of verify_architectures.FAMILIES")
    ap.add_argument("--gpueval", default=os.environ.get("GPUEVAL_BIN") or str(REPO / "build" / "gpueval"))
    ap.add_argument("--work", help="work directory (default: a new temporary one, kept)")
    ap.add_argument("--limit", type=int, default=10, help="documents per task (MMLU and gsm8k)")
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--tokenizer", default=None, help="tokenizer folder (default: DATA/tokenizers/gpt2)")
    ap.add_argument("--subject", default="abstract_algebra", help="the MMLU subject")
    ap.add_argument("--window", type=int, default=64, help="sliding window of the families that have one")
    ap.add_argument("--max-gen-toks", type=int, default=32)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--strict-reuse", action="store_true",
                    help="fail unless prefix reuse on and off are bit-identical too (the docs promise 1e-5 per token "
                         "in float32)")
    ap.add_argument("--verbose", action="store_true", help="show gpueval's progress lines")
    args = ap.parse_args()
    t0 = time.time()
    families = [f for f in args.families.split(",") if f]
    unknown = [f for f in families if f not in va.FAMILIES]
    if unknown:
        vle.log(f"error: unknown families {', '.join(unknown)} (known: {', '.join(va.FAMILIES)})")
        return 2
    args.tokenizer = args.tokenizer or str(Path(args.data) / "tokenizers" / "gpt2")
    if not Path(args.gpueval).exists():
        vle.log(f"error: {args.gpueval} missing")
        return 2
    try:
        import lm_eval
        import torch
        import transformers
    except ImportError as e:
        vle.log(f"error: {e}; run scripts/verify_hflm_families.sh, which sets up the venv")
        return 2
    from importlib.metadata import version
    versions = f"lm-eval {version('lm_eval')}, torch {torch.__version__}, transformers {transformers.__version__}"
    torch.set_num_threads(1)
    args.work = args.work or tempfile.mkdtemp(prefix="gpueval-hflm-")
    Path(args.work).mkdir(parents=True, exist_ok=True)
    vle.log(f"[work] {args.work}; {versions}")
    lm_eval_tasks = Path(lm_eval.__file__).parent / "tasks"
    rows, details = [], []
    for family in families:
        vle.log(f"[family] {family}")
        try:
            rows.append(verify_family(args, family, lm_eval_tasks, details))
        except Exception as e:  # one family's failure is a row of the table, not the end of the run
            rows.append({"family": family, "ok": False, "error": " ".join(f"{type(e).__name__}: {e}".split())})
            vle.log(f"[family] {family}: {rows[-1]['error']}")
    for d in details:
        vle.log("DIFF: " + d)
    lines = table(args, rows, versions)
    lines.append("")
    lines.append(f"wall time {time.time() - t0:.0f} s")
    (Path(args.work) / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if rows and all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
