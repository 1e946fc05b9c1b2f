#!/usr/bin/env python3
"""A generation's prefill against scoring on the same prompts, on one CPU worker: tokens per second of
worker busy time, through `gpueval requests`. Not part of CI.

The prompts: --prompts (12) texts of about 1,750 tokens each (gsm8k questions and answers from
../shared/data, each prompt its own, so nothing is shared); prefix reuse and continuation grouping
off. Scoring: each prompt with a one-token continuation (loglikelihood: oneDNN's products). Prefill:
each prompt with one new token (generate_until, max_gen_toks 1: the row-invariant products), with
the AVX-512 body where the CPU has it, and again with GPUEVAL_ROW_INVARIANT_AVX512=0 (the AVX2 body,
the same bits: the two results files are compared). The model: --model DIR, else the random 134M
Llama of scripts/bench_vs_lmeval.py (`gpueval init-model` with the Mistral 7B v0.1 tokenizer),
float32. Runs alternate, --reps times.

  python3 scripts/bench_prefill.py [--gpueval build/gpueval] [--model DIR] [--work DIR] [--reps 2]
"""

import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpueval", default=os.environ.get("GPUEVAL_BIN") or str(REPO / "build" / "gpueval"))
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--model")
    ap.add_argument("--work", default="/tmp/gpueval-prefill-bench")
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    model = Path(args.model) if args.model else work / "model"
    if not (model / "config.json").exists():
        tok = work / "tokenizer"
        tok.mkdir(exist_ok=True)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(Path(args.data) / "tokenizers" / "mistral7b_v0.1" / f, tok / f)
        subprocess.run([args.gpueval, "init-model", "--tokenizer", str(tok), "--out", str(model), "--force"],
                       check=True, stdout=subprocess.DEVNULL)
    rows = [json.loads(l) for l in (Path(args.data) / "gsm8k" / "test.jsonl").read_text().splitlines() if l]
    prompts, i = [], 0
    for p in range(args.prompts):
        text = ""
        while len(text) < 4600:
            r = rows[i % len(rows)]
            i += 1
            text += "Question: " + r["question"] + "\nAnswer: " + r["answer"] + "\n\n"
        prompts.append(f"[{p}] " + text + "Question: what next?\nAnswer:")
    for name, lines in (("score", [{"type": "loglikelihood", "context": p, "continuation": " 7"} for p in prompts]),
                        ("prefill", [{"type": "generate_until", "context": p, "max_gen_toks": 1} for p in prompts])):
        (work / f"{name}.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))
    runs = {"score": ("score", None), "prefill": ("prefill", None),
            "prefill_avx2": ("prefill", dict(os.environ, GPUEVAL_ROW_INVARIANT_AVX512="0"))}
    rates = {k: [] for k in runs}
    for rep in range(args.reps):
        for kind, (requests, env) in runs.items():
            out = work / f"run_{kind}"
            shutil.rmtree(out, ignore_errors=True)
            proc = subprocess.run(
                [args.gpueval, "requests", "--model", str(model), "--gpus", "cpu:1", "--requests",
                 str(work / f"{requests}.jsonl"), "--results", str(work / f"{kind}_results.jsonl"), "--output",
                 str(out), "--prefix-reuse", "off", "--group-continuations", "off", "--dtype", "float32",
                 "--batch-tokens", "4096"], capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                raise SystemExit(proc.stderr[-2000:])
            w = json.loads((out / "status.json").read_text())["timing"]["workers"][0]
            rates[kind].append(w["tokens_computed"] / w["busy_s"])
            print(f"rep {rep + 1} {kind}: {w['tokens_computed']} tokens in {w['busy_s']:.2f} s busy, "
                  f"{rates[kind][-1]:.0f} tok/s", flush=True)
    same = filecmp.cmp(work / "prefill_results.jsonl", work / "prefill_avx2_results.jsonl", shallow=False)
    print(f"prefill / scoring: {', '.join(f'{p / s:.2f}' for p, s in zip(rates['prefill'], rates['score']))}; "
          f"AVX2-body prefill / scoring: "
          f"{', '.join(f'{p / s:.2f}' for p, s in zip(rates['prefill_avx2'], rates['score']))}; "
          f"results with and without the AVX-512 body {'identical' if same else 'DIFFER'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
