#!/usr/bin/env python3
"""Writes one split of a Hugging Face dataset as JSONL in the layout gpueval's tasks read.

One JSON object per line, the dataset's own columns (nested features stay nested, text is
written as UTF-8, not \\u escapes), rows in the dataset's order. Needs the `datasets` library
(the lm-eval venv has it). It reads what `datasets` finds: the Hugging Face cache (set
HF_DATASETS_OFFLINE=1 / HF_HUB_OFFLINE=1, or pass --offline, to never touch the network), a
folder written by `Dataset.save_to_disk`, or a local .json/.jsonl/.csv/.parquet file.

    # a built-in task: dataset, config, split and file name from the table below
    scripts/export_hf_dataset.py --task piqa --out DATADIR/piqa
    build/gpueval run ... --data piqa=DATADIR/piqa

    # any dataset: DATASET [CONFIG] --split SPLIT --out FILE.jsonl (or a folder)
    scripts/export_hf_dataset.py allenai/openbookqa main --split test --out /tmp/obqa.jsonl
    scripts/export_hf_dataset.py --task boolq --out DATADIR/boolq --limit 100

--out names a file when it ends in .jsonl or .json, else a folder (made if missing) that gets
<file name the task reads> (with --task) or <last part of DATASET>.jsonl. Errors are one line
on stderr and exit status 1.
"""
import argparse
import json
import os
import sys

# Built-in task -> where lm-evaluation-harness 0.4.13 reads it from and where our task reads it.
# data root: the name in `--data NAME=DIR` / `data: {NAME: DIR}`; file: the task YAML's
# dataset_path, relative to that root. Datasets in brackets are alternatives with the same
# columns (ybisk/piqa is a loading-script dataset that datasets >= 4 no longer runs; lm-eval
# 0.4.13 reads baber/piqa, a script-free copy).
TASKS = {
    #  task             (HF dataset,                 config,         split,        file,                  data root)
    "piqa":           ("baber/piqa",               None,           "validation", "piqa.jsonl",           "piqa"),
    "openbookqa":     ("allenai/openbookqa",       "main",         "test",       "openbookqa.jsonl",     "openbookqa"),
    "winogrande":     ("allenai/winogrande",       "winogrande_xl", "validation", "winogrande.jsonl",    "winogrande"),
    "boolq":          ("aps/super_glue",           "boolq",        "validation", "boolq.jsonl",          "boolq"),
    "copa":           ("aps/super_glue",           "copa",         "validation", "copa.jsonl",           "copa"),
    "lambada_openai": ("EleutherAI/lambada_openai", "default",     "test",       "lambada_openai.jsonl", "lambada_openai"),
    "triviaqa":       ("mandarjoshi/trivia_qa",    "rc.nocontext", "validation", "triviaqa.jsonl",       "triviaqa"),
}
ALTERNATIVES = {"piqa": ["ybisk/piqa"]}

LOCAL_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


class ExportError(Exception):
    pass


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Write one split of a Hugging Face dataset as JSONL for gpueval's tasks.",
        epilog="tasks: " + ", ".join(TASKS) + " (see --list)")
    p.add_argument("dataset", nargs="?", help="HF dataset id, a save_to_disk folder or a local .json/.jsonl/.csv/.parquet")
    p.add_argument("config", nargs="?", help="dataset config name (HF `name`)")
    p.add_argument("--task", help="a built-in task: its dataset, config, split and file name (overridable)")
    p.add_argument("--split", help="split to write (with --task: the one the task reads)")
    p.add_argument("--out", help="output .jsonl file, or a folder for <file name>.jsonl")
    p.add_argument("--limit", type=int, help="write only the first N rows")
    p.add_argument("--offline", action="store_true", help="set HF_DATASETS_OFFLINE=1 and HF_HUB_OFFLINE=1")
    p.add_argument("--list", action="store_true", help="print the task table and exit")
    return p.parse_args(argv)


