#!/usr/bin/env python3
"""Writes tests/fixtures/lm_eval_chat_requests.json: the requests lm-evaluation-harness 0.4.13 builds
with a chat template (the equivalent of `lm_eval --apply_chat_template [--fewshot_as_multiturn
false] [--system_instruction ...] --model_args ...chat_template_args=...`), and the token ids its
HFLM feeds for them. Spec: docs/lm_eval_chat.md.

How: lm-eval's real code paths, no stub of lm-eval's logic.
  * The model is lm_eval.models.huggingface.HFLM itself, over a tiny random LlamaForCausalLM
    (1 layer, hidden 16) saved next to each tokenizer, so HFLM.apply_chat_template, tok_encode,
    _encode_pair (TemplateLM), tok_batch_encode and the BOS logic are lm-eval's own. The only
    override (subclass RecordingHFLM) records the message list each apply_chat_template call gets,
    and replaces the model-running methods loglikelihood/generate_until by constant answers
    (requests are built before they run; their results are irrelevant here).
  * The requests come from lm_eval.simple_evaluate(..., log_samples=True) (so seeds, num_fewshot
    handling, fewshot_as_multiturn, system_instruction and build_all_requests are lm-eval's).
  * Tasks: lm-eval's own YAMLs (`include:` by absolute path), only the dataset keys overridden to
    local files made from the shared data (as scripts/verify_lm_eval.py does):
      mmlu_abstract_algebra  5-shot  (cais/mmlu rows from mmlu/{test,dev}/abstract_algebra_*.csv)
      arc_easy               0-shot and 5-shot (allenai/ai2_arc rows from arc/arc_easy_test_mosaic.jsonl,
                             test split only; 5-shot draws 5 of the test docs, the asked one NOT excluded,
                             as lm-eval does without a fewshot split)
      gsm8k                  5-shot (its default), gsm8k/test.jsonl as test AND fewshot split
                             (fewshot_split: test; gpueval's fallback when there is no train file)
      gsm8k_cot              8-shot (its default; the few-shot examples are in the YAML)
      lambada_openai         0-shot (output_type loglikelihood), lambada_openai/lambada_openai.jsonl
      rolling_demo           two made-up texts, output_type loglikelihood_rolling (arguments: (text,) only)
      arc_easy_gen_prefix    2-shot, arc_easy plus `gen_prefix: The answer is` (assistant prefill:
                             add_generation_prompt=False, continue_final_message=True)
  * Token ids: loglikelihood requests -> HFLM._encode_pair(context, continuation) (context_ids,
    continuation_ids; note the trailing-whitespace move); generate_until -> HFLM.tok_batch_encode([context])
    (batch of one, no padding; no left truncation applied here).

Models/tokenizers (built under --work from ../shared/data; nothing is downloaded):
  llama3       tokenizers/llama3 (tokenizer.json gunzipped, its tokenizer_config.json as is: chat_template
               writes bos_token itself; bos <|begin_of_text|> 128000, eos <|end_of_text|> 128001;
               the tokenizer adds no BOS by itself)
  chatml       tokenizers/mistral7b_v0.1 with chat_template = chat_templates/chatml.jinja
               (bos <s> 1, which the tokenizer adds by default (add_bos_token true); chatml.jinja also writes
               {{ bos_token }}, but its multi-line layout renders as "\n<s>\n\n    <|im_start|>...", which does
               not START with "<s>", so HFLM lets the tokenizer add BOS: ids [1, 28705, 13, 1, ...], two BOS)
  qwen3like    tokenizers/gpt2 plus added tokens <|im_start|> <|im_end|> (special) and <think> </think>,
               bos_token None, eos <|im_end|>, and QWEN3_LIKE_TEMPLATE below (reads enable_thinking)
  named        tokenizers/llama3 with tokenizer_config chat_template as a LIST [{name: default, ...},
               {name: chatml, ...}] (only for the named-template check, see "named_template_check")

Also written: "behaviour_checks" (lm-eval's own functions run on small inputs: the CLI's fewshot_as_multiturn
default, maybe_delimit, the system-role fallback of HFLM.apply_chat_template, handle_stop_sequences,
postprocess_generated_text with think_end_token, enable_thinking=True refusing loglikelihood, BOS decisions
of tok_encode/tok_batch_encode) and "named_template_check" (apply_chat_template="chatml" when the
tokenizer's chat_template is a list of named templates).

Settings (each over every task above):
  llama3_mt_sys      llama3,  apply_chat_template=True, fewshot_as_multiturn=True,  system_instruction=SYS
  llama3_st_nosys    llama3,  apply_chat_template=True, fewshot_as_multiturn=False, no system_instruction
  chatml_mt_sys      chatml,  same as llama3_mt_sys
  chatml_st_nosys    chatml,  same as llama3_st_nosys
  qwen3like_nothink  qwen3like, apply_chat_template=True, fewshot_as_multiturn=True, system_instruction=SYS,
                     model_args chat_template_args={"enable_thinking": false}, think_end_token="</think>"
                     (generate tasks only: mmlu/arc would be refused only with enable_thinking=True)

Usage:
  HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 python3 scripts/dump_lm_eval_chat_requests.py \
      [--data ../shared/data] [--work /tmp/chatref] [--docs 3] [--out tests/fixtures/lm_eval_chat_requests.json]
"""
from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import shutil
import sys
from pathlib import Path

