#!/usr/bin/env python3
"""Every model family gpueval reads, checked against transformers' own modeling code on random models.

  HF_HUB_OFFLINE=1 .venv-gpu/bin/python scripts/verify_architectures.py [--gpueval build/gpueval]
      [--families qwen3,olmo2] [--write-fixtures] [--work DIR]

Per family, a small random model (hidden 64, 4 layers, vocab 512: token ids are given directly, no
tokenizer) is built by transformers from the family's own Config class (AutoConfig.for_model) and
AutoModelForCausalLM.from_config, every parameter perturbed so each one moves the output (weights and
biases normal(0, 0.1), norm weights and biases 1 + normal(0, 0.1); DeepSeek-V3's saved buffer
e_score_correction_bias normal(0, 0.1)), and saved by save_pretrained in float32.
transformers' float32 logits on a few token sequences are compared with `gpueval logits --ids ...`
(CPU, float32) on the same checkpoint. Prints a table, per family:
  max |Δ logit|   max over sequences, positions and vocabulary of |ours - transformers|
  max |logit|     the largest transformers logit, the scale the difference is relative to
  argmax          % of positions where both pick the same top token
Pass: max |Δ| <= 1e-4 * max(1, max |logit|) and argmax 100%, for every family; exit code 0 on pass.

--write-fixtures also writes, per family, the TINY model (hidden 16, 2 layers, vocab 64) and its
transformers logits that tests/model/architecture_test.cpp checks in CI, into
tests/fixtures/architectures/<family>/ (config.json, model.safetensors, expected_logits.json).
--rope adds the rope_scaling cases of scripts/verify_rope.py (linear, dynamic, llama3, yarn, longrope
on random Llama models, below and above their length thresholds) to the table.
--device cuda:0 --dtype bfloat16 (a GPU, or bfloat16 on the CPU to rehearse it) runs both sides in that
dtype on that device: transformers' model cast there, `gpueval logits --device --dtype`; each is compared
with transformers' float32 CPU logits, and a family passes when our error is within twice transformers'
own (plus 1e-3 of the largest logit) and both pick the same top token at >= 90% of positions.
Not run in CI: it needs torch and transformers (the venv of the brief; CPU is enough).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What each family's random model sets beyond the shared shape: the features that family exists for.
FAMILIES = {
    "llama": dict(),
    # Llama's attention_bias puts a bias on o_proj as well as on q, k and v; mlp_bias on gate, up and down.
    "llama-bias": dict(model_type="llama", attention_bias=True, mlp_bias=True),
    "mistral": dict(sliding_window=None),
    "qwen2": dict(),
    # head_dim is not hidden / heads, so the q/k norms' [head_dim] and the projections' widths differ.
    "qwen3": dict(head_dim=24),
    "olmo2": dict(),
    # Every multiplier away from 1, and attention_bias (q, k, v and o biases).
    "granite": dict(embedding_multiplier=6.0, residual_multiplier=0.3, attention_multiplier=0.09,
                    logits_scaling=4.0, attention_bias=True),
    # Every other layer without RoPE ([1, 0, 1, 0]), untied head (the family's default is tied).
    "smollm3": dict(no_rope_layer_interval=2, tie_word_embeddings=False),
    # Sliding windows shorter than the sequences (WINDOW: 8 positions here, 4 in the fixtures): every
    # layer of a Mistral; Qwen2/3 from max_window_layers on; SmolLM3 on its layers without RoPE.
    "mistral-window": dict(model_type="mistral", sliding_window="WINDOW"),
    "qwen2-window": dict(model_type="qwen2", use_sliding_window=True, sliding_window="WINDOW", max_window_layers=1),
    "qwen3-window": dict(model_type="qwen3", use_sliding_window=True, sliding_window="WINDOW", max_window_layers=1),
    "smollm3-window": dict(model_type="smollm3", no_rope_layer_interval=2, use_sliding_window=True,
                           sliding_window="WINDOW"),
    # OLMo 2 with three sliding layers in four (every layer but the last of the fixture's two slides), the
    # per-layer-type rope_parameters transformers 5 writes, a linear rope_scaling on the full layers only.
    "olmo3": dict(sliding_window="WINDOW",
                  rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                   "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}}),
    # Soft-caps small enough that tanh bends the scores and the logits; alternating sliding layers;
    # query_pre_attn_scalar apart from head_dim.
    "gemma2": dict(sliding_window="WINDOW", attn_logit_softcapping=2.0, final_logit_softcapping=3.0,
                   query_pre_attn_scalar=20, head_dim=16, tie_word_embeddings=True),
    # Per-head q/k norms, a local RoPE base for the sliding layers (every other one) apart from the global
    # base and its linear scaling; no soft-caps (Gemma 3's default).
    "gemma3_text": dict(sliding_window="WINDOW", sliding_window_pattern=2, query_pre_attn_scalar=24, head_dim=16,
                        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                         "full_attention": {"rope_type": "linear", "factor": 4.0,
                                                            "rope_theta": 1000000.0}}),
    # Gemma 3's multimodal checkpoint (4B and up): the language model (a gemma3_text, here with a final
    # soft-cap) in text_config, its weights under language_model.model., a tiny vision tower gpueval skips.
    "gemma3": dict(sliding_window="WINDOW", sliding_window_pattern=2, query_pre_attn_scalar=24, head_dim=16,
                   final_logit_softcapping=5.0, tie_word_embeddings=True,
                   rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}}),
    # Fused qkv_proj and gate_up_proj, a window on every layer.
    "phi3": dict(sliding_window="WINDOW"),
    # Phi-4-mini's shape: RoPE on the first half of each head only (partial_rotary_factor 0.5), no window.
    "phi3-partial": dict(model_type="phi3", partial_rotary_factor=0.5),
    # Pythia: LayerNorm with biases, query_key_value fused per head, RoPE on a quarter of each head
    # (rotary_pct's default), parallel residual, erf GELU MLP with biases, untied embed_out.
    "gpt_neox": dict(),
    # The sequential residual, half-rotary heads, the head tied to the embedding.
    "gpt_neox-sequential": dict(model_type="gpt_neox", use_parallel_residual=False, rotary_pct=0.5,
                                tie_word_embeddings=True),
    # nanoGPT's shape: learned positions, Conv1D weights stored [in, out], c_attn fused, gelu_new, tied head.
    "gpt2": dict(tie_word_embeddings=True),
    # Unscaled attention scores (scale_attn_weights false), erf GELU, an untied lm_head.
    "gpt2-unscaled": dict(model_type="gpt2", scale_attn_weights=False, activation_function="gelu"),
    # GLM-4: sandwich norms under GLM's names (its post_attention_layernorm is the norm before the MLP),
    # fused gate_up_proj, q/k/v biases, RoPE on the interleaved pairs of half of each head (the
    # family's default partial_rotary_factor), a tiny rms_norm_eps.
    "glm4": dict(),
    # The whole head rotated (partial_rotary_factor 1).
    "glm4-full": dict(model_type="glm4", partial_rotary_factor=1.0),
    # Mixtures of experts (4 experts, top 2; the perturbed routers choose every expert somewhere:
    # scripts/moe_routing.py prints the histograms). Mixtral: Mistral's attention, always renormalised.
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=None),
    # Qwen3-MoE: experts narrower than the dense MLP of layer 1 (mlp_only_layers), renormalised.
    "qwen3_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24, norm_topk_prob=True,
                      mlp_only_layers=[1]),
    # Unnormalised top-k, every second layer sparse (decoder_sparse_step 2).
    "qwen3_moe-unnormalized": dict(model_type="qwen3_moe", num_experts=4, num_experts_per_tok=2,
                                   moe_intermediate_size=24, norm_topk_prob=False, decoder_sparse_step=2),
    # OLMoE: q/k norms over the projections, clip_qkv tight enough to clamp, unnormalised top-k.
    "olmoe": dict(num_experts=4, num_experts_per_tok=2, norm_topk_prob=False, clip_qkv=0.5),
    # DeepSeek-V3: latent attention with a low-rank q, interleaved RoPE pairs, yarn with mscale and
    # mscale_all_dim (the softmax scale moves too); a sigmoid router with a perturbed correction bias,
    # 8 experts in 4 groups of which 2 may be chosen from, top 2, renormalised and scaled by 2.5; one
    # shared expert; layer 0 dense (first_k_dense_replace). Widths: family_config's DEEPSEEK_DIMS.
    "deepseek_v3": dict(n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2, n_shared_experts=1,
                        first_k_dense_replace=1, routed_scaling_factor=2.5, norm_topk_prob=True,
                        rope_parameters=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings="ORIGINAL",
                                             beta_fast=32.0, beta_slow=1.0, mscale=0.707, mscale_all_dim=1.0,
                                             rope_theta=10000.0)),
    # Without q_lora_rank (q_proj), plain RoPE pairs, default RoPE, one group, unnormalised weights
    # scaled by 1.5, two shared experts, every layer sparse.
    "deepseek_v3-plain": dict(model_type="deepseek_v3", n_routed_experts=8, num_experts_per_tok=3, n_group=1,
                              topk_group=1, n_shared_experts=2, first_k_dense_replace=0, routed_scaling_factor=1.5,
                              norm_topk_prob=False, q_lora_rank=None, rope_interleave=False),
}
# DeepSeek-V3's latent widths (verify, fixture): q_lora_rank, kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim,
# v_head_dim, moe_intermediate_size.
DEEPSEEK_DIMS = dict(verify=dict(q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16,
                                 v_head_dim=12, moe_intermediate_size=24),
                     fixture=dict(q_lora_rank=8, kv_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=4,
                                  v_head_dim=6, moe_intermediate_size=8))
# Gemma 3's vision tower, as small as SigLIP allows (4 patches of 14 pixels: mm_tokens_per_image 4).
GEMMA3_VISION = dict(hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                     patch_size=14)
# Families without grouped-query attention (num_key_value_heads is not theirs) or RoPE.
NO_GQA = {"gpt_neox", "gpt2"}
NO_ROPE = {"gpt2"}
WINDOW = dict(verify=8, fixture=4)
# Families whose transformers attention needs the eager implementation (soft-capped scores).
EAGER = {"gemma2"}

VERIFY_SHAPE = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
FIXTURE_SHAPE = dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                     num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)


def family_config(family, shape, fixture):
    from transformers import AutoConfig
    extra = dict(FAMILIES[family])
    model_type = extra.pop("model_type", family)
    if model_type in ("qwen3", "qwen3_moe", "glm4"):
        extra["head_dim"] = 12 if fixture else 24
    if model_type == "deepseek_v3":
        dims = dict(DEEPSEEK_DIMS["fixture" if fixture else "verify"])
        if "q_lora_rank" in extra:  # None: q_proj
            dims.pop("q_lora_rank")
        extra = dict(dims, **extra)
        extra["num_key_value_heads"] = shape["num_attention_heads"]  # latent attention expands keys per head
        if "rope_parameters" in extra:
            extra["rope_parameters"] = dict(extra["rope_parameters"],
                                            original_max_position_embeddings=shape["max_position_embeddings"] // 4)
    for key, value in extra.items():
        if value == "WINDOW":
            extra[key] = WINDOW["fixture" if fixture else "verify"]
    # Special ids inside the small vocabulary (SmolLM3's defaults are Llama 3's 128000s).
    kwargs = dict(shape, rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                  pad_token_id=None)
    kwargs.update(extra)
    if model_type in NO_GQA:
        kwargs.pop("num_key_value_heads")
    if model_type not in NO_ROPE:
        kwargs.setdefault("rope_parameters", {"rope_type": "default", "rope_theta": 10000.0})
    if model_type == "gemma3":  # the multimodal wrapper: the text model's config inside, a tiny SigLIP beside it
        return AutoConfig.for_model(
            "gemma3", text_config=kwargs, vision_config=GEMMA3_VISION, mm_tokens_per_image=4,
            image_token_index=kwargs["vocab_size"] + 100, boi_token_index=kwargs["vocab_size"] + 101,
            eoi_token_index=kwargs["vocab_size"] + 102, tie_word_embeddings=kwargs["tie_word_embeddings"])
    return AutoConfig.for_model(model_type, **kwargs)


def random_model(family, shape, fixture, seed):
    import torch
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    kwargs = dict(attn_implementation="eager") if family in EAGER else {}
    model = AutoModelForCausalLM.from_config(family_config(family, shape, fixture), dtype=torch.float32, **kwargs)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or ".ln_" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
        for name, b in model.named_buffers():  # DeepSeek-V3's router correction: saved, and moves the choice
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn_like(b))
    return model.eval()


def sequences(vocab, lengths, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=n).tolist() for n in lengths]


def hf_logits(model, ids):
    import torch
    with torch.inference_mode():
        input_ids = torch.tensor([ids], dtype=torch.long, device=model.device)
        return model(input_ids=input_ids).logits[0].float().cpu().numpy()


def gpueval_logits(binary, model_dir, ids, device="cpu", dtype="float32"):
    r = subprocess.run([binary, "--threads", "2", "logits", "--model", model_dir, "--device", device, "--dtype",
                        dtype, "--ids", ",".join(map(str, ids))], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}")
    return np.asarray(json.loads(r.stdout)["logits"], dtype=np.float32)


def verify(family, binary, work, device="cpu", dtype="float32"):
    import copy
    import torch
    model = random_model(family, VERIFY_SHAPE, fixture=False, seed=1234)
    out = os.path.join(work, family)
    model.save_pretrained(out, safe_serialization=True)
    exact = device == "cpu" and dtype == "float32"
    # The same model in the dtype and on the device under test: transformers' own error there is the bar.
    theirs = None if exact else copy.deepcopy(model).to(device=device, dtype=getattr(torch, dtype))
    max_abs = max_logit = hf_abs = 0.0
    agree = total = 0
    for ids in sequences(VERIFY_SHAPE["vocab_size"], [7, 19, 64], seed=5):
        ref = hf_logits(model, ids)
        ours = gpueval_logits(binary, out, ids, device, dtype)
        max_abs = max(max_abs, float(np.abs(ours - ref).max()))
        max_logit = max(max_logit, float(np.abs(ref).max()))
        top = ref if exact else hf_logits(theirs, ids)
        if not exact:
            hf_abs = max(hf_abs, float(np.abs(top - ref).max()))
        agree += int((ours.argmax(-1) == top.argmax(-1)).sum())
        total += len(ids)
    if exact:
        ok = max_abs <= 1e-4 * max(1.0, max_logit) and agree == total
    else:
        ok = max_abs <= 2 * hf_abs + 1e-3 * max(1.0, max_logit) and agree >= 0.9 * total
    return dict(family=family, max_abs=max_abs, max_logit=max_logit, argmax=100.0 * agree / total, ok=ok,
                hf_abs=None if exact else hf_abs)


def write_fixture(family):
    model = random_model(family, FIXTURE_SHAPE, fixture=True, seed=99)
    out = os.path.join(ROOT, "tests", "fixtures", "architectures", family)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(out, extra)):
            os.remove(os.path.join(out, extra))
    rows = []
    for ids in sequences(FIXTURE_SHAPE["vocab_size"], [5, 11], seed=7):
        logits = hf_logits(model, ids)
        rows.append({"ids": ids, "logits": [[float(f"{x:.8g}") for x in row] for row in logits]})
    with open(os.path.join(out, "expected_logits.json"), "w") as f:
        json.dump({"family": family, "source": "scripts/verify_architectures.py --write-fixtures (transformers "
                   + __import__("transformers").__version__ + ", float32)", "sequences": rows}, f)
        f.write("\n")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpueval", default=os.path.join(ROOT, "build", "gpueval"))
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--write-fixtures", action="store_true")
    ap.add_argument("--work", default=None, help="where the random checkpoints go (default: a temporary folder)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda:N, for both sides (default cpu)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--rope", action="store_true",
                    help="also every rope_scaling type (scripts/verify_rope.py's cases, and its fixtures)")
    args = ap.parse_args()
    families = [f for f in args.families.split(",") if f]
    for f in families:
        if f not in FAMILIES:
            sys.exit(f"unknown family {f!r} (known: {', '.join(FAMILIES)})")
    work = args.work or tempfile.mkdtemp(prefix="verify_architectures.")
    results = []
    for f in families:
        try:
            results.append(verify(f, args.gpueval, work, args.device, args.dtype))
        except Exception as e:  # one family's failure is a row of the table, not the end of the run
            results.append(dict(family=f, max_abs=float("nan"), max_logit=float("nan"), argmax=0.0, ok=False,
                                error=str(e)))
        if args.write_fixtures:
            write_fixture(f)
    if args.rope:
        import verify_rope
        for c in verify_rope.CASES:
            try:
                results.append(verify_rope.verify(c, args.gpueval, work))
            except Exception as e:
                results.append(dict(family="rope:" + c, max_abs=float("nan"), max_logit=float("nan"), argmax=0.0,
                                    ok=False, error=str(e)))
            if args.write_fixtures:
                verify_rope.write_fixture(c)
    low = args.device != "cpu" or args.dtype != "float32"
    if low:
        print(f"{args.dtype} on {args.device}: max |Δ logit| against transformers' float32 CPU logits, ours and "
              f"transformers' own in {args.dtype}; argmax: ours = transformers' {args.dtype} top token")
    print(f"{'family':<20} {'max |Δ logit|':>14}" + (f" {'transformers':>13}" if low else "")
          + f" {'max |logit|':>12} {'argmax':>8}  result")
    for r in results:
        hf = r.get("hf_abs")
        print(f"{r['family']:<20} {r['max_abs']:>14.3e}" + (f" {hf if hf is not None else float('nan'):>13.3e}" if low else "")
              + f" {r['max_logit']:>12.4f} {r['argmax']:>7.1f}%  "
              f"{'ok' if r['ok'] else 'FAIL'}{'  ' + r['error'] if 'error' in r else ''}")
    sys.exit(0 if all(r["ok"] for r in results) else 1)


if __name__ == "__main__":
    main()