def print_table():
    print("| task | HF dataset | config | split | file our task reads | data root |")
    print("|---|---|---|---|---|---|")
    for task, (ds, cfg, split, fname, root) in TASKS.items():
        alt = "".join(f" (or {a})" for a in ALTERNATIVES.get(task, []))
        print(f"| {task} | {ds}{alt} | {cfg or '-'} | {split} | {root}/{fname} | {root} |")


def resolve(args):
    """Returns (dataset, config, split, out_file, limit)."""
    dataset, config, split, fname = args.dataset, args.config, args.split, None
    if args.task:
        if args.task not in TASKS:
            raise ExportError(f"unknown task '{args.task}' (built-in: {', '.join(TASKS)})")
        t_ds, t_cfg, t_split, fname, _ = TASKS[args.task]
        if dataset is None:
            dataset, config = t_ds, t_cfg
        split = split or t_split
    if dataset is None:
        raise ExportError("name a dataset (DATASET [CONFIG]) or --task")
    if not split:
        raise ExportError("--split is required without --task")
    if not args.out:
        raise ExportError("--out FILE.jsonl or --out DIR is required")
    if args.limit is not None and args.limit < 0:
        raise ExportError(f"--limit must be >= 0, got {args.limit}")
    out = args.out
    if not out.endswith((".jsonl", ".json")) or os.path.isdir(out):
        if fname is None:
            base = os.path.basename(os.path.normpath(dataset))
            base = os.path.splitext(base)[0] if os.path.isfile(dataset) else base
            fname = base + ".jsonl"
        out = os.path.join(out, fname)
    return dataset, config, split, out, args.limit


def load_split(dataset, config, split):
    import datasets  # imported late so that --offline takes effect and --help works without it

    datasets.disable_progress_bars()

    if os.path.isdir(dataset) and (os.path.exists(os.path.join(dataset, "dataset_info.json"))
                                   or os.path.exists(os.path.join(dataset, "dataset_dict.json"))):
        ds = datasets.load_from_disk(dataset)
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise ExportError(f"{dataset}: no split '{split}' (has: {', '.join(ds)})")
            ds = ds[split]
        return ds
    if os.path.isfile(dataset):
        ext = os.path.splitext(dataset)[1].lower()
        if ext not in LOCAL_BUILDERS:
            raise ExportError(f"{dataset}: a local file must be .json, .jsonl, .csv or .parquet")
        # A single local file is all one split: it is loaded as the split asked for.
        return datasets.load_dataset(LOCAL_BUILDERS[ext], data_files={split: dataset}, split=split)
    return datasets.load_dataset(dataset, config, split=split)


def write_jsonl(ds, out, limit):
    n = len(ds) if limit is None else min(limit, len(ds))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for i in range(n):
            row = ds[i]
            try:
                line = json.dumps(row, ensure_ascii=False)
            except TypeError as e:
                raise ExportError(f"row {i}: a column is not JSON-serialisable ({e})")
            f.write(line + "\n")
    os.replace(tmp, out)
    return n


def one_line(e):
    text = " ".join(str(e).split())
    return text if text else type(e).__name__


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.list:
        print_table()
        return 0
    if args.offline:
        os.environ["HF_DATASETS_OFFLINE"] = "1"
        os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        dataset, config, split, out, limit = resolve(args)
        try:
            import datasets  # noqa: F401
        except ImportError:
            raise ExportError("the `datasets` library is missing (pip install datasets, or use the lm-eval venv)")
        try:
            ds = load_split(dataset, config, split)
        except ExportError:
            raise
        except Exception as e:  # datasets raises many kinds; say which dataset and why, on one line
            what = dataset + (f" ({config})" if config else "") + f" split {split}"
            raise ExportError(f"cannot load {what}: {type(e).__name__}: {one_line(e)}")
        n = write_jsonl(ds, out, limit)
    except ExportError as e:
        print(f"export_hf_dataset: error: {one_line(e)}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"export_hf_dataset: error: {one_line(e)}", file=sys.stderr)
        return 1
    print(f"wrote {n} rows of {dataset}{' ' + config if config else ''} [{split}] to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
