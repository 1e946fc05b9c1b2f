#!/usr/bin/env python3
"""Writes tests/fixtures/lm_eval_prompts.json: the requests lm-evaluation-harness itself builds
(Instance.arguments) for the first documents of the pretraining-suite tasks and of the code tasks
humaneval and mbpp, read from the shared data with lm-eval's own task YAMLs (included, with
`dataset_path: json`), plus a digest of every request of each task's whole evaluated split. The
C++ test PretrainingTasksTest pins gpueval's requests against this file. No model is loaded and no
generated program is run (only requests are built).

Output (JSON, UTF-8):
  "lm_eval_version", "docs" (--docs);
  "digests": {task: {"requests": N, "sha256": HEX}} for every task below, over ALL documents of the
    task's evaluated split (build_all_requests(limit=None)): N = the number of Instances, HEX =
    sha256 of the concatenation, over the Instances sorted by (doc_id, idx), of the UTF-8 bytes of
        context + "\\x00" + second + "\\x00"
    where context = arguments[0] and second = arguments[1] (the continuation string) for
    loglikelihood requests, or "\\x1f".join(arguments[1]["until"]) for generate_until requests
    (no other request type occurs here; the script refuses one);
  "tasks": {task: [{"doc_id", "idx", "arguments"}, ...]} for the first --docs documents, the
    generation kwargs reduced to {"until": [...]}.

Data (under --data): verify_lm_eval.SUITE's files for the suite tasks; humaneval reads
humaneval/HumanEval.jsonl.gz as is (datasets' json loader reads the gzip; its 164 rows are HF
openai/openai_humaneval's "test" split); mbpp reads a temporary jsonl holding the lines of
mbpp/mbpp.jsonl with task_id 11..510, in order (= the "test" split, 500 rows, of HF
google-research-datasets/mbpp "full", which lm-eval's mbpp.yaml reads); mbpp's 3 few-shot
examples come from lm-eval's utils.list_fewshot_samples (fewshot_config.samples), not from the data.

Why the `evaluate` stub: lm-eval's humaneval/utils.py and mbpp/utils.py (loaded through the YAMLs'
`!function` entries) call evaluate.load("code_eval") at import time, and mbpp's also runs a
compute() on it; offline the load fails (the metric script comes from the Hub), and running it
would need HF_ALLOW_CODE_EVAL=1. Building requests needs neither, so before lm-eval imports
those files the script installs sys.modules["evaluate"] = a stub whose load("code_eval") returns
an object with compute(references, predictions, k) -> ({"pass@<k>": 0.0, ...}, {}) and that runs
nothing. The stub only serves this dump; HF_ALLOW_CODE_EVAL is not set.

Usage (a venv with lm-eval 0.4.13, e.g. scripts/verify_lm_eval.sh's):
  ../venv-lmeval/bin/python scripts/dump_lm_eval_prompts.py [--data ../shared/data] [--docs 3]
      [--all-requests FILE]
--all-requests FILE also writes every request of the code tasks, {"lm_eval_version", "tasks":
{task: [{"doc_id", "idx", "context", "until"}, ...]}}, for comparisons beyond the digest.
"""
import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
import types
from pathlib import Path

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent

# task -> (lm-eval's YAML under lm_eval/tasks, the split gpueval's file stands for, file under the data
# root): verify_lm_eval.py's table, so the two scripts compare the same tasks.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from verify_lm_eval import SUITE  # noqa: E402

# The code tasks, same layout. Kept out of SUITE: verify_lm_eval.py runs every SUITE task end to end
# by default (the model, gpueval, the metrics), which for these would mean executing generated code.
CODE_TASKS = {
    "humaneval": ("humaneval/humaneval.yaml", "test", "humaneval/HumanEval.jsonl.gz"),
    "mbpp": ("mbpp/mbpp.yaml", "test", "mbpp/mbpp.jsonl"),
}
TASKS = {**SUITE, **CODE_TASKS}
MBPP_TEST_IDS = range(11, 511)  # the upstream test split; HF "full" test = these 500 rows in order