for _k in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ[_k] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
SYS = "You are a careful assistant."

# A small Qwen3-like template: system first, ChatML turns, and with add_generation_prompt an empty
# think block when enable_thinking is false (what Qwen3's template does).
QWEN3_LIKE_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' %}"
    "{{- '<|im_start|>user\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

SETTINGS = {
    "llama3_mt_sys": dict(model="llama3", fewshot_as_multiturn=True, system_instruction=SYS),
    "llama3_st_nosys": dict(model="llama3", fewshot_as_multiturn=False, system_instruction=None),
    "chatml_mt_sys": dict(model="chatml", fewshot_as_multiturn=True, system_instruction=SYS),
    "chatml_st_nosys": dict(model="chatml", fewshot_as_multiturn=False, system_instruction=None),
    "qwen3like_nothink": dict(model="qwen3like", fewshot_as_multiturn=True, system_instruction=SYS,
                              model_args=dict(chat_template_args={"enable_thinking": False},
                                              think_end_token="</think>")),
}
# (task name in the fixture, lm-eval task, num_fewshot passed to simple_evaluate: None = the YAML's)
RUNS = [
    ("mmlu_abstract_algebra", "mmlu_abstract_algebra", 5),
    ("arc_easy", "arc_easy", 0),
    ("arc_easy_5shot", "arc_easy", 5),
    ("gsm8k", "gsm8k", None),
    ("gsm8k_cot", "gsm8k_cot", None),
    # arc_easy with `gen_prefix: "The answer is"` (assistant prefill, continue_final_message), 2-shot
    ("arc_easy_gen_prefix", "arc_easy_gen_prefix", 2),
    # output_type loglikelihood (not multiple_choice): lambada_openai, 0-shot
    ("lambada_openai", "lambada_openai", 0),
    # output_type loglikelihood_rolling: a two-document task made here (text field = the whole target)
    ("rolling_demo", "rolling_demo", 0),
]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def write_jsonl(path: Path, rows) -> None:
    with path.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def mmlu_rows(path: Path, subject: str) -> list[dict]:
    with path.open(newline="", encoding="utf-8") as f:
        return [{"question": r[0], "subject": subject, "choices": r[1:5], "answer": "ABCD".index(r[5])}
                for r in csv.reader(f)]


def arc_rows(path: Path) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for i, line in enumerate(f):
            d = json.loads(line)
            q = d["query"]
            assert q.startswith("Question: ")
            labels = [chr(ord("A") + k) for k in range(len(d["choices"]))]
            rows.append({"id": f"arc_easy_test_{i}", "question": q[len("Question: "):],
                         "choices": {"text": d["choices"], "label": labels}, "answerKey": labels[d["gold"]]})
    return rows


