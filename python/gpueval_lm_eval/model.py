"""GpuevalLM: lm-eval's model `gpueval`. lm-eval keeps the tasks, prompts, filters and metrics;
each of loglikelihood, loglikelihood_rolling and generate_until hands its whole request list to
the gpueval binary (`gpueval requests`, engine.py), which tokenizes as lm-eval's `hf` model does
(`_encode_pair`, BOS, left truncation at max_length), plans, shares prefixes and runs one worker per
device, journaling every result. Chat prompts (--apply_chat_template) render through gpueval's
template engine, as transformers' apply_chat_template does.

Model arguments (--model_args, or keywords): see ARGUMENTS; any other key is an error before any
compute, as are a missing binary and a model gpueval cannot run.
"""

from __future__ import annotations

import copy
import logging
import os
from typing import Any

import lm_eval.models  # noqa: F401  lm-eval's own models first: its registry imports them only while empty
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from .engine import ChatTemplates, Engine, GpuevalError, default_journal_root, find_binary

log = logging.getLogger("gpueval_lm_eval")

# Every model argument, with what it does; lm-eval's own (batch_size, max_batch_size, device) included.
ARGUMENTS = {
    "pretrained": "the checkpoint directory (required)",
    "gpus": "gpueval's devices: 0-3, 0,2, all, cpu, cpu:N (default: from device, else cpu)",
    "device": "lm-eval's --device: cpu, cuda (all GPUs) or cuda:N, when gpus is not given",
    "dtype": "auto, float32, bfloat16, float16 (half, float also)",
    "batch_size": "auto (a token budget probed per device) or N: the most sequences per batch",
    "max_batch_size": "accepted from lm-eval's command line; gpueval caps batches by tokens, not by this",
    "batch_tokens": "the token budget per batch, instead of probing",
    "max_length": "the context: longer inputs are left-truncated (default: the model's)",
    "add_bos_token": "True/False: start contexts with BOS (default: as the tokenizer does, as hf)",
    "max_gen_toks": "generate_until's default most new tokens (256, as hf)",
    "think_end_token": "a generation keeps only what follows its last occurrence (text), as hf",
    "enable_thinking": "passed to the chat template (requires think_end_token when true), as hf",
    "chat_template_args": "a dict of keywords for the chat template (from Python), as hf",
    "trust_remote_code": "accepted: gpueval runs no model code, only the families it implements",
    "binary": "the gpueval binary (default: $GPUEVAL_BIN, else gpueval on PATH)",
    "journal_dir": "where each request list's journal goes (default: $GPUEVAL_JOURNAL_ROOT, else "
    "~/.cache/gpueval/lm_eval)",
    "seed": "gpueval's run seed for sampled generations (default 1234)",
    "prefix_reuse": "True/False: compute a prefix shared by many requests once (default True)",
    "cpu_threads": "threads of each CPU worker (default 1)",
    "max_memory": "memory per CPU worker for batch probing: 6GiB, or a share such as 0.5",
}

_DTYPES = {"auto": "auto", "float32": "float32", "float": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
           "float16": "float16", "half": "float16", "fp16": "float16"}


def _flag_bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise GpuevalError(f"gpueval: model_args {key}={value!r} must be True or False")


def gpus_of(gpus: Any, device: Any) -> str:
    """gpueval's device spec from gpus= (wins) or lm-eval's device."""
    if gpus is not None:
        return str(gpus)
    if device is None:
        return "cpu"
    d = str(device)
    if d == "cpu" or d.startswith("cpu:"):
        return d
    if d == "cuda":
        return "all"
    if d.startswith("cuda:") and d[5:].isdigit():
        return d[5:]
    raise GpuevalError(f"gpueval: device {d!r} is not supported (cpu, cuda, cuda:N; or gpus=0-3 in --model_args)")


def engine_flags(args: dict[str, Any]) -> list[str]:
    """`gpueval requests` flags from the model arguments (checked here, and again by the binary)."""
    flags = ["--gpus", gpus_of(args.get("gpus"), args.get("device"))]
    dtype = str(args.get("dtype", "auto"))
    if dtype not in _DTYPES:
        raise GpuevalError(f"gpueval: model_args dtype={dtype} is not supported ({', '.join(_DTYPES)})")
    flags += ["--dtype", _DTYPES[dtype]]
    batch = args.get("batch_size")
    if batch is not None:
        b = str(batch)
        if b == "auto" or b.startswith("auto:"):
            flags += ["--batch-size", "auto"]
        elif b.isdigit() and int(b) > 0:
            flags += ["--batch-size", b]
        else:
            raise GpuevalError(f"gpueval: batch_size {b!r} must be auto, auto:N or a positive integer")
    for key, flag in (("batch_tokens", "--batch-tokens"), ("max_length", "--max-length"),
                      ("cpu_threads", "--cpu-threads"), ("seed", "--seed")):
        if args.get(key) is not None:
            value = str(args[key])
            if not value.isdigit():
                raise GpuevalError(f"gpueval: model_args {key}={value} must be a non-negative integer")
            flags += [flag, value]
    if args.get("add_bos_token") is not None:
        flags += ["--add-bos", "true" if _flag_bool(args["add_bos_token"], "add_bos_token") else "false"]
    if args.get("prefix_reuse") is not None:
        flags += ["--prefix-reuse", "on" if _flag_bool(args["prefix_reuse"], "prefix_reuse") else "off"]
    if args.get("max_memory") is not None:
        flags += ["--max-memory", str(args["max_memory"])]
    return flags