def install_evaluate_stub() -> None:
    """See the module docstring: lm-eval's code-task utils load code_eval at import time."""

    class CodeEvalStub:
        def compute(self, references=None, predictions=None, k=None, **kwargs):
            ks = [k] if isinstance(k, int) else list(k or [1])
            return {f"pass@{i}": 0.0 for i in ks}, {}

    def load(name, *args, **kwargs):
        if name != "code_eval":
            raise RuntimeError(f"evaluate stub (dump_lm_eval_prompts.py): load({name!r}) is not stubbed")
        return CodeEvalStub()

    stub = types.ModuleType("evaluate")
    stub.load = load
    sys.modules["evaluate"] = stub


def mbpp_test_file(src: Path, tmp: Path) -> Path:
    lines = src.read_text(encoding="utf-8").splitlines(keepends=True)
    keep = [ln for ln in lines if json.loads(ln)["task_id"] in MBPP_TEST_IDS]
    if [json.loads(ln)["task_id"] for ln in keep] != list(MBPP_TEST_IDS):
        raise SystemExit(f"{src}: task_ids 11..510 not all present in order")
    out = tmp / "mbpp_test.jsonl"
    out.write_text("".join(keep), encoding="utf-8")
    return out


def second_argument(inst) -> str:
    if inst.request_type == "loglikelihood":
        return inst.arguments[1]
    if inst.request_type == "generate_until":
        return "\x1f".join(inst.arguments[1]["until"])
    raise SystemExit(f"{inst.task_name}: request type {inst.request_type} has no digest definition")


def sorted_instances(task):
    return sorted(task.instances, key=lambda i: (i.doc_id, i.idx))


def rows_of(instances):
    rows = []
    for inst in instances:
        arguments = [a if not isinstance(a, dict) else {"until": a.get("until")} for a in inst.arguments]
        rows.append({"doc_id": inst.doc_id, "idx": inst.idx, "arguments": arguments})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--docs", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "tests" / "fixtures" / "lm_eval_prompts.json"))
    ap.add_argument("--all-requests", default=None, help="also write every request of the code tasks here")
    args = ap.parse_args()
    install_evaluate_stub()
    import lm_eval
    from lm_eval.tasks import TaskManager

    builtin = Path(lm_eval.__file__).parent / "tasks"
    with tempfile.TemporaryDirectory() as tmp:
        for name, (yaml, split, file) in TASKS.items():
            path = Path(args.data) / file
            if not path.exists():
                print(f"{path}: no such file", file=sys.stderr)
                return 1
            if name == "mbpp":
                path = mbpp_test_file(path, Path(tmp))
            # Only the evaluated split exists locally: no training split to build a sampler from.
            extra = "validation_split: null\n" if split == "test" else ""
            (Path(tmp) / f"{name}.yaml").write_text(
                f"include: {builtin / yaml}\ntask: {name}\ndataset_path: json\ndataset_name: null\n"
                f"dataset_kwargs:\n  data_files:\n    {split}: {path}\ntraining_split: null\n{extra}")
        tasks = TaskManager(include_path=tmp, include_defaults=False).load_task_or_group(list(TASKS))
        out = {"lm_eval_version": lm_eval.__version__, "docs": args.docs, "digests": {}, "tasks": {}}
        every = {"lm_eval_version": lm_eval.__version__, "tasks": {}}
        for name in TASKS:
            task = tasks[name]
            task.build_all_requests(limit=args.docs, rank=0, world_size=1)
            out["tasks"][name] = rows_of(sorted_instances(task))
            start = time.monotonic()
            task.build_all_requests(limit=None, rank=0, world_size=1)
            instances = sorted_instances(task)
            # The first documents of the whole split are the rows above (no sampler state in between).
            first = rows_of([i for i in instances if i.doc_id < args.docs])
            if first != out["tasks"][name]:
                raise SystemExit(f"{name}: the full build's first {args.docs} documents differ from the limited build")
            h = hashlib.sha256()
            for inst in instances:
                h.update((inst.arguments[0] + "\x00" + second_argument(inst) + "\x00").encode("utf-8"))
            out["digests"][name] = {"requests": len(instances), "sha256": h.hexdigest()}
            print(f"{name}: {len(instances)} requests over {len({i.doc_id for i in instances})} documents, "
                  f"{time.monotonic() - start:.1f} s", file=sys.stderr)
            if name in CODE_TASKS:
                every["tasks"][name] = [{"doc_id": i.doc_id, "idx": i.idx, "context": i.arguments[0],
                                         "until": i.arguments[1]["until"]} for i in instances]
    Path(args.out).write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    if args.all_requests:
        Path(args.all_requests).write_text(json.dumps(every, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.all_requests}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
