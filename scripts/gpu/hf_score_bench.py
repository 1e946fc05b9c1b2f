#!/usr/bin/env python3
"""Scores the requests of a finished `gpueval run` with a plain transformers loop and times it.

  scripts/gpu/hf_score_bench.py MODEL RUN_DIR [--device cuda:0] [--dtype bfloat16] [--batch-tokens 16384]

The requests come from RUN_DIR/samples_*.jsonl: each sample's "arguments" hold (context, continuation)
pairs and "resps" our log-likelihoods. Tokenized as lm-eval does (context and context+continuation
encoded without special tokens, the continuation is what the whole adds; gpueval's add_bos: auto is no
BOS for this tokenizer), sorted longest first, packed into left-padded batches of at most
--batch-tokens tokens (rows x longest row, the same budget our run used), one forward each with
logits_to_keep = longest continuation + 1, then log_softmax (float32) and a gather of the continuation
tokens. No prefix sharing, no caching: what a plain loop does.
Prints one JSON line: requests, tokens (context + continuation, summed), padded tokens, seconds (the
scoring loop only, model load excluded), tokens_per_second, and against our resps: max_abs_loglik_diff
and choice_agreement (% of documents whose highest-scoring choice is the same).
"""
import argparse
import glob
import json
import os
import time


def load_requests(run_dir):
    reqs = []  # (doc key, choice index, context, continuation, our loglik)
    for path in sorted(glob.glob(os.path.join(run_dir, "samples_*.jsonl"))):
        task = os.path.basename(path)[len("samples_"):-len(".jsonl")]
        with open(path) as f:
            for line in f:
                s = json.loads(line)
                args = s["arguments"]
                for i in range(len(args)):
                    a = args[f"gen_args_{i}"]
                    ours = float(s["resps"][i][0][0]) if s.get("resps") else float("nan")
                    reqs.append(((task, s["doc_id"]), i, a["arg_0"], a["arg_1"], ours))
    return reqs


def encode(tok, context, continuation):
    # lm-eval's split: trailing spaces of the context belong to the continuation.
    n = len(context) - len(context.rstrip(" "))
    if n:
        continuation = context[-n:] + continuation
        context = context[:-n]
    whole = tok(context + continuation, add_special_tokens=False)["input_ids"]
    ctx = tok(context, add_special_tokens=False)["input_ids"]
    return whole, len(whole) - len(ctx)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("run_dir")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--batch-tokens", type=int, default=16384)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    reqs = load_requests(args.run_dir)
    if not reqs:
        raise SystemExit(f"hf_score_bench: no samples_*.jsonl requests in {args.run_dir}")
    tok = AutoTokenizer.from_pretrained(args.model)
    enc = [encode(tok, c, x) for _, _, c, x, _ in reqs]
    try:
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype))
    except TypeError:  # transformers < 4.56 names it torch_dtype
        model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=getattr(torch, args.dtype))
    model = model.to(args.device).eval()
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    order = sorted(range(len(enc)), key=lambda k: -len(enc[k][0]))
    batches, cur = [], []
    for k in order:  # longest first: the first row of a batch is its longest
        if cur and (len(cur) + 1) * len(enc[cur[0]][0]) > args.batch_tokens:
            batches.append(cur)
            cur = []
        cur.append(k)
    if cur:
        batches.append(cur)

    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    loglik = [0.0] * len(enc)
    padded = 0
    with torch.inference_mode():
        # Warm-up on the smallest batch (kernel selection, allocator), not timed.
        b = batches[-1]
        model(input_ids=torch.tensor([enc[b[0]][0]], device=args.device), logits_to_keep=1)
        sync()
        t0 = time.perf_counter()
        for b in batches:
            width = len(enc[b[0]][0])
            keep = max(enc[k][1] for k in b) + 1
            ids = torch.full((len(b), width), pad, dtype=torch.long)
            mask = torch.zeros((len(b), width), dtype=torch.long)
            for r, k in enumerate(b):
                seq = enc[k][0]
                ids[r, width - len(seq):] = torch.tensor(seq)
                mask[r, width - len(seq):] = 1
            ids, mask = ids.to(args.device), mask.to(args.device)
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=keep).logits
            logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # position j predicts token width-keep+1+j
            targets = ids[:, width - keep + 1:]
            tl = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # [rows, keep-1]
            tl = tl.cpu()
            for r, k in enumerate(b):
                n = enc[k][1]
                loglik[k] = float(tl[r, keep - 1 - n:].sum())
            padded += len(b) * width
        sync()
        seconds = time.perf_counter() - t0

    tokens = sum(len(w) for w, _ in enc)
    diffs = [abs(loglik[k] - r[4]) for k, r in enumerate(reqs) if r[4] == r[4]]
    docs = {}
    for k, r in enumerate(reqs):
        docs.setdefault(r[0], []).append((r[1], loglik[k], r[4]))
    same = sum(max(v, key=lambda x: x[1])[0] == max(v, key=lambda x: x[2])[0] for v in docs.values())
    res = {"requests": len(reqs), "documents": len(docs), "batches": len(batches), "tokens": tokens,
           "padded_tokens": padded, "seconds": round(seconds, 3), "tokens_per_second": tokens / max(seconds, 1e-9),
           "device": args.device, "dtype": args.dtype,
           "max_abs_loglik_diff": max(diffs) if diffs else None,
           "choice_agreement": 100.0 * same / max(len(docs), 1)}
    line = json.dumps(res)
    print(line)
    if args.out:
        with open(args.out, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
