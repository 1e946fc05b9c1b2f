"""lm-eval's tasks scored by gpueval outside lm-eval's model loop: the helper a gpueval run calls for
its `lm_eval:` tasks (issue 55, route 2). Two steps, each a process of its own:

  python -m gpueval_lm_eval.bridge requests TASK_ARGS --model DIR --out requests.jsonl
      lm-eval builds every request of the tasks (its prompts, few-shot samples, chat template) and
      they are written as `gpueval requests` lines, in lm-eval's order, each with its "key".
  python -m gpueval_lm_eval.bridge score TASK_ARGS --model DIR --responses results.jsonl --out scores.json
      lm-eval builds the same requests again (deterministically: the same seeds), takes each one's
      response from the results of those lines (`gpueval requests`'s, in the same order), and runs
      its own filters, metrics and aggregation; scores.json holds lm-eval's "results", "groups",
      "group_subtasks", "configs", "versions", "n-shot", "higher_is_better", "n-samples",
      "task_hashes" and "samples" ({task: the text of its samples file, as lm-eval's --log_samples
      writes it}).

TASK_ARGS are lm-eval's: --tasks a,b --include_path DIR --include_defaults BOOL --confirm_run_unsafe_code
--num_fewshot N --limit N
--apply_chat_template [NAME] --fewshot_as_multiturn BOOL --system_instruction TEXT --seed N
--fewshot_seed N; --model is the checkpoint (its tokenizer name and chat template; nothing runs on it
here), --binary the gpueval binary (chat templates render on it), --model_arg KEY=VALUE a further
model argument of the gpueval model (think_end_token, enable_thinking). Both steps call lm_eval.simple_evaluate with a model that records
(requests) or replays (score) instead of computing, so what lm-eval does with the responses is
exactly what it does with any model's.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .engine import GpuevalError
from .model import GpuevalLM, generation_line


def request_key(kind: str, req: Any, repeat: int) -> str:
    """Which request a line is: lm-eval's request type, task, document, index and repeat."""
    return f"{kind}|{req.task_name}|{req.doc_id}|{req.idx}|{repeat}"


class _Bridged(GpuevalLM):
    """GpuevalLM with its three request methods answered by `answer(kind, requests)` instead of the
    engine (the model is checked and chat templates render as GpuevalLM's)."""

    def answer(self, kind: str, requests: list[Any]) -> list[Any]:
        raise NotImplementedError

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        return self.answer("loglikelihood", requests)

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        return self.answer("loglikelihood_rolling", requests)

    def generate_until(self, requests, disable_tqdm: bool = False):
        return self.answer("generate_until", requests)


def request_lines(kind: str, requests: list[Any], max_gen_toks: int, eos: str | None) -> list[dict[str, Any]]:
    """`gpueval requests` lines for lm-eval's Instances, as GpuevalLM sends them, each with its key."""
    lines, seen = [], {}
    for r in requests:
        base = request_key(kind, r, 0)
        repeat = seen.get(base, 0)
        seen[base] = repeat + 1
        where = {"task": str(r.task_name), "doc_id": int(r.doc_id)}
        if kind == "loglikelihood":
            line = {"type": kind, "context": r.args[0], "continuation": r.args[1], **where}
        elif kind == "loglikelihood_rolling":
            line = {"type": kind, "context": r.args[0], **where}
        else:
            line = {**generation_line(r.args[0], r.args[1] if len(r.args) > 1 else {}, max_gen_toks, eos), **where}
        line["key"] = request_key(kind, r, repeat)
        lines.append(line)
    return lines


