#!/usr/bin/env python3
"""Writes tests/fixtures/lm_eval_prompts.json: the requests lm-evaluation-harness itself builds
(Instance.arguments) for the first documents of the pretraining-suite tasks, read from the shared
data with lm-eval's own task YAMLs (included, with `dataset_path: json`). The C++ test
PretrainingTasksTest pins gpueval's requests against this file. No model is loaded.

Usage (the venv of scripts/verify_lm_eval.sh, which has lm-eval 0.4.13):
  ../venv-lmeval/bin/python scripts/dump_lm_eval_prompts.py [--data ../shared/data] [--docs 3]
"""
import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent

# task -> (lm-eval's YAML under lm_eval/tasks, the split gpueval's file stands for, file under the data
# root): verify_lm_eval.py's table, so the two scripts compare the same tasks.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from verify_lm_eval import SUITE as TASKS  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--docs", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "tests" / "fixtures" / "lm_eval_prompts.json"))
    args = ap.parse_args()
    import lm_eval
    from lm_eval.tasks import TaskManager

    builtin = Path(lm_eval.__file__).parent / "tasks"
    with tempfile.TemporaryDirectory() as tmp:
        for name, (yaml, split, file) in TASKS.items():
            path = Path(args.data) / file
            if not path.exists():
                print(f"{path}: no such file", file=sys.stderr)
                return 1
            # Only the evaluated split exists locally: no training split to build a sampler from.
            extra = "validation_split: null\n" if split == "test" else ""
            (Path(tmp) / f"{name}.yaml").write_text(
                f"include: {builtin / yaml}\ntask: {name}\ndataset_path: json\ndataset_name: null\n"
                f"dataset_kwargs:\n  data_files:\n    {split}: {path}\ntraining_split: null\n{extra}")
        tasks = TaskManager(include_path=tmp, include_defaults=False).load_task_or_group(list(TASKS))
        out = {"lm_eval_version": lm_eval.__version__, "docs": args.docs, "tasks": {}}
        for name in TASKS:
            task = tasks[name]
            task.build_all_requests(limit=args.docs, rank=0, world_size=1)
            rows = []
            for inst in sorted(task.instances, key=lambda i: (i.doc_id, i.idx)):
                arguments = [a if not isinstance(a, dict) else {"until": a.get("until")} for a in inst.arguments]
                rows.append({"doc_id": inst.doc_id, "idx": inst.idx, "arguments": arguments})
            out["tasks"][name] = rows
    Path(args.out).write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