def generation_line(context: str, gen_kwargs: dict[str, Any], default_max_gen_toks: int,
                    eos_token: str | None) -> dict[str, Any]:
    """A generate_until request line from lm-eval's (context, gen_kwargs), read as lm-eval 0.4.13's hf
    model reads them (normalize_gen_kwargs, handle_stop_sequences): until (a string or a list) plus
    the EOS text; the most new tokens from max_gen_toks, else max_new_tokens, max_tokens,
    max_completion_tokens, else the model's default; sampling when do_sample is true, or unset with
    a temperature above 0, with temperature, top_k and top_p (unset: the checkpoint's
    generation_config.json), else greedy. Any other key is an error: gpueval does not guess what it
    would do."""
    kwargs = copy.deepcopy(gen_kwargs) if gen_kwargs else {}
    until = kwargs.pop("until", None)
    if until is None:
        until = []
    elif isinstance(until, str):
        until = [until]
    elif not isinstance(until, list) or not all(isinstance(u, str) for u in until):
        raise GpuevalError(f"gpueval: generation_kwargs until must be a string or a list of strings, got {until!r}")
    until = list(until)
    if eos_token and eos_token not in until:
        until.append(eos_token)  # as hf: the EOS text stops too
    max_gen_toks = default_max_gen_toks
    for alias in ("max_completion_tokens", "max_tokens", "max_new_tokens", "max_gen_toks"):  # the last wins
        value = kwargs.pop(alias, None)
        if value is not None:
            max_gen_toks = value
    do_sample = kwargs.pop("do_sample", None)
    temperature = kwargs.pop("temperature", None)
    top_k = kwargs.pop("top_k", None)
    top_p = kwargs.pop("top_p", None)
    if kwargs:
        raise GpuevalError(
            f"gpueval: generation_kwargs {', '.join(sorted(kwargs))} not supported "
            "(supported: until, max_gen_toks and its aliases, do_sample, temperature, top_k, top_p)"
        )
    line: dict[str, Any] = {"type": "generate_until", "context": context, "until": until,
                            "max_gen_toks": int(max_gen_toks)}
    sample = do_sample is True or (do_sample is None and temperature is not None and float(temperature) > 0)
    if sample:
        if temperature is not None and float(temperature) <= 0:
            raise GpuevalError(f"gpueval: do_sample with temperature {temperature}: give a positive temperature")
        line["temperature"] = float(temperature) if temperature is not None else -1.0
        line["top_k"] = int(top_k) if top_k is not None else -1
        line["top_p"] = float(top_p) if top_p is not None else -1.0
    return line


def continue_final_message(rendered: str, messages: list[dict[str, Any]]) -> str:
    """transformers' continue_final_message: the rendered chat cut right after the last message's
    content (what lm-eval's hf model asks for when add_generation_prompt is false)."""
    final = messages[-1]["content"]
    if isinstance(final, (list, tuple)):
        texts = [block["text"] for block in final if isinstance(block, dict) and "text" in block]
        if not texts:
            raise GpuevalError("gpueval: continue_final_message: the final message has no text block")
        final = texts[-1]
    if final.strip() not in rendered:
        raise GpuevalError("gpueval: continue_final_message: the final message does not appear in the rendered chat")
    at = rendered.rindex(final.strip())
    if rendered[at:at + len(final.lstrip())] == final:
        return rendered[:at + len(final.lstrip())]
    return rendered[:at + len(final.strip())]