def prepare_tasks(data: Path, work: Path, lm_tasks: Path) -> Path:
    td, dd = work / "tasks", work / "data"
    td.mkdir(parents=True, exist_ok=True)
    dd.mkdir(parents=True, exist_ok=True)
    s = "abstract_algebra"
    write_jsonl(dd / "mmlu_test.jsonl", mmlu_rows(data / "mmlu" / "test" / f"{s}_test.csv", s))
    write_jsonl(dd / "mmlu_dev.jsonl", mmlu_rows(data / "mmlu" / "dev" / f"{s}_dev.csv", s))
    (td / "mmlu_abstract_algebra.yaml").write_text(
        f"include: {lm_tasks / 'mmlu' / 'default' / 'mmlu_abstract_algebra.yaml'}\n"
        "dataset_path: json\ndataset_name: null\n"
        f"dataset_kwargs:\n  data_files:\n    test: {dd / 'mmlu_test.jsonl'}\n    dev: {dd / 'mmlu_dev.jsonl'}\n")
    write_jsonl(dd / "arc_easy_test.jsonl", arc_rows(data / "arc" / "arc_easy_test_mosaic.jsonl"))
    (td / "arc_easy.yaml").write_text(
        f"include: {lm_tasks / 'arc' / 'arc_easy.yaml'}\n"
        "dataset_path: json\ndataset_name: null\n"
        f"dataset_kwargs:\n  data_files:\n    test: {dd / 'arc_easy_test.jsonl'}\n"
        "training_split: null\nvalidation_split: null\n")
    (td / "arc_easy_gen_prefix.yaml").write_text(
        f"include: {td / 'arc_easy.yaml'}\ntask: arc_easy_gen_prefix\ngen_prefix: The answer is\n")
    (td / "lambada_openai.yaml").write_text(
        f"include: {lm_tasks / 'lambada' / 'lambada_openai.yaml'}\n"
        "dataset_path: json\ndataset_name: null\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data / 'lambada_openai' / 'lambada_openai.jsonl'}\n")
    write_jsonl(dd / "rolling.jsonl", [{"text": "The quick brown fox jumps over the lazy dog."},
                                      {"text": "Hello world.\nSecond line."}])
    (td / "rolling_demo.yaml").write_text(
        "task: rolling_demo\ndataset_path: json\ndataset_name: null\n"
        f"dataset_kwargs:\n  data_files:\n    test: {dd / 'rolling.jsonl'}\n"
        "test_split: test\noutput_type: loglikelihood_rolling\ndoc_to_text: \"\"\n"
        "doc_to_target: \"{{text}}\"\nmetric_list:\n  - metric: word_perplexity\n"
        "metadata:\n  version: 1.0\n")
    gsm = data / "gsm8k" / "test.jsonl"
    (td / "gsm8k.yaml").write_text(
        f"include: {lm_tasks / 'gsm8k' / 'gsm8k.yaml'}\n"
        "dataset_path: json\ndataset_name: null\n"
        f"dataset_kwargs:\n  data_files:\n    test: {gsm}\n"
        "training_split: null\nfewshot_split: test\n")
    (td / "gsm8k_cot.yaml").write_text(
        f"include: {lm_tasks / 'gsm8k' / 'gsm8k-cot.yaml'}\n"
        "dataset_path: json\ndataset_name: null\n"
        f"dataset_kwargs:\n  data_files:\n    test: {gsm}\n")
    return td


def tiny_model(dst: Path, vocab: int, bos: int | None, eos: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8192,
                      bos_token_id=bos, eos_token_id=eos, tie_word_embeddings=True)
    LlamaForCausalLM(cfg).save_pretrained(dst)


