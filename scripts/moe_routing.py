#!/usr/bin/env python3
"""transformers' expert choices on random mixture-of-experts models: the oracle for issue 36 (not in CI).

  HF_HUB_OFFLINE=1 .venv-gpu/bin/python scripts/moe_routing.py [--families mixtral,olmoe]
      [--work DIR] [--dump] [--gpueval build/gpueval]

Per family (Mixtral; Qwen3-MoE with dense and sparse layers mixed, with and without norm_topk_prob;
OLMoE with clip_qkv; DeepSeek-V3 with multi-head latent attention, group-limited sigmoid routing,
a correction bias, shared experts and a dense first layer), a random model built by transformers
from the family's config (scripts/verify_architectures.py's shape and perturbation: every weight
normal(0, 0.1), norms 1 + normal(0, 0.1); DeepSeek-V3's e_score_correction_bias normal(0, 0.05) so
that it changes choices) is saved in float32 under --work, and run on the same token sequences
verify_architectures uses. A forward hook on every router records each token's top-k experts and
weights. Prints, per family and sparse layer, how often each expert was chosen (the routing
histogram: routing is non-trivial when every expert is chosen somewhere), and with --dump writes
<work>/<family>/routing.json: per sequence the ids, the logits, and per sparse layer the experts
(sorted ascending per token: DeepSeek-V3's top-k is unsorted) and their weights in that order.

With --gpueval, the same checkpoints and sequences go through `gpueval logits --routing` (CPU,
float32), and every token's experts at every sparse layer are compared with transformers': printed
per family, the tokens compared, how many chose the same experts, the largest weight difference and
the largest |Δ logit|; each mismatch is listed with the layer, the position and both choices. Exit
code 0 when every choice agrees and every weight is within 1e-5.
"""
import subprocess
import argparse
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import verify_architectures as va  # noqa: E402

MOE_SHAPE = dict(va.VERIFY_SHAPE, num_experts_per_tok=2)
# Each family's config beyond the shared shape: the routing features it exists for.
MOE_FAMILIES = {
    "mixtral": dict(num_local_experts=8, sliding_window=None),
    # moe_intermediate_size apart from the dense layers' intermediate_size; layer 1 dense through
    # mlp_only_layers, layer 3 through decoder_sparse_step 1 ... (every layer sparse but those listed).
    "qwen3_moe": dict(num_experts=8, moe_intermediate_size=48, norm_topk_prob=True, decoder_sparse_step=1,
                      mlp_only_layers=[1], head_dim=24),
    "qwen3_moe-unnormalized": dict(model_type="qwen3_moe", num_experts=8, moe_intermediate_size=48,
                                   norm_topk_prob=False, decoder_sparse_step=2, mlp_only_layers=[], head_dim=24),
    "olmoe": dict(num_experts=8, norm_topk_prob=False, clip_qkv=0.8),
    # 16 experts in 4 groups, 2 groups kept, 4 experts per token; a shared expert; layer 0 dense;
    # low-rank q (q_lora_rank) and compressed kv with a shared RoPE key of qk_rope_head_dim; yarn
    # RoPE with mscale_all_dim, which also scales the softmax (its mscale squared).
    "deepseek_v3": dict(n_routed_experts=16, num_experts_per_tok=4, n_group=4, topk_group=2, n_shared_experts=1,
                        moe_intermediate_size=32, first_k_dense_replace=1, routed_scaling_factor=2.5,
                        norm_topk_prob=True, q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8,
                        qk_nope_head_dim=16, v_head_dim=16, head_dim=8, num_key_value_heads=4,
                        rope_parameters=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=64,
                                             beta_fast=32.0, beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0,
                                             rope_theta=10000.0)),
}


class Recorder:
    """Forward hooks on every *TopKRouter module: per call, the top-k indices and weights."""

    def __init__(self, model):
        self.calls = {}
        self.handles = []
        for name, module in model.named_modules():
            if type(module).__name__.lower().endswith("topkrouter"):
                self.handles.append(module.register_forward_hook(self.hook(name)))
        if not self.handles:
            raise RuntimeError("no *TopKRouter module: not a mixture-of-experts model of transformers 5")

    def hook(self, name):
        def record(module, inputs, outputs):
            _, weights, indices = outputs
            self.calls[name] = (indices.detach().cpu().numpy(), weights.detach().float().cpu().numpy())
        return record


def layer_of(router_name):
    parts = router_name.split(".")
    return int(parts[parts.index("layers") + 1])


