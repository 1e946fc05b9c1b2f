#!/usr/bin/env python3
"""Every rope_scaling type gpueval reads, checked against transformers on random Llama models, and the
partial rotary of phi3 / gpt_neox against transformers' own functions.

  HF_HUB_OFFLINE=1 .venv-gpu/bin/python scripts/verify_rope.py [--gpueval build/gpueval]
      [--cases linear,yarn] [--write-fixtures]

The sibling of scripts/verify_architectures.py (same random models, same `gpueval logits` comparison,
same pass rule: max |Δ logit| <= 1e-4 * max(1, max |logit|) and argmax 100%). Per case a llama config
sets rope_scaling (transformers 5: rope_parameters) to one type, and the token sequences are both
below and above the length where dynamic and longrope change their frequencies (max_position_embeddings
and original_max_position_embeddings): transformers scores each sequence alone in a fresh model (its
dynamic RoPE keeps state across calls), as gpueval scores a request alone in its row.

--write-fixtures writes, per case, the TINY model (hidden 16: head_dim 8, 2 layers, vocab 64) and its
transformers logits into tests/fixtures/rope/<case>/ (tests/model/rope_scaling_test.cpp), and
tests/fixtures/rope/partial_rotary.json: transformers' phi3 and gpt_neox rotary embedding +
apply_rotary_pos_emb on fixed inputs, and the inv_freq / attention factor of each case's config.
Not run in CI: it needs torch and transformers (CPU is enough).
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import verify_architectures as va  # noqa: E402

ROOT = va.ROOT

# case -> (rope_parameters beyond rope_theta, max_position_embeddings, lengths) for the verify shape
# (head_dim 16) and for the fixture shape (head_dim 8). Thresholds: dynamic at max_position_embeddings,
# longrope at original_max_position_embeddings; every case has sequences on both sides of 32 (verify)
# and 16 (fixture).
def cases(fixture):
    half = 4 if fixture else 8
    ctx = 16 if fixture else 32
    rng = np.random.default_rng(11)
    short = [round(float(x), 4) for x in 1.0 + rng.random(half)]
    long = [round(float(x), 4) for x in 2.0 + 6.0 * rng.random(half)]
    lengths = [11, 24] if fixture else [19, 32, 50, 90]
    return {
        "linear": (dict(rope_type="linear", factor=4.0), 4 * ctx, lengths),
        "dynamic": (dict(rope_type="dynamic", factor=2.0), ctx, lengths),
        "llama3": (dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                        original_max_position_embeddings=ctx), 8 * ctx, lengths),
        "yarn": (dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=ctx), 4 * ctx, lengths),
        "yarn-mscale": (dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=ctx, beta_fast=16.0,
                             beta_slow=2.0, mscale=0.707, mscale_all_dim=1.0, truncate=False), 4 * ctx, lengths),
        "longrope": (dict(rope_type="longrope", short_factor=short, long_factor=long,
                          original_max_position_embeddings=ctx), 4 * ctx, lengths),
        "longrope-attention": (dict(rope_type="longrope", short_factor=short, long_factor=long, factor=2.0,
                                    attention_factor=1.3, original_max_position_embeddings=ctx), 4 * ctx, lengths),
    }


CASES = list(cases(False))


def case_config(case, fixture):
    from transformers import AutoConfig
    params, max_pos, _ = cases(fixture)[case]
    shape = dict(va.FIXTURE_SHAPE if fixture else va.VERIFY_SHAPE, max_position_embeddings=max_pos)
    return AutoConfig.for_model("llama", **shape, rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1,
                                eos_token_id=2, pad_token_id=None,
                                rope_parameters=dict(params, rope_theta=10000.0))


def random_model(case, fixture, seed):
    import torch
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(case_config(case, fixture), dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1.0 + 0.1 * torch.randn_like(p) if "norm" in name else 0.1 * torch.randn_like(p))
    return model.eval()


def fresh_logits(model_dir, ids):
    """transformers' logits for one sequence in a model loaded afresh (no RoPE state from earlier calls)."""
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    return va.hf_logits(model, ids)


def verify(case, binary, work):
    out = os.path.join(work, case)
    random_model(case, fixture=False, seed=1234).save_pretrained(out, safe_serialization=True)
    max_abs = max_logit = 0.0
    agree = total = 0
    for ids in va.sequences(va.VERIFY_SHAPE["vocab_size"], cases(False)[case][2], seed=5):
        ref = fresh_logits(out, ids)
        ours = va.gpueval_logits(binary, out, ids)
        max_abs = max(max_abs, float(np.abs(ours - ref).max()))
        max_logit = max(max_logit, float(np.abs(ref).max()))
        agree += int((ours.argmax(-1) == ref.argmax(-1)).sum())
        total += len(ids)
    ok = max_abs <= 1e-4 * max(1.0, max_logit) and agree == total
    return dict(family=case, max_abs=max_abs, max_logit=max_logit, argmax=100.0 * agree / total, ok=ok)