def prepare_models(data: Path, work: Path) -> dict:
    from transformers import AddedToken, AutoTokenizer
    out = {}
    tok_root = data / "tokenizers"
    # llama3
    d = work / "llama3"
    if not (d / "config.json").exists():
        d.mkdir(parents=True, exist_ok=True)
        with gzip.open(tok_root / "llama3" / "tokenizer.json.gz", "rb") as f:
            (d / "tokenizer.json").write_bytes(f.read())
        shutil.copy(tok_root / "llama3" / "tokenizer_config.json", d / "tokenizer_config.json")
        tiny_model(d, 128256, 128000, 128001)
    out["llama3"] = d
    # chatml on the mistral tokenizer
    d = work / "chatml"
    if not (d / "config.json").exists():
        d.mkdir(parents=True, exist_ok=True)
        shutil.copy(tok_root / "mistral7b_v0.1" / "tokenizer.json", d / "tokenizer.json")
        cfg = json.loads((tok_root / "mistral7b_v0.1" / "tokenizer_config.json").read_text())
        cfg["chat_template"] = (data / "chat_templates" / "chatml.jinja").read_text()
        (d / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1))
        tiny_model(d, 32000, 1, 2)
    out["chatml"] = d
    # qwen3-like on gpt2 + added tokens
    d = work / "qwen3like"
    if not (d / "config.json").exists():
        d.mkdir(parents=True, exist_ok=True)
        tok = AutoTokenizer.from_pretrained(str(tok_root / "gpt2"))
        tok.add_tokens([AddedToken("<|im_start|>", special=True, normalized=False),
                        AddedToken("<|im_end|>", special=True, normalized=False)], special_tokens=True)
        tok.add_tokens([AddedToken("<think>", special=False, normalized=False),
                        AddedToken("</think>", special=False, normalized=False)])
        tok.eos_token = "<|im_end|>"
        tok.bos_token = None
        tok.chat_template = QWEN3_LIKE_TEMPLATE
        tok.save_pretrained(str(d))
        tiny_model(d, 50304, None, tok.convert_tokens_to_ids("<|im_end|>"))
    out["qwen3like"] = d
    # llama3 with a list of named templates (named-template check)
    d = work / "named"
    if not (d / "config.json").exists():
        d.mkdir(parents=True, exist_ok=True)
        for f in ("tokenizer.json", "config.json", "model.safetensors", "generation_config.json"):
            if (work / "llama3" / f).exists():
                shutil.copy(work / "llama3" / f, d / f)
        cfg = json.loads((tok_root / "llama3" / "tokenizer_config.json").read_text())
        cfg["chat_template"] = [{"name": "default", "template": cfg["chat_template"]},
                                {"name": "chatml", "template": "NAMED_CHATML:" + (
                                    data / "chat_templates" / "chatml.jinja").read_text()}]
        (d / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1))
    out["named"] = d
    return out


def make_lm_class():
    from lm_eval.models.huggingface import HFLM

    class RecordingHFLM(HFLM):
        """HFLM with apply_chat_template recorded and the model-running methods answered by constants."""

        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.chat_log = {}  # rendered string -> (messages, add_generation_prompt)

        def apply_chat_template(self, chat_history, add_generation_prompt=True):
            msgs = json.loads(json.dumps(chat_history))
            out = super().apply_chat_template(chat_history, add_generation_prompt=add_generation_prompt)
            self.chat_log[out] = (msgs, add_generation_prompt)
            return out

        def loglikelihood(self, requests, disable_tqdm=False):
            return [(0.0, False) for _ in requests]

        def loglikelihood_rolling(self, requests, disable_tqdm=False):
            return [0.0 for _ in requests]

        def generate_until(self, requests, disable_tqdm=False):
            return ["" for _ in requests]

    return RecordingHFLM


def bos_info(lm, text: str, ids: list[int]) -> dict:
    tok = lm.tokenizer
    plain = tok.encode(text, add_special_tokens=False)
    bos_id = tok.bos_token_id
    return {"bos_in_text": bool(tok.bos_token) and text.startswith(tok.bos_token),
            "bos_added": ids != plain and bool(ids) and bos_id is not None and ids[0] == bos_id
            and ids[1:] == plain}


RAISING_SYSTEM_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}[{{ m['role'] }}]{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}")