def run(family, work, dump):
    import torch
    va.FAMILIES.update(MOE_FAMILIES)
    model = va.random_model(family, MOE_SHAPE, fixture=False, seed=1234)
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buf.copy_(0.05 * torch.randn_like(buf))
    out = os.path.join(work, family)
    model.save_pretrained(out, safe_serialization=True)
    recorder = Recorder(model)
    counts = {}
    rows = []
    for ids in va.sequences(MOE_SHAPE["vocab_size"], [7, 19, 64], seed=5):
        recorder.calls.clear()
        logits = va.hf_logits(model, ids)
        layers = {}
        for name, (indices, weights) in sorted(recorder.calls.items(), key=lambda kv: layer_of(kv[0])):
            layer = layer_of(name)
            order = np.argsort(indices, axis=-1, kind="stable")
            experts = np.take_along_axis(indices, order, -1)
            layers[layer] = dict(experts=experts.tolist(), weights=np.take_along_axis(weights, order, -1).tolist())
            n = model.config.to_dict().get("num_local_experts") or model.config.to_dict().get("num_experts") \
                or model.config.to_dict().get("n_routed_experts")
            counts.setdefault(layer, np.zeros(n, dtype=np.int64))
            np.add.at(counts[layer], experts.reshape(-1), 1)
        rows.append(dict(ids=ids, logits=logits.tolist(), layers=layers))
    if dump:
        with open(os.path.join(out, "routing.json"), "w") as f:
            json.dump(dict(family=family, sequences=rows), f)
    return out, counts, rows


def compare(binary, out, rows):
    """gpueval's choices on the saved checkpoint against transformers' rows (run()'s)."""
    tokens = same = 0
    max_weight = max_logit = 0.0
    mismatches = []
    for row in rows:
        r = subprocess.run([binary, "--threads", "2", "logits", "--model", out, "--routing", "--ids",
                            ",".join(map(str, row["ids"]))], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}")
        ours = json.loads(r.stdout)
        max_logit = max(max_logit, float(np.abs(np.asarray(ours["logits"]) - np.asarray(row["logits"])).max()))
        theirs = row["layers"]
        if sorted(theirs) != sorted(x["layer"] for x in ours["routing"]):
            raise RuntimeError(f"sparse layers differ: transformers {sorted(theirs)}, gpueval "
                               f"{[x['layer'] for x in ours['routing']]}")
        for layer in ours["routing"]:
            t = theirs[layer["layer"]]
            for pos, (e_ours, e_theirs) in enumerate(zip(layer["experts"], t["experts"])):
                tokens += 1
                if e_ours == e_theirs:
                    same += 1
                    w = np.abs(np.asarray(layer["weights"][pos]) - np.asarray(t["weights"][pos])).max()
                    max_weight = max(max_weight, float(w))
                else:
                    mismatches.append(f"layer {layer['layer']} position {pos} of {len(row['ids'])}: gpueval "
                                      f"{e_ours} {layer['weights'][pos]}, transformers {e_theirs} {t['weights'][pos]}")
    return dict(tokens=tokens, same=same, max_weight=max_weight, max_logit=max_logit, mismatches=mismatches)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", default=",".join(MOE_FAMILIES))
    ap.add_argument("--work", default=None)
    ap.add_argument("--dump", action="store_true", help="write <work>/<family>/routing.json")
    ap.add_argument("--gpueval", default=None, help="compare `gpueval logits --routing` token by token")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="moe_routing.")
    trivial, failed = [], []
    for family in [f for f in args.families.split(",") if f]:
        if family not in MOE_FAMILIES:
            sys.exit(f"unknown family {family!r} (known: {', '.join(MOE_FAMILIES)})")
        out, counts, rows = run(family, work, args.dump)
        print(f"{family}: {out}")
        for layer, c in sorted(counts.items()):
            print(f"  layer {layer}: experts chosen {c.tolist()}")
            if (c == 0).any():
                trivial.append(f"{family} layer {layer}")
        if args.gpueval:
            r = compare(args.gpueval, out, rows)
            ok = not r["mismatches"] and r["max_weight"] <= 1e-5
            print(f"  gpueval: {r['same']}/{r['tokens']} (token, layer) choices identical, max |Δ weight| "
                  f"{r['max_weight']:.2e}, max |Δ logit| {r['max_logit']:.2e}  {'ok' if ok else 'FAIL'}")
            for m in r["mismatches"]:
                print("    " + m)
            if not ok:
                failed.append(family)
    if trivial:
        print("some experts never chosen: " + ", ".join(trivial))
    else:
        print("every expert of every sparse layer chosen at least once")
    if failed:
        print("gpueval's choices differ from transformers' for: " + ", ".join(failed))
    return 1 if trivial or failed else 0


if __name__ == "__main__":
    sys.exit(main())