class RecordingLM(_Bridged):
    """Records every request as a line; answers with placeholders (their scores are thrown away)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lines: list[dict[str, Any]] = []

    def answer(self, kind, requests):
        self.lines += request_lines(kind, requests, self.max_gen_toks, self.info.get("eos_token"))
        return [(0.0, False) if kind == "loglikelihood" else 0.0 if kind == "loglikelihood_rolling" else ""
                for _ in requests]


class ReplayLM(_Bridged):
    """Answers every request from `responses`: {key: result line of `gpueval requests`}."""

    def __init__(self, responses: dict[str, dict[str, Any]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.responses = responses

    def answer(self, kind, requests):
        out = []
        for line in request_lines(kind, requests, self.max_gen_toks, self.info.get("eos_token")):
            res = self.responses.get(line["key"])
            if res is None:
                raise GpuevalError(f"gpueval bridge: no response for {line['key']} (were the requests made with "
                                   "the same task arguments?)")
            if kind == "loglikelihood":
                out.append((float(res["logprob"]), bool(res["is_greedy"])))
            elif kind == "loglikelihood_rolling":
                out.append(float(res["logprob"]))
            else:
                text = res["text"]
                if self.think_end_token:
                    text = text.split(self.think_end_token)[-1].lstrip()
                out.append(text)
        return out


def _task_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--include_path")
    ap.add_argument("--include_defaults", type=lambda s: s.lower() in ("true", "1", "yes"), default=True,
                    help="also lm-eval's own tasks (default true; false: only --include_path's)")
    ap.add_argument("--confirm_run_unsafe_code", action="store_true",
                    help="let tasks that run the model's code (humaneval, mbpp) run it, as lm-eval's flag")
    ap.add_argument("--num_fewshot", type=int)
    ap.add_argument("--limit", type=float)
    ap.add_argument("--apply_chat_template", nargs="?", const=True, default=False)
    ap.add_argument("--fewshot_as_multiturn", type=lambda s: s.lower() in ("true", "1", "yes"), default=None)
    ap.add_argument("--system_instruction")
    ap.add_argument("--seed", type=int, default=0, help="lm-eval's random seed (numpy and torch seeds: 1234)")
    ap.add_argument("--fewshot_seed", type=int, default=1234, help="lm-eval's fewshot_random_seed")
    ap.add_argument("--model_arg", action="append", default=[], metavar="KEY=VALUE",
                    help="a model argument of the gpueval model (think_end_token, enable_thinking)")
    ap.add_argument("--model", required=True, help="the checkpoint")
    ap.add_argument("--binary", help="the gpueval binary")
    ap.add_argument("--out", required=True)


def _evaluate(args, lm, log_samples: bool) -> dict:
    import lm_eval
    from lm_eval.tasks import TaskManager

    from . import task_index, templates

    task_index.install()  # lm-eval's task index from the cache while its YAML files are unchanged
    templates.install()  # each prompt template compiled once, not once per document
    tm = TaskManager(include_path=args.include_path, include_defaults=args.include_defaults)
    chat = args.apply_chat_template
    multiturn = args.fewshot_as_multiturn if args.fewshot_as_multiturn is not None else bool(chat)
    return lm_eval.simple_evaluate(
        model=lm, tasks=args.tasks.split(","), num_fewshot=args.num_fewshot, limit=args.limit,
        task_manager=tm, log_samples=log_samples, apply_chat_template=chat, fewshot_as_multiturn=multiturn,
        system_instruction=args.system_instruction, random_seed=args.seed, fewshot_random_seed=args.fewshot_seed,
        confirm_run_unsafe_code=args.confirm_run_unsafe_code)


def samples_file(samples: list[dict]) -> str:
    """A task's samples file as lm-eval's EvaluationTracker.save_results_samples writes it."""
    from lm_eval.utils import handle_non_serializable, sanitize_list

    out = []
    for sample in samples:
        sample = dict(sample)
        sample["arguments"] = {f"gen_args_{i}": {f"arg_{j}": a for j, a in enumerate(arg)}
                               for i, arg in enumerate(sample["arguments"])}
        sample["resps"] = sanitize_list(sample["resps"])
        sample["filtered_resps"] = sanitize_list(sample["filtered_resps"])
        sample["target"] = str(sample["target"])
        out.append(json.dumps(sample, default=handle_non_serializable, ensure_ascii=False) + "\n")
    return "".join(out)


def task_hash(samples: list[dict]) -> str:
    """lm-eval's task hash (EvaluationTracker.save_results_aggregated)."""
    from lm_eval.utils import hash_string

    return hash_string("".join(s["doc_hash"] + s["prompt_hash"] + s["target_hash"] for s in samples))


def model_arguments(pairs: list[str]) -> dict[str, Any]:
    """--model_arg KEY=VALUE pairs as lm-eval's model_args read them (simple_parse_args_string)."""
    from lm_eval.utils import simple_parse_args_string

    for pair in pairs:
        if "=" not in pair:
            raise GpuevalError(f"gpueval bridge: --model_arg {pair!r} is not KEY=VALUE")
    return simple_parse_args_string(",".join(pairs)) if pairs else {}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpueval_lm_eval.bridge", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="step", required=True)
    _task_args(sub.add_parser("requests", help="write the tasks' requests as gpueval requests lines"))
    score = sub.add_parser("score", help="score gpueval's results with lm-eval's metrics")
    _task_args(score)
    score.add_argument("--requests", required=True, help="the lines the requests step wrote")
    score.add_argument("--responses", required=True, help="gpueval requests' results for those lines, in order")
    args = ap.parse_args(argv)
    try:
        common = dict(pretrained=args.model, binary=args.binary, journal_dir="/nonexistent-never-used",
                      **model_arguments(args.model_arg))
        if args.step == "requests":
            lm = RecordingLM(**common)
            _evaluate(args, lm, log_samples=False)
            with open(args.out, "w", encoding="utf-8") as f:
                for line in lm.lines:
                    f.write(json.dumps(line, ensure_ascii=False) + "\n")
            return 0
        with open(args.requests, encoding="utf-8") as f:
            keys = [json.loads(l)["key"] for l in f if l.strip()]
        with open(args.responses, encoding="utf-8") as f:
            results = [json.loads(l) for l in f if l.strip()]
        if len(keys) != len(results):
            raise GpuevalError(f"gpueval bridge: {len(results)} responses for {len(keys)} requests")
        res = _evaluate(args, ReplayLM(dict(zip(keys, results)), **common), log_samples=True)
        keep = {k: res.get(k) for k in ("results", "groups", "group_subtasks", "configs", "versions", "n-shot",
                                        "higher_is_better", "n-samples")}
        samples = res.get("samples") or {}
        keep["task_hashes"] = {t: task_hash(s) for t, s in samples.items()}
        keep["samples"] = {t: samples_file(s) for t, s in samples.items()}
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(keep, f, default=str, ensure_ascii=False)
        return 0
    except GpuevalError as e:
        print(str(e), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
