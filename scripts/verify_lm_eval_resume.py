#!/usr/bin/env python3
"""lm-eval with `--model gpueval`, its engine killed with SIGKILL mid-run and the same command run again
on another number of workers: the same outputs as an uninterrupted run, only the missing requests
computed. Not part of CI; run it with the python of a venv holding lm-eval and ./python (the one
scripts/test_lm_eval_package.sh makes is enough: no torch needed).

  build/venv-lm-eval/bin/python scripts/verify_lm_eval_resume.py [--gpueval build/gpueval] [--work DIR]

The workload: MMLU 5-shot, two subjects x 20 questions (160 loglikelihood requests), and gsm8k 0-shot
generations over 24 documents, on the shipped models/stories260K (its 512 positions hold these
prompts), lm-eval's own task YAMLs over the shared data (as scripts/verify_lm_eval_backend.py writes
them). Three runs of `gpueval-lm-eval run --model gpueval`:
  1. reference: gpus=cpu:2, its own journal;
  2. interrupted: gpus=cpu:2, a second journal, the workers holding their 4th batch
     (GPUEVAL_FAULT=hold:any, GPUEVAL_FAULT_AFTER=3: the run cannot end), its engine and workers
     killed with SIGKILL once status.json counts 2 batches done; lm-eval then exits 1 with the
     engine's exit status in one line;
  3. resumed: the same command as 2 on gpus=cpu:1, without the fault.
Checked: run 3's engine says it found S of the requests scored and computed only the rest (S > 0), and
its samples files (every request's response, every metric) and results are those of run 1.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import verify_lm_eval as V  # noqa: E402


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def prepare(work: Path, data: Path) -> Path:
    import lm_eval
    builtin = Path(lm_eval.__file__).parent / "tasks"
    lm_dir, dd = work / "lm_eval_tasks", work / "data"
    for d in (lm_dir, dd):
        d.mkdir(parents=True, exist_ok=True)
    for s in ("anatomy", "astronomy"):
        V.write_mmlu_task(data, dd, lm_dir / f"mmlu_{s}.yaml", builtin / "mmlu" / "default" / f"mmlu_{s}.yaml", s)
    gsm = (data / "gsm8k" / "test.jsonl").resolve()
    (lm_dir / "gsm8k.yaml").write_text(
        f"include: {builtin / 'gsm8k' / 'gsm8k.yaml'}\ntask: gsm8k\ndataset_path: json\ndataset_name: null\n"
        f"dataset_kwargs:\n  data_files:\n    test: {gsm}\ntraining_split: null\nfewshot_split: test\n"
        "generation_kwargs:\n  until: ['Question:', '</s>', '<|im_end|>']\n  do_sample: false\n"
        "  temperature: 0.0\n  max_gen_toks: 64\n")
    return lm_dir


def command(args, work: Path, tasks: Path, gpus: str, journal: Path, out: Path, task: str, shots: int,
            limit: int) -> list[str]:
    launcher = Path(sys.executable).parent / "gpueval-lm-eval"
    return [str(launcher), "run", "--model", "gpueval", "--model_args",
            f"pretrained={REPO / 'models' / 'stories260K'},gpus={gpus},dtype=float32,binary={args.gpueval},"
            f"journal_dir={journal},batch_tokens=256",
            "--tasks", task, "--include_path", str(tasks), "--num_fewshot", str(shots), "--limit", str(limit),
            "--output_path", str(out), "--log_samples"]


def outputs(out: Path) -> dict:
    """{file name without its time stamp: content} of the samples, and the results' scores."""
    got = {}
    for f in sorted(glob.glob(f"{out}/**/samples_*.jsonl", recursive=True)):
        got[re.sub(r"_\d{4}-\d\d-\d\dT[\d.\-]+", "", os.path.basename(f))] = Path(f).read_text()
    res = json.loads(Path(next(iter(glob.glob(f"{out}/**/results_*.json", recursive=True)))).read_text())
    got["results"] = json.dumps(res["results"], sort_keys=True)
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpueval", default=os.environ.get("GPUEVAL_BIN") or str(REPO / "build" / "gpueval"))
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--work", default="/tmp/gpueval-lm-eval-resume")
    args = ap.parse_args()
    args.gpueval = str(Path(args.gpueval).resolve())
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    tasks = prepare(work, Path(args.data))
    os.environ.update(HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    ok = True
    for task, shots, limit in (("mmlu_anatomy,mmlu_astronomy", 5, 20), ("gsm8k", 0, 24)):
        name = task.split(",")[0]
        ref_out, out = work / f"{name}_reference", work / f"{name}_resumed"
        ref_journal, journal = work / f"{name}_journal_reference", work / f"{name}_journal"
        log(f"[{name}] 1. reference run on cpu:2")
        subprocess.run(command(args, work, tasks, "cpu:2", ref_journal, ref_out, task, shots, limit), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        log(f"[{name}] 2. the same on cpu:2, the workers holding their 4th batch; SIGKILL once 2 batches are done")
        env = dict(os.environ, GPUEVAL_FAULT="hold:any", GPUEVAL_FAULT_AFTER="3")
        with (work / f"{name}_killed.log").open("w") as logf:
            proc = subprocess.Popen(command(args, work, tasks, "cpu:2", journal, out, task, shots, limit), env=env,
                                    stdout=logf, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and proc.poll() is None:
                status = glob.glob(f"{journal}/*/status.json")
                try:
                    if status and json.loads(Path(status[0]).read_text()).get("batches_done", 0) >= 2:
                        break
                except (json.JSONDecodeError, OSError):
                    pass
                time.sleep(0.05)
            # The engine and its workers (forked from it: their command lines name the journal root).
            subprocess.run(["pkill", "-KILL", "-f", f"journal-root {journal}"])
            code = proc.wait()
        killed_log = (work / f"{name}_killed.log").read_text()
        log(f"[{name}]    lm-eval exited {code}: {killed_log.strip().splitlines()[-1]}")
        log(f"[{name}] 3. the same command again on cpu:1")
        r = subprocess.run(command(args, work, tasks, "cpu:1", journal, out, task, shots, limit),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            log(r.stderr[-3000:])
            return 1
        m = re.search(r"(\d+) of (\d+) requests already scored; computing (\d+)", r.stderr)
        done = re.search(r"complete: (\d+) requests \((\d+) computed, (\d+) from the journal\)", r.stderr)
        same = outputs(out) == outputs(ref_out)
        log(f"[{name}]    {m.group(0) if m else 'no journal line'}; {done.group(0) if done else 'no completion line'}; "
            f"samples and results {'identical to' if same else 'DIFFERENT from'} the uninterrupted run's")
        ok = ok and code != 0 and m is not None and int(m.group(1)) > 0 and int(m.group(3)) < int(m.group(2)) and same
    log("[done] " + ("every check holds" if ok else "A CHECK FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