def write_fixture(case):
    out = os.path.join(ROOT, "tests", "fixtures", "rope", case)
    os.makedirs(out, exist_ok=True)
    random_model(case, fixture=True, seed=99).save_pretrained(out, safe_serialization=True)
    if os.path.exists(os.path.join(out, "generation_config.json")):
        os.remove(os.path.join(out, "generation_config.json"))
    rows = []
    for ids in va.sequences(va.FIXTURE_SHAPE["vocab_size"], cases(True)[case][2], seed=7):
        logits = fresh_logits(out, ids)
        rows.append({"ids": ids, "logits": [[float(f"{x:.8g}") for x in row] for row in logits]})
    with open(os.path.join(out, "expected_logits.json"), "w") as f:
        json.dump({"case": case, "source": "scripts/verify_rope.py --write-fixtures (transformers "
                   + __import__("transformers").__version__ + ", float32)", "sequences": rows}, f)
        f.write("\n")


def inv_freq_table():
    """Per case (fixture configs): transformers' inv_freq and attention factor, short and long."""
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    out = {}
    for case in cases(True):
        config = AutoConfig.from_pretrained(os.path.join(ROOT, "tests", "fixtures", "rope", case))
        fn = ROPE_INIT_FUNCTIONS[config.rope_parameters["rope_type"]]
        params, max_pos, _ = cases(True)[case]
        threshold = {"dynamic": max_pos, "longrope": params.get("original_max_position_embeddings")}.get(
            params["rope_type"])
        entry = {}
        for name, seq_len in (("short", None), ("long", 2 * threshold if threshold else None)):
            import torch
            inv, factor = fn(config, "cpu", seq_len=None if seq_len is None else
                             (torch.tensor(seq_len) if params["rope_type"] == "dynamic" else seq_len))
            entry[name] = {"length": seq_len or 0, "inv_freq": [float(f"{x:.9g}") for x in inv.tolist()],
                           "attention_factor": float(factor)}
        out[case] = entry
    return out


def partial_rotary():
    """phi3's and gpt_neox's rotary embedding and apply_rotary_pos_emb on fixed q, k."""
    import torch
    from transformers import AutoConfig
    from transformers.models.gpt_neox import modeling_gpt_neox as neox
    from transformers.models.phi3 import modeling_phi3 as phi3
    out = []
    for family, module, rotary_cls, extra in (
            ("phi3", phi3, phi3.Phi3RotaryEmbedding, dict(partial_rotary_factor=0.5)),
            ("gpt_neox", neox, neox.GPTNeoXRotaryEmbedding, dict(rotary_pct=0.25))):
        config = AutoConfig.for_model(family, hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                                      max_position_embeddings=64, **extra)
        head_dim = 16
        gen = torch.Generator().manual_seed(3)
        q = torch.randn(1, 2, 5, head_dim, generator=gen)
        k = torch.randn(1, 2, 5, head_dim, generator=gen)
        positions = torch.tensor([[0, 1, 2, 7, 30]])
        cos, sin = rotary_cls(config)(q, positions)
        q_out, k_out = module.apply_rotary_pos_emb(q, k, cos, sin)
        flat = lambda t: [float(f"{x:.9g}") for x in t.flatten().tolist()]  # noqa: E731
        out.append({"family": family, "config": {k_: v for k_, v in config.to_dict().items() if k_ in (
                        "partial_rotary_factor", "rotary_pct", "rope_parameters")},
                    "head_dim": head_dim, "rotary_dim": cos.shape[-1], "rope_theta": 10000.0,
                    "shape": list(q.shape), "positions": positions[0].tolist(),
                    "q": flat(q), "k": flat(k), "q_out": flat(q_out), "k_out": flat(k_out)})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpueval", default=os.path.join(ROOT, "build", "gpueval"))
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--write-fixtures", action="store_true")
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    chosen = [c for c in args.cases.split(",") if c]
    for c in chosen:
        if c not in CASES:
            sys.exit(f"unknown case {c!r} (known: {', '.join(CASES)})")
    work = args.work or tempfile.mkdtemp(prefix="verify_rope.")
    results = []
    for c in chosen:
        if args.gpueval != "none":
            try:
                results.append(verify(c, args.gpueval, work))
            except Exception as e:  # one case's failure is a row of the table
                results.append(dict(family=c, max_abs=float("nan"), max_logit=float("nan"), argmax=0.0, ok=False,
                                    error=str(e)))
        if args.write_fixtures:
            write_fixture(c)
    if args.write_fixtures:
        with open(os.path.join(ROOT, "tests", "fixtures", "rope", "partial_rotary.json"), "w") as f:
            json.dump({"source": "scripts/verify_rope.py --write-fixtures (transformers "
                       + __import__("transformers").__version__ + ")", "partial_rotary": partial_rotary(),
                       "inv_freq": inv_freq_table()}, f)
            f.write("\n")
    print(f"{'rope case':<20} {'max |Δ logit|':>14} {'max |logit|':>12} {'argmax':>8}  result")
    for r in results:
        print(f"{r['family']:<20} {r['max_abs']:>14.3e} {r['max_logit']:>12.4f} {r['argmax']:>7.1f}%  "
              f"{'ok' if r['ok'] else 'FAIL'}{'  ' + r['error'] if 'error' in r else ''}")
    sys.exit(0 if all(r["ok"] for r in results) else 1)


if __name__ == "__main__":
    main()
