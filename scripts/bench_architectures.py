#!/usr/bin/env python3
"""CPU speed of each model family against a Llama of the same shape, measured side by side.

  .venv-gpu/bin/python scripts/bench_architectures.py [--gpueval build/gpueval]
      [--families qwen3,olmo2,olmo3,gemma2,gemma3_text] [--reps 3] [--length 512] [--window 256]
      [--transformers] [--experts 8] [--experts-per-token 2]

Per family, transformers builds a random model of one shape (hidden 512, intermediate 1536, 6 layers,
8 heads of 64, 4 kv heads, the Llama 2 vocabulary of 32,000 so that the Llama 2 tokenizer of
../shared/data serves every model), and a Llama of exactly that shape is the baseline. `gpueval score`
(CPU, float32 unless --device/--dtype say otherwise, windows of --length tokens, 8 per forward) scores the same English text with each, the
family and the Llama alternating, --reps times; the table holds the median tokens/s of each and their
ratio. The matrix products are the same for every family (GPT-NeoX and GPT-2, without grouped-query
attention and with a 2-matrix MLP, are compared with a Llama of as many kv heads, with an intermediate
size 1.5 times as large: the same matrix FLOPs per token); what differs is the family's own work (norms,
soft-caps, q/k norms, the window's masks). Windowed families get a --window shorter than --length,
so the sliding layers really drop keys (fewer attention FLOPs than the Llama: the ratio can pass 1).
Mixtures of experts (mixtral, qwen3_moe, olmoe, deepseek_v3) have the Llama's active parameters
(by default 2 of 8 experts, each half its MLP width; --experts E --experts-per-token K gives K of E
experts, each 1536 / K wide); --transformers adds transformers' own forward of the same
checkpoint (its default experts path, 8 windows of --length random tokens per forward, the same
threads) and gpueval's tokens/s over it. DeepSeek-V3 is also compared with its dense twin (the same
latent attention, dense MLPs as wide as its active experts), whose attention matches.
Not run in CI: it needs torch and transformers.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPE = dict(vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=6, num_attention_heads=8,
             num_key_value_heads=4, head_dim=64, max_position_embeddings=4096, bos_token_id=1, eos_token_id=2,
             pad_token_id=None, tie_word_embeddings=False, rms_norm_eps=1e-5)
# What each family sets beyond the shape (its defaults otherwise); "WINDOW" becomes --window.
FAMILIES = {
    "qwen3": dict(),
    "olmo2": dict(),
    "olmo3": dict(sliding_window="WINDOW"),
    "granite": dict(embedding_multiplier=6.0, residual_multiplier=0.3, attention_multiplier=0.09, logits_scaling=4.0),
    "gemma2": dict(sliding_window="WINDOW", query_pre_attn_scalar=64),
    "gemma3_text": dict(sliding_window="WINDOW", query_pre_attn_scalar=64),
    "mistral": dict(sliding_window="WINDOW"),
    # No grouped-query attention and a plain 2-matrix MLP: the baseline Llama gets as many kv heads, and
    # the family an intermediate size 1.5 times the shape's, so both do the same matrix FLOPs per token.
    "gpt_neox": dict(intermediate_size=2304, _llama=dict(num_key_value_heads=8)),
    "gpt2": dict(intermediate_size=2304, n_inner=2304, _llama=dict(num_key_value_heads=8)),
    # Mixtures of experts with the Llama's active parameters: 8 experts, 2 per token, each half the
    # Llama's MLP width (2 x 768 = 1536); the router's 8 x 512 per layer is the only extra product.
    "mixtral": dict(num_local_experts=8, num_experts_per_tok=2, intermediate_size=768, sliding_window=None),
    "qwen3_moe": dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=768, norm_topk_prob=True,
                      decoder_sparse_step=1, mlp_only_layers=[]),
    "olmoe": dict(num_experts=8, num_experts_per_tok=2, intermediate_size=768),
    # DeepSeek-V3: 2 of 8 routed experts and 1 shared, 512 wide each (3 x 512 = 1536 active), every layer
    # sparse; latent attention (kv_lora_rank 256, RoPE on 32 of 96 query dimensions, values of 64) in
    # place of the Llama's grouped-query attention, so attention's work differs from the baseline's.
    "deepseek_v3": dict(n_routed_experts=8, num_experts_per_tok=2, n_group=1, topk_group=1, n_shared_experts=1,
                        moe_intermediate_size=512, first_k_dense_replace=0, q_lora_rank=None, kv_lora_rank=256,
                        qk_rope_head_dim=32, qk_nope_head_dim=64, v_head_dim=64, num_key_value_heads=8),
}
MOE = {"mixtral", "qwen3_moe", "olmoe", "deepseek_v3"}


def with_experts(family, extra, experts, per_token):
    """A mixture's settings with `experts` experts, `per_token` per token, about the Llama's active
    parameters: each expert 1536 / per_token wide (DeepSeek-V3: 1536 / (per_token + 1), its shared
    expert as wide as a routed one), rounded down to a multiple of 16 (transformers' grouped product
    wants 16-byte strides)."""
    extra = dict(extra)
    width = SHAPE["intermediate_size"] // (per_token + (1 if family == "deepseek_v3" else 0)) // 16 * 16
    count_key = {"mixtral": "num_local_experts", "deepseek_v3": "n_routed_experts"}.get(family, "num_experts")
    width_key = "intermediate_size" if family in ("mixtral", "olmoe") else "moe_intermediate_size"
    extra.update({count_key: experts, "num_experts_per_tok": per_token, width_key: width})
    return extra
# Keys the families without grouped-query attention or RoPE do not have.
NOT_THEIRS = {"gpt_neox": ("num_key_value_heads", "head_dim"), "gpt2": ("num_key_value_heads", "head_dim"),
              "deepseek_v3": ("head_dim",)}


def build(model_type, extra, window, out):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    kwargs = dict(SHAPE)
    kwargs.update({k: (window if v == "WINDOW" else v) for k, v in extra.items() if k != "_llama"})
    for key in NOT_THEIRS.get(model_type, ()):
        kwargs.pop(key, None)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **kwargs), dtype=torch.float32)
    model.save_pretrained(out, safe_serialization=True)
    shutil.copy(os.path.join(ROOT, "..", "shared", "data", "tokenizers", "llama2_sentencepiece", "tokenizer.model"), out)
    return out


def tokens_per_s(binary, model, text, length, device="cpu", dtype="float32"):
    r = subprocess.run([binary, "score", "--model", model, "--text", text, "--max-length", str(length),
                        "--batch-windows", "8", "--device", device, "--dtype", dtype], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}")
    return json.loads(r.stdout)["tokens_per_second"]


def transformers_tokens_per_s(model_dir, length, rows=8, reps=3):
    """transformers' own forward (float32, CPU, the same threads) on rows x length tokens: tokens/s."""
    import time
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = torch.randint(3, model.config.vocab_size, (rows, length), generator=torch.Generator().manual_seed(0))
    times = []
    with torch.inference_mode():
        model(input_ids=ids[:1, :16])  # warm-up
        for _ in range(reps):
            t0 = time.perf_counter()
            model(input_ids=ids, logits_to_keep=0)
            times.append(time.perf_counter() - t0)
    return rows * length / statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpueval", default=os.path.join(ROOT, "build", "gpueval"))
    ap.add_argument("--families", default="qwen3,olmo2,olmo3,gemma2,gemma3_text")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--length", type=int, default=512)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--device", default="cpu", help="cpu or cuda:N (a GPU's tokens/s per family)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--transformers", action="store_true",
                    help="also transformers' own forward of each mixture of experts (8 windows per forward, "
                         "BENCH_THREADS threads, default 2) and gpueval's ratio over it")
    ap.add_argument("--experts", type=int, default=8,
                    help="experts per mixture layer (default 8; real ones have 64 to 256)")
    ap.add_argument("--experts-per-token", type=int, default=2,
                    help="experts each token is routed to (default 2), each 1536 / this wide")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench_architectures.")
    src = os.path.join(ROOT, "..", "shared", "data", "hellaswag", "hellaswag_val_full.txt")
    text = os.path.join(work, "text.txt")
    with open(src) as f, open(text, "w") as out:
        out.writelines(line for i, line in enumerate(f) if i % 6 == 0 and i < 6 * 150)
    llamas = {}  # baseline Llamas by their overrides of SHAPE
    print(f"shape: {SHAPE['num_hidden_layers']} layers, hidden {SHAPE['hidden_size']}, windows of {args.length} "
          f"tokens, sliding window {args.window}; median of {args.reps} alternating runs; mixtures: "
          f"{args.experts} experts, {args.experts_per_token} per token")
    print(f"{'family':<12} {'tokens/s':>10} {'llama tokens/s':>15} {'ratio':>7}"
          + (f" {'transformers':>13} {'ours/theirs':>12}" if args.transformers else ""))
    failed = False
    llama_rows = {}  # baseline Llama -> (gpueval tokens/s, transformers tokens/s)
    for family in [f for f in args.families.split(",") if f]:
        if family not in FAMILIES:
            sys.exit(f"unknown family {family!r} (known: {', '.join(FAMILIES)})")
        try:
            extra = FAMILIES[family]
            if family in MOE:
                extra = with_experts(family, extra, args.experts, args.experts_per_token)
            model = build(family, extra, args.window, os.path.join(work, family))
            over = FAMILIES[family].get("_llama", {})
            key = json.dumps(over, sort_keys=True)
            if key not in llamas:
                llamas[key] = build("llama", over, args.window, os.path.join(work, f"llama{len(llamas)}"))
            llama = llamas[key]
            ours, base = [], []
            for _ in range(args.reps):
                ours.append(tokens_per_s(args.gpueval, model, text, args.length, args.device, args.dtype))
                base.append(tokens_per_s(args.gpueval, llama, text, args.length, args.device, args.dtype))
            o, b = statistics.median(ours), statistics.median(base)
            extra = ""
            if args.transformers and family in MOE:
                t = transformers_tokens_per_s(model, args.length, reps=args.reps)
                extra = f" {t:>13.0f} {o / t:>12.2f}"
                if key not in llama_rows:  # the dense baseline against transformers too, once
                    llama_rows[key] = (b, transformers_tokens_per_s(llama, args.length, reps=args.reps))
            print(f"{family:<12} {o:>10.0f} {b:>15.0f} {o / b:>7.3f}{extra}")
            if family == "deepseek_v3":
                # Its dense twin: the same latent attention, every layer a dense MLP as wide as the
                # active experts (routed + shared), so the ratio is the experts' cost alone.
                e = with_experts(family, FAMILIES[family], args.experts, args.experts_per_token)
                twin = build(family, dict(e, first_k_dense_replace=SHAPE["num_hidden_layers"],
                                          intermediate_size=e["moe_intermediate_size"] * (args.experts_per_token + 1)),
                             args.window, os.path.join(work, "deepseek_v3_dense"))
                ours, dense = [], []
                for _ in range(args.reps):
                    ours.append(tokens_per_s(args.gpueval, model, text, args.length, args.device, args.dtype))
                    dense.append(tokens_per_s(args.gpueval, twin, text, args.length, args.device, args.dtype))
                o, d = statistics.median(ours), statistics.median(dense)
                print(f"{'  dense twin':<12} {o:>10.0f} {d:>15.0f} {o / d:>7.3f}  (deepseek_v3 over itself with "
                      f"dense MLPs of its active width)")
        except Exception as e:  # one family's failure is a row, not the end of the run
            failed = True
            print(f"{family:<12} FAIL {e}")
    for b, t in llama_rows.values():
        print(f"{'llama':<12} {b:>10.0f} {'':>15} {'':>7} {t:>13.0f} {b / t:>12.2f}")
    shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