@register_model("gpueval")
class GpuevalLM(LM):
    """lm-eval's model `gpueval`: lm_eval --model gpueval --model_args pretrained=DIR,gpus=0-3."""

    def __init__(self, pretrained: str | None = None, **kwargs: Any) -> None:
        super().__init__()
        unknown = sorted(k for k in kwargs if k not in ARGUMENTS)
        if unknown:
            raise GpuevalError(
                f"gpueval: model_args {', '.join(unknown)} not supported (supported: {', '.join(ARGUMENTS)})"
            )
        if not pretrained:
            raise GpuevalError("gpueval: model_args pretrained=DIR is required")
        if not os.path.isfile(os.path.join(str(pretrained), "config.json")):
            raise GpuevalError(f"gpueval: {pretrained}: not a checkpoint directory (no config.json)")
        if kwargs.get("max_batch_size") is not None and str(kwargs.get("batch_size", "")).startswith("auto"):
            log.warning("gpueval: max_batch_size %s: batches are capped by a token budget probed per device instead",
                        kwargs["max_batch_size"])
        self.pretrained = str(pretrained)
        self.binary = find_binary(kwargs.get("binary"))
        self.max_gen_toks = int(kwargs.get("max_gen_toks", 256))
        self.think_end_token = kwargs.get("think_end_token")
        if self.think_end_token is not None and not isinstance(self.think_end_token, str):
            raise GpuevalError("gpueval: think_end_token must be the token's text (a token id is not supported)")
        enable_thinking = kwargs.get("enable_thinking")
        self.chat_template_args = dict(kwargs.get("chat_template_args") or {})
        if enable_thinking is not None:
            self.chat_template_args["enable_thinking"] = _flag_bool(enable_thinking, "enable_thinking")
            if self.chat_template_args["enable_thinking"] and self.think_end_token is None:
                raise GpuevalError("gpueval: enable_thinking=True needs think_end_token, as lm-eval's hf model")
        self.engine = Engine(self.binary, self.pretrained, engine_flags(kwargs),
                             str(kwargs.get("journal_dir") or default_journal_root()))
        # The model, its family, devices and tokenizer checked now, before lm-eval builds a request.
        self.info = self.engine.describe()
        self._chat: dict[str, ChatTemplates] = {}

    # --- what lm-eval reads of a model ---------------------------------------------------------

    @property
    def tokenizer_name(self) -> str:
        return self.pretrained.replace("/", "__")

    @property
    def max_length(self) -> int:
        return int(self.info["max_length"])

    def get_model_info(self) -> dict[str, Any]:
        return {"model_type": self.info["model_type"], "gpueval_binary": self.binary}

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        if chat_template is False or chat_template is None:
            return None
        templates = self.info.get("chat_templates", {})
        name = chat_template if isinstance(chat_template, str) else "default"
        if name not in templates:
            raise GpuevalError(f"gpueval: {self.pretrained} has no chat template {name!r} "
                               f"(it has: {', '.join(templates) or 'none'})")
        self._chat_name = None if name == "default" else name
        return templates[name]

    def apply_chat_template(self, chat_history: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        name = getattr(self, "_chat_name", None) or ""
        if name not in self._chat:
            self._chat[name] = ChatTemplates(self.binary, self.pretrained, name or None)
        renderer = self._chat[name]
        reply = renderer.render(chat_history, add_generation_prompt, **self.chat_template_args)
        if "error" in reply:  # as hf: once more without the system turn
            log.warning("Failed to apply chat template. removing the system role in chat history.")
            chat_history = [m for m in chat_history if m.get("role") != "system"]
            reply = renderer.render(chat_history, add_generation_prompt, **self.chat_template_args)
            if "error" in reply:
                raise GpuevalError(f"gpueval: chat template of {self.pretrained}: {reply['error']}")
        text = reply["text"]
        return text if add_generation_prompt else continue_final_message(text, chat_history)

    # --- requests -------------------------------------------------------------------------------

    @staticmethod
    def _where(req: Any) -> dict[str, Any]:
        where: dict[str, Any] = {}
        if getattr(req, "task_name", None):
            where["task"] = str(req.task_name)
        if isinstance(getattr(req, "doc_id", None), int) and req.doc_id >= 0:
            where["doc_id"] = req.doc_id
        return where

    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        lines = [{"type": "loglikelihood", "context": r.args[0], "continuation": r.args[1], **self._where(r)}
                 for r in requests]
        out = []
        for r, res in zip(requests, self.engine.run(lines)):
            answer = (float(res["logprob"]), bool(res["is_greedy"]))
            self.cache_hook.add_partial("loglikelihood", r.args, answer)
            out.append(answer)
        return out

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        lines = [{"type": "loglikelihood_rolling", "context": r.args[0], **self._where(r)} for r in requests]
        out = []
        for r, res in zip(requests, self.engine.run(lines)):
            self.cache_hook.add_partial("loglikelihood_rolling", r.args, float(res["logprob"]))
            out.append(float(res["logprob"]))
        return out

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        eos = self.info.get("eos_token")
        lines = [{**generation_line(r.args[0], r.args[1] if len(r.args) > 1 else {}, self.max_gen_toks, eos),
                  **self._where(r)} for r in requests]
        out = []
        for r, res in zip(requests, self.engine.run(lines)):
            text = res["text"]
            if self.think_end_token:  # as hf's postprocess_generated_text, after the stops
                text = text.split(self.think_end_token)[-1].lstrip()
            self.cache_hook.add_partial("generate_until", r.args, text)
            out.append(text)
        return out
