#!/usr/bin/env python3
"""Writes a random-weight Llama-3-shaped checkpoint that gpueval and transformers both load, offline.

  scripts/gpu/make_llama.py OUTDIR --size 1b     # Llama-3.2-1B shape, ~1.24B parameters, bf16
  scripts/gpu/make_llama.py OUTDIR --size tiny   # same family, 2 layers, hidden 32 (~4M, mostly embedding)
  scripts/gpu/make_llama.py OUTDIR --size smoke  # same family, 4 layers, hidden 256 (~36M, 33M of it embedding)
  scripts/gpu/make_llama.py OUTDIR --size moe    # a Mixtral: 8 layers, hidden 1024, 8 of 64 experts of 256, bf16
  scripts/gpu/make_llama.py OUTDIR --size moe-smoke  # the same family, 4 layers, hidden 256, 4 of 16 experts

The model is transformers' LlamaForCausalLM built from a LlamaConfig with a fixed seed, saved by
save_pretrained(safe_serialization=True) (model.safetensors, config.json). The tokenizer is the real
Llama-3 tokenizer.json (128,000 BPE + 256 special tokens = vocab 128256) from the shared data
(tokenizers/llama3/tokenizer.json.gz, gunzipped) with its tokenizer_config.json, so no hub is needed.
Prints one JSON line: {"out", "size", "params", "params_per_part", "dtype", "seconds"}.
"""
import argparse
import gzip
import json
import os
import shutil
import sys
import time

# Mixtures of experts (MixtralForCausalLM: Llama attention, 8 of 64 SwiGLU experts per token, a float32
# softmax router), with the same tokenizer: "moe" for the GPU (0.56B stored, 0.2B active per token),
# "moe-smoke" for the CPU rehearsal. The router weights are scaled up so that tokens spread over the
# experts (at init's 0.02 every router logit is near 0 and ties decide).
MOE_SIZES = {
    "moe": dict(hidden_size=1024, intermediate_size=256, num_hidden_layers=8, num_attention_heads=16,
                num_key_value_heads=4, num_local_experts=64, num_experts_per_tok=8, max_position_embeddings=8192),
    "moe-smoke": dict(hidden_size=256, intermediate_size=128, num_hidden_layers=4, num_attention_heads=8,
                      num_key_value_heads=4, num_local_experts=16, num_experts_per_tok=4, max_position_embeddings=8192),
}
SIZES = {
    # Llama-3.2-1B: tied embeddings, rope_theta 500000 with llama3 rope scaling.
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, max_position_embeddings=131072),
    "tiny": dict(hidden_size=32, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=131072),
    # gpu_check.sh --cpu-smoke's model: big enough that scoring takes seconds on 2 cores; without
    # torch the smoke writes the same shape with `gpueval init-model`.
    "smoke": dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=4, max_position_embeddings=131072),
}
VOCAB = 128256


def shared_data_dir(explicit):
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    for d in [explicit, os.environ.get("GPUEVAL_SHARED_DATA"), os.path.join(repo, "..", "shared", "data"),
              os.path.join(repo, "shared", "data")]:
        if d and os.path.isfile(os.path.join(d, "tokenizers", "llama3", "tokenizer_config.json")):
            return os.path.abspath(d)
    sys.exit("make_llama: no shared data with tokenizers/llama3 found (set GPUEVAL_SHARED_DATA or --data)")


def write_tokenizer(src_dir, out):
    src = os.path.join(src_dir, "tokenizers", "llama3")
    with gzip.open(os.path.join(src, "tokenizer.json.gz"), "rb") as f_in, \
            open(os.path.join(out, "tokenizer.json"), "wb") as f_out:
        shutil.copyfileobj(f_in, f_out)
    shutil.copyfile(os.path.join(src, "tokenizer_config.json"), os.path.join(out, "tokenizer_config.json"))
    with open(os.path.join(out, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}, f)


def cfg_rope(cfg):
    rp = dict(getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {})
    theta = rp.pop("rope_theta", getattr(cfg, "rope_theta", 500000.0))
    return theta, rp


def add_legacy_keys(path, rope, dtype_name):
    """transformers >= 5 writes `rope_parameters` and `dtype`; checkpoints on the hub (and
    transformers 4) use `rope_theta`, `rope_scaling` and `torch_dtype`. Write both spellings."""
    with open(path) as f:
        c = json.load(f)
    theta, scaling = rope
    c.setdefault("rope_theta", theta)
    c.setdefault("rope_scaling", scaling or None)
    c.setdefault("torch_dtype", dtype_name)
    with open(path, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--size", choices=sorted(SIZES) + sorted(MOE_SIZES), default="1b")
    ap.add_argument("--dtype", choices=["bfloat16", "float32", "float16"], default=None,
                    help="stored dtype (default: bfloat16 for 1b, float32 otherwise)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--device", default=None, help="where to initialise (default: cuda if available)")
    ap.add_argument("--data", default=None, help="shared data directory (default: ../shared/data)")
    args = ap.parse_args()
    t0 = time.time()
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM

    data = shared_data_dir(args.data)
    dtype_name = args.dtype or ("bfloat16" if args.size in ("1b", "moe") else "float32")
    dtype = getattr(torch, dtype_name)
    os.makedirs(args.out, exist_ok=True)
    moe = args.size in MOE_SIZES
    common = dict(vocab_size=VOCAB, rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=128000,
                  eos_token_id=128001, hidden_act="silu", initializer_range=0.02, torch_dtype=dtype_name)
    if moe:
        cfg = MixtralConfig(rope_theta=500000.0, sliding_window=None, router_aux_loss_coef=0.0,
                            **common, **MOE_SIZES[args.size])
    else:
        cfg = LlamaConfig(rope_theta=500000.0,
                          rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                          attention_bias=False, mlp_bias=False, **common, **SIZES[args.size])
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)
    with torch.device(device):
        # transformers' own init: normal(0, 0.02), norms 1, seeded above
        model = (MixtralForCausalLM if moe else LlamaForCausalLM)(cfg)
    if moe:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("mlp.gate.weight"):
                    p.normal_(0.0, 1.0)
    model = model.to(dtype).eval()
    params = sum(p.numel() for p in model.parameters())  # tied: the embedding counts once
    emb = model.model.embed_tokens.weight.numel()
    model.save_pretrained(args.out, safe_serialization=True)
    write_tokenizer(data, args.out)
    add_legacy_keys(os.path.join(args.out, "config.json"), cfg_rope(cfg), dtype_name)
    print(json.dumps({"out": os.path.abspath(args.out), "size": args.size, "params": params,
                      "params_per_part": {"embedding (tied lm_head)": emb, "layers+norms": params - emb},
                      "dtype": dtype_name, "device": device, "seconds": round(time.time() - t0, 2)}))


if __name__ == "__main__":
    main()