def behaviour_checks(lms: dict, models: dict, LM) -> dict:
    """Small runs of lm-eval's own functions backing claims in docs/lm_eval_chat.md."""
    from lm_eval._cli.harness import HarnessCLI
    from lm_eval.api.instance import Instance
    from lm_eval.api.utils import maybe_delimit
    from lm_eval.config.evaluate_config import EvaluatorConfig
    from lm_eval.models.huggingface import HFLM
    from lm_eval.models.utils import handle_stop_sequences, postprocess_generated_text

    out = {}
    # 1. CLI: what --apply_chat_template does to fewshot_as_multiturn (EvaluatorConfig.from_cli)
    cli, rows = HarnessCLI(), []
    for extra in (["--apply_chat_template"], ["--apply_chat_template", "--num_fewshot", "0"],
                  ["--apply_chat_template", "chatml"], ["--apply_chat_template", "--fewshot_as_multiturn", "false"],
                  [], ["--fewshot_as_multiturn"]):
        ns = cli._parser.parse_args(["run", "--model", "hf", "--tasks", "arc_easy", *extra])
        try:
            c = EvaluatorConfig.from_cli(ns)
            rows.append({"argv": extra, "apply_chat_template": c.apply_chat_template,
                         "fewshot_as_multiturn": c.fewshot_as_multiturn})
        except ValueError as e:
            rows.append({"argv": extra, "error": str(e)})
    out["cli_fewshot_as_multiturn"] = rows
    # 2. system prompt = maybe_delimit(system_instruction, description, fewshot_delimiter)
    out["maybe_delimit"] = [
        {"args": a, "result": maybe_delimit(*a)} for a in (
            ("You are a careful assistant.", "The following are ...\n\n", "\n\n"),
            ("You are a careful assistant.\n", "The following are ...", "\n\n"),
            ("You are a careful assistant.", "", "\n\n"), (None, "desc", "\n\n"), ("sys", None, "\n\n"))]
    # 3. a template that raises on the system role: HFLM.apply_chat_template drops system messages and retries
    lm = next(v for (m, a), v in lms.items() if m == "llama3")
    saved = lm.tokenizer.chat_template
    lm.tokenizer.chat_template = RAISING_SYSTEM_TEMPLATE
    msgs = [{"role": "system", "content": "SYS\n\nDESCRIPTION"}, {"role": "user", "content": "Q1"},
            {"role": "assistant", "content": "A1"}, {"role": "user", "content": "Q2"}]
    try:
        out["template_error_fallback"] = {"template": RAISING_SYSTEM_TEMPLATE, "messages": msgs,
                                          "result": HFLM.apply_chat_template(lm, msgs, add_generation_prompt=True)}
    finally:
        lm.tokenizer.chat_template = saved
    # 4. stop sequences: the EOS string is appended to `until` (once)
    out["handle_stop_sequences"] = [
        {"until": u, "eos": e, "result": handle_stop_sequences(list(u) if isinstance(u, list) else u, eos=e)}
        for u, e in ((["Question:", "</s>", "<|im_end|>"], "<|end_of_text|>"), (["Q:", "</s>", "<|im_end|>"], "</s>"),
                     ("\n\n", "<|im_end|>"), (None, "</s>"))]
    # 5. think_end_token (string form): postprocess_generated_text(generation, stop=until, think_end_token)
    cases = [("<think>a\n\nb</think>\n\nThe answer is 4.\n\nQuestion: next", ["Question:", "<|im_end|>"], "</think>"),
             ("<think>x</think>y</think> final", ["Question:"], "</think>"),
             ("no think block here\n\nQuestion: z", ["Question:"], "</think>"),
             ("  \n leading whitespace, no think block", ["Question:"], "</think>"),
             ("  \n leading whitespace, no think_end_token", ["Question:"], None),
             ("<think>unfinished reasoning Question: q", ["Question:"], "</think>"),
             ("<think>r</think>  ans", ["Question:"], None)]
    out["think_end_token_postprocess"] = [
        {"generation": g, "stop": st, "think_end_token": t,
         "result": postprocess_generated_text(generation=g, stop=list(st), think_end_token=t)} for g, st, t in cases]
    # 6. enable_thinking=True refuses loglikelihood requests
    lmt = HFLM(pretrained=str(models["qwen3like"]), dtype="float32", device="cpu", batch_size=1,
               enable_thinking=True, think_end_token="</think>")
    try:
        lmt.loglikelihood([Instance("loglikelihood", {}, ("ctx", " cont"), 0, ("taskX", 0, 1))])
        out["enable_thinking_loglikelihood"] = "accepted"
    except ValueError as e:
        out["enable_thinking_loglikelihood"] = f"ValueError: {e}"
    out["enable_thinking_chat_template_args"] = lmt.chat_template_args
    # 7. BOS decision of tok_encode / tok_batch_encode on a few strings, per tokenizer
    rows = []
    for (mname, _), l in lms.items():
        bos = l.tokenizer.bos_token
        for text in ([f"{bos}Hi", "Hi", f" {bos}Hi"] if bos else ["Hi", "<|im_end|>Hi"]):
            rows.append({"model": mname, "text": text, "tok_encode": l.tok_encode(text),
                         "tok_batch_encode": l.tok_batch_encode([text])[0][0].tolist()})
    out["bos_decisions"] = rows
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--work", default="/tmp/chatref")
    ap.add_argument("--docs", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "tests" / "fixtures" / "lm_eval_chat_requests.json"))
    args = ap.parse_args()
    data, work = Path(args.data).resolve(), Path(args.work).resolve()
    if not data.is_dir():
        sys.exit(f"dump_lm_eval_chat_requests: no data folder {data} (give --data ../shared/data)")
    work.mkdir(parents=True, exist_ok=True)

    import logging
    import lm_eval
    import transformers
    from lm_eval.tasks import TaskManager
    logging.getLogger("lm_eval").setLevel(logging.ERROR)

    lm_tasks = Path(lm_eval.__file__).parent / "tasks"
    task_dir = prepare_tasks(data, work, lm_tasks)
    models = prepare_models(data, work)
    LM = make_lm_class()
    tm = TaskManager(include_path=str(task_dir), include_defaults=False)

    fixture = {
        "lm_eval_version": lm_eval.__version__ if hasattr(lm_eval, "__version__") else "",
        "transformers_version": transformers.__version__,
        "generated_by": "scripts/dump_lm_eval_chat_requests.py",
        "spec": "docs/lm_eval_chat.md",
        "docs_per_task": args.docs,
        "system_instruction": SYS,
        "qwen3_like_template": QWEN3_LIKE_TEMPLATE,
        "models": {},
        "settings": {},
    }
    try:
        from importlib.metadata import version
        fixture["lm_eval_version"] = version("lm_eval")
    except Exception:
        pass

    lms = {}
    for name, st in SETTINGS.items():
        mname = st["model"]
        margs = st.get("model_args", {})
        key = (mname, json.dumps(margs, sort_keys=True))
        if key not in lms:
            lms[key] = LM(pretrained=str(models[mname]), dtype="float32", device="cpu", batch_size=1, **margs)
        lm = lms[key]
        tok = lm.tokenizer
        fixture["models"][mname] = {
            "tokenizer": {"llama3": "shared/data/tokenizers/llama3",
                          "chatml": "shared/data/tokenizers/mistral7b_v0.1 + chat_templates/chatml.jinja",
                          "qwen3like": "shared/data/tokenizers/gpt2 + added <|im_start|> <|im_end|> <think> </think>"
                                       " (ids 50257..50260), bos None, eos <|im_end|>, qwen3_like_template"}[mname],
            "bos_token": tok.bos_token, "bos_token_id": tok.bos_token_id,
            "eos_token": tok.eos_token, "eos_token_id": tok.eos_token_id,
            "prefix_token_id": lm.prefix_token_id,
            "tokenizer_adds_bos_by_default": tok.encode("x") != tok.encode("x", add_special_tokens=False),
            "chat_template": tok.chat_template if mname != "qwen3like" else "(qwen3_like_template)",
            "eos_string_added_to_until": lm.tok_decode(lm.eot_token_id, skip_special_tokens=False),
        }
        out_setting = {
            "model": mname,
            "apply_chat_template": True,
            "fewshot_as_multiturn": st["fewshot_as_multiturn"],
            "system_instruction": st["system_instruction"],
            "model_args": margs,
            "tasks": {},
        }
        for fx_name, task, shots in RUNS:
            log(f"[{name}] {fx_name} num_fewshot={shots}")
            lm.chat_log.clear()
            res = lm_eval.simple_evaluate(
                model=lm, tasks=[task], num_fewshot=shots, limit=args.docs, log_samples=True, task_manager=tm,
                bootstrap_iters=0, apply_chat_template=True, fewshot_as_multiturn=st["fewshot_as_multiturn"],
                system_instruction=st["system_instruction"], verbosity="ERROR")
            docs = []
            for s in sorted(res["samples"][task], key=lambda s: s["doc_id"]):
                reqs = s["arguments"]
                if len(reqs[0]) == 1:  # loglikelihood_rolling: (text,), no context, no chat template
                    text = reqs[0][0]
                    ids = lm.tok_encode(text)
                    docs.append({"doc_id": s["doc_id"], "request_type": "loglikelihood_rolling",
                                 "requests": [{"idx": 0, "text": text, "text_ids_tok_encode": ids,
                                               **bos_info(lm, text, ids)}]})
                    continue
                ctx = reqs[0][0]
                msgs, agp = lm.chat_log.get(ctx, (None, None))
                entry = {"doc_id": s["doc_id"], "messages": msgs, "add_generation_prompt": agp, "context": ctx}
                rlist = []
                if isinstance(reqs[0][1], dict):  # generate_until
                    assert len(reqs) == 1
                    enc, _ = lm.tok_batch_encode([ctx])
                    ids = enc[0].tolist()
                    entry.update(request_type="generate_until", context_ids=ids, **bos_info(lm, ctx, ids))
                    rlist.append({"idx": 0, "gen_kwargs": reqs[0][1]})
                else:
                    entry["request_type"] = "loglikelihood"
                    first = None
                    for i, (c, cont) in enumerate(reqs):
                        assert c == ctx
                        c_ids, k_ids = lm._encode_pair(c, cont)
                        if first is None:
                            first = c_ids
                            entry.update(context_ids=c_ids, **bos_info(lm, c.rstrip(), c_ids))
                        assert c_ids == first
                        rlist.append({"idx": i, "continuation": cont, "continuation_ids": k_ids})
                entry["requests"] = rlist
                docs.append(entry)
            out_setting["tasks"][fx_name] = {"lm_eval_task": task, "num_fewshot": shots if shots is not None else
                                             res["configs"][task].get("num_fewshot"), "docs": docs}
        fixture["settings"][name] = out_setting

    fixture["behaviour_checks"] = behaviour_checks(lms, models, LM)

    # named-template check: apply_chat_template="chatml" on a tokenizer whose chat_template is a list
    lmn = LM(pretrained=str(models["named"]), dtype="float32", device="cpu", batch_size=1)
    res = lm_eval.simple_evaluate(model=lmn, tasks=["mmlu_abstract_algebra"], num_fewshot=0, limit=1,
                                  log_samples=True, task_manager=tm, bootstrap_iters=0,
                                  apply_chat_template="chatml", system_instruction=None, verbosity="ERROR")
    ctx = res["samples"]["mmlu_abstract_algebra"][0]["arguments"][0][0]
    fixture["named_template_check"] = {
        "apply_chat_template": "chatml",
        "tokenizer_chat_template_names": sorted(lmn.tokenizer.chat_template.keys()),
        "lm.chat_template('chatml') starts": lmn.chat_template("chatml")[:13],
        "context_starts": ctx[:60],
        "used_template": "chatml" if ctx.startswith("NAMED_CHATML") else "default",
    }

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(fixture, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    log(f"wrote {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
