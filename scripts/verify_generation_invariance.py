#!/usr/bin/env python3
"""Checks two claims of gpueval's generation engine on the shipped model, models/stories260K:

  A. The generated texts do not depend on batching, workers or a resume. 48 TinyStories-style
     prompts (below) go into a JSONL in the work folder, with two generate_until tasks over it:
     greedy (until "\\n\\n", max_gen_toks 64) and sampled (repeats 4, do_sample, temperature 0.8).
     Seven runs, each into a fresh output folder:
       cpu1_b1      --gpus cpu:1 --batch-size 1        (the reference)
       cpu1_auto    --gpus cpu:1                       (batch budget from calibration)
       cpu2_auto    --gpus cpu:2
       cpu2_b64     --gpus cpu:2 --batch-size 64
       cpu2_b5      --gpus cpu:2 --batch-size 5         (at most 5 sequences decoded together)
       cpu2_resume  --gpus cpu:2, SIGKILLed (its whole process group) once status.json says a
                    batch is done and the run is not complete, then the same command again,
                    which resumes from the journal and finishes.
       cpu1_mid     --gpus cpu:1 with its worker made to hold its batch once 5 sequences of it have
                    ended (GPUEVAL_FAULT=hold-items:5, src/run/worker.cpp), SIGKILLed once
                    status.json's items_ahead says they are journaled, then resumed with --gpus cpu:2:
                    a partly journaled generation batch runs without its stored sequences
                    (results.json journal.items_resumed_in_batches, where rows are independent).
       sharded      the node-count axis (docs/cluster.md): `gpueval plan --shards 2` (no
                    --gpus: the config has none, so the plan's default, cpu), then
                    `gpueval run DIR --shard 0/2 --gpus cpu:1` and
                    `gpueval run DIR --shard 1/2 --gpus cpu:2` (another worker count per
                    "node"), then `gpueval merge DIR`; the merged samples files are compared.
                    The shards run one after the other on this machine; every shard is run even
                    when an earlier one failed, the merge only when all succeeded.
     Every document's responses in each run's samples_<task>.jsonl are compared with the
     reference's.
  B. Greedy generation equals transformers' at batch 1. Per prompt, transformers'
     AutoModelForCausalLM (float32) generate(do_sample=False, max_new_tokens=64) on the prompt's
     tokens (with BOS when the gpueval run's results.json says add_bos_token, as it does for
     stories260K), the new tokens decoded with skip_special_tokens and cut at the first "until"
     string, as lm-eval's HF backend does, is compared with the reference run's greedy text. For a
     mismatch it prints the prompt, the first step (generated-token index) where the two differ,
     transformers' top-1 minus top-2 logit there (from generate's scores), and `gpueval logits`'
     top-2 at that position on the prompt plus transformers' tokens (teacher-forced: the same
     prefix for both).

Usage (CPU only; a venv with torch, transformers 5 and tokenizers; a minute or two on 2 cores):
  .venv-gpu/bin/python scripts/verify_generation_invariance.py [--work DIR]
      [--gpueval build/gpueval] [--max-gen-toks 64]

Prints, for greedy and for sampled, "N of N identical" per run against cpu1_b1 (and the first
differing document on a difference), where the resume run was killed and what its journal resumed,
each step of the sharded run (plan, shards, merge) with its exit status, then "k of N equal"
against transformers and one line per mismatch. Exits 1 when any run's texts differ from the
reference's, when the resume run could not be killed mid-way, when a run (or any step of the
sharded run: the plan, a shard or the merge) fails, or when fewer than 99% of the greedy texts
equal transformers'. The work folder keeps the task files, every run's output folder and its log
(<run>.log; the sharded run's holds each step's command line and output).
"""
import argparse
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "stories260K"
UNTIL = ["\n\n"]
GREEDY_TASK = "gen_inv_greedy"
SAMPLED_TASK = "gen_inv_sampled"
REPEATS = 4
TEMPERATURE = 0.8
MIN_EQUAL_SHARE = 0.99

# Story openings in TinyStories' style, 4 to 19 words, written for this check.
PROMPTS = [
    "Once upon a time",
    "Once upon a time, there was a little dog named",
    "Tom and Sam went to the park. Tom saw",
    "One day, a little girl found a",
    "Lily liked to play with her red ball. One day, the ball",
    "There was a big tree in the garden. Under the tree,",
    "The sun was shining and the birds were",
    "Mom said, \"Let's go to the",
    "Ben had a toy car. He wanted to",
    "A little cat sat by the window and looked at",
    "Sara and her mom baked a cake. The cake was",
    "Once there was a small boat on a",
    "The little bird could not fly. It was",
    "Tim was sad because his kite",
    "In a small town, there lived a kind old man who",
    "Max the dog loved to dig. One day he dug up",
    "It was a rainy day. Anna stayed inside and",
    "The bunny hopped into the forest and met a",
    "Jack wanted to be a pilot. Every day he",
    "Sue found a shiny key under her bed. She",
    "The frog jumped into the pond and",
    "Mia had a new dress. She showed it to",
    "One morning, the farmer went to see his cows. He",
    "Lucy was scared of the dark. At night, she",
    "The big bear was hungry. He looked for",
    "Sam and his dad went fishing. They",
    "Once upon a time, in a big castle, there lived a princess who",
    "The little boy wanted a cookie, but his mom said",
    "Amy drew a picture of a",
    "The wind blew hard and the leaves",
    "A small mouse lived in a hole in the wall. Every night, it",
    "Ducks like to swim. The mommy duck took her babies to",
    "Bob was a friendly robot. He liked to help",
    "Emma and Lily were best friends. They always",
    "The car was very fast. It went",
    "Grandma gave Tim a present. Inside the box was",
    "The children played in the snow and made a",
    "One day, a big storm came. The animals",
    "Kitty wanted to climb the tall tree, but",
    "Once upon a time, there was a happy little",
    "The old lady had a garden full of",
    "Joe lost his favorite toy. He looked everywhere, and then",
    "At the beach, Mia built a sand castle. Then a big wave",
    "The teacher asked the class to",
    "Spot the puppy found a bone in the yard. He was so happy that he",
    "The moon was big and bright. Ben looked up and said,",
    "Once upon a time, a little girl named Sue went to the store with her mom to buy some",
    "Pete had a blue balloon. He held it tight, but",
]

# (run name, --gpus, --batch-size or None, kind): kind "plain", "killed" (killed and resumed) or
# "sharded" (planned with --shards len(gpus), shard i run with --gpus gpus[i], then merged).
RUNS = [
    ("cpu1_b1", "cpu:1", "1", "plain"),
    ("cpu1_auto", "cpu:1", None, "plain"),
    ("cpu2_auto", "cpu:2", None, "plain"),
    ("cpu2_b64", "cpu:2", "64", "plain"),
    ("cpu2_b5", "cpu:2", "5", "plain"),
    ("cpu2_resume", "cpu:2", None, "killed"),
    ("cpu1_mid", "cpu:1", None, "killed_mid"),
    ("sharded", ("cpu:1", "cpu:2"), None, "sharded"),
]


def yaml_str(s):
    return json.dumps(s)  # a JSON string is a YAML double-quoted scalar


def write_inputs(work, max_gen_toks):
    work.mkdir(parents=True, exist_ok=True)
    with open(work / "prompts.jsonl", "w") as f:
        for p in PROMPTS:
            f.write(json.dumps({"prompt": p}) + "\n")
    until = "[" + ", ".join(yaml_str(u) for u in UNTIL) + "]"
    (work / f"{GREEDY_TASK}.yaml").write_text(f"""\
# Written by scripts/verify_generation_invariance.py: greedy story continuations.
task: {GREEDY_TASK}
dataset_path: prompts.jsonl
output_type: generate_until
doc_to_text: "{{{{prompt}}}}"
doc_to_target: ""
generation_kwargs:
  until: {until}
  do_sample: false
  max_gen_toks: {max_gen_toks}
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
""")
    # pass@k needs every repeat to reach the metric: the default filter (take_first) keeps one,
    # so a filter that keeps them all (as gsm8k_cot_olmo3's regex filters do).
    (work / f"{SAMPLED_TASK}.yaml").write_text(f"""\
# Written by scripts/verify_generation_invariance.py: {REPEATS} sampled continuations per prompt.
include: {GREEDY_TASK}.yaml
task: {SAMPLED_TASK}
generation_kwargs:
  until: {until}
  do_sample: true
  temperature: {TEMPERATURE}
  max_gen_toks: {max_gen_toks}
repeats: {REPEATS}
filter_list:
  - name: all-repeats
    filter:
      - function: remove_whitespace
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
  - metric: pass_at_k
    k: [1, {REPEATS}]
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
""")
    (work / "run.yaml").write_text(f"""\
# Written by scripts/verify_generation_invariance.py; --gpus, --batch-size, --output and
# --history are given per run.
model: {yaml_str(str(MODEL))}
tasks: [{yaml_str(str(work / (GREEDY_TASK + '.yaml')))}, {yaml_str(str(work / (SAMPLED_TASK + '.yaml')))}]
batch_size: auto
dtype: auto
seed: 1234
""")


def rows_independent_here():
    """Whether gpueval's CPU generation rows are independent here (generate.h's
    generation_rows_independent for float32): an x86-64 CPU with AVX2 and FMA, and
    GPUEVAL_ROW_INVARIANT_PRODUCTS not 0."""
    try:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return False
    return "avx2" in flags and "fma" in flags and os.environ.get("GPUEVAL_ROW_INVARIANT_PRODUCTS") != "0"


def run_command(args, work, name, gpus, batch_size):
    out = work / name
    cmd = [args.gpueval, "run", "--gpus", gpus, "--output", str(out),
           "--history", str(out / "history.sqlite"), str(work / "run.yaml")]
    if batch_size:
        cmd[2:2] = ["--batch-size", batch_size]
    return cmd, out


def sharded_commands(args, work, name, gpus_per_shard):
    """The plan, each shard's run and the merge of a sharded run (docs/cluster.md)."""
    out = work / name
    n = len(gpus_per_shard)
    plan = [args.gpueval, "plan", "--shards", str(n), "--output", str(out),
            "--history", str(out / "history.sqlite"), str(work / "run.yaml")]
    shards = [[args.gpueval, "run", str(out), "--shard", f"{i}/{n}", "--gpus", g]
              for i, g in enumerate(gpus_per_shard)]
    merge = [args.gpueval, "merge", str(out)]
    return plan, shards, merge, out


def run_sharded(plan, shards, merge, log):
    """Runs the plan, every shard (even after one failed: each shard's own status is worth
    seeing) and, when all succeeded, the merge. Returns (rc, [(command, rc, seconds)]): rc is the
    first nonzero step's, else 0."""
    steps = []

    def step(cmd):
        with open(log, "a") as f:
            f.write(f"$ {' '.join(cmd)}\n")
        t = time.time()
        rc = run_plain(cmd, log)
        steps.append((cmd, rc, time.time() - t))
        return rc

    if step(plan) != 0:
        return steps[-1][1], steps
    shard_rcs = [step(cmd) for cmd in shards]
    bad = next((rc for rc in shard_rcs if rc != 0), None)
    if bad is not None:
        return bad, steps
    return step(merge), steps


def status(out):
    try:
        return json.loads((out / "status.json").read_text())
    except (OSError, ValueError):
        return None  # not written yet (it is replaced atomically, so never half-written)


def journal_rows(out):
    try:
        con = sqlite3.connect(f"file:{out / 'journal.sqlite'}?mode=ro", uri=True)
        try:
            return con.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return None


def run_plain(cmd, log):
    with open(log, "ab") as f:
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT).returncode


def run_killed_then_resumed(cmd, out, log, poll_s, mid_batch=False, resume_cmd=None, env=None):
    """Starts cmd in a process group of its own, SIGKILLs the group once status.json shows a
    batch done (mid_batch: a generated sequence journaled ahead of its batch, items_ahead) and the
    run not complete, then runs resume_cmd (default cmd). Returns (rc, note) or raises."""
    with open(log, "ab") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT,
                                start_new_session=True, env=env)
        seen = None
        while proc.poll() is None:
            st = status(out)
            ready = st and (st.get("items_ahead", 0) >= 5 if mid_batch else st.get("batches_done", 0) >= 1)
            if ready and st.get("state") != "complete":
                os.killpg(proc.pid, signal.SIGKILL)
                seen = st
                break
            time.sleep(poll_s)
        proc.wait()
    if seen is None:
        return None, (f"the run ended (rc {proc.returncode}) before status.json showed "
                      f"{'a sequence journaled ahead' if mid_batch else 'a batch done'}")
    # The workers are in the same process group; wait until none is left.
    deadline, gone = time.time() + 10, False
    while not gone and time.time() < deadline:
        try:
            os.killpg(proc.pid, 0)
            time.sleep(0.05)
        except ProcessLookupError:
            gone = True
    rows = journal_rows(out)
    note = (f"killed (SIGKILL to the process group) at {seen['batches_done']} of "
            f"{seen['batches_total']} batches and {seen.get('items_ahead', 0)} sequences journaled ahead "
            f"per status.json, journal holding {rows} results"
            + ("" if gone else "; WARNING: processes of the group still alive after 10 s"))
    rc = run_plain(resume_cmd or cmd, log)
    return rc, note


def read_samples(out, task):
    """doc_id -> (prompt, [responses])."""
    docs = {}
    with open(out / f"samples_{task}.jsonl") as f:
        for line in f:
            s = json.loads(line)
            resps = [r for inst in s["resps"] for r in (inst if isinstance(inst, list) else [inst])]
            prompt = s["arguments"]["gen_args_0"]["arg_0"]
            if s["doc_id"] in docs and docs[s["doc_id"]][1] != resps:
                raise SystemExit(f"{out}: doc {s['doc_id']} has two lines with different responses")
            docs[s["doc_id"]] = (prompt, resps)
    return docs


def compare(ref, other):
    """(identical count, first differing doc id or None)."""
    same, first = 0, None
    for doc_id in sorted(ref):
        if other.get(doc_id) == ref[doc_id]:
            same += 1
        elif first is None:
            first = doc_id
    extra = set(other) - set(ref)
    if extra and first is None:
        first = min(extra)
    return same, first


def cut(text):
    for u in UNTIL:
        text = text.split(u)[0]
    return text


def gpueval_top2(args, ids, position):
    res = subprocess.run([args.gpueval, "logits", "--model", str(MODEL),
                          "--ids", ",".join(map(str, ids))],
                         capture_output=True, text=True, cwd=ROOT, check=True)
    logits = json.loads(res.stdout)["logits"]
    return [top2(row) for row in logits[position:]]


def top2(row):
    order = sorted(range(len(row)), key=lambda i: -row[i])
    return (order[0], row[order[0]]), (order[1], row[order[1]])


def check_transformers(args, ref_greedy, add_bos):
    import torch
    import transformers
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    tok = Tokenizer.from_file(str(MODEL / "tokenizer.json"))
    model = AutoModelForCausalLM.from_pretrained(str(MODEL), dtype=torch.float32).eval()
    bos = model.config.bos_token_id
    eos = model.config.eos_token_id
    equal, mismatches = 0, []
    for doc_id in sorted(ref_greedy):
        prompt, (ours,) = ref_greedy[doc_id]
        ids = tok.encode(prompt, add_special_tokens=False).ids
        if add_bos:
            ids = [bos] + ids
        with torch.no_grad():
            gen = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 do_sample=False, max_new_tokens=args.max_gen_toks, pad_token_id=eos,
                                 output_scores=True, return_dict_in_generate=True)
        new = gen.sequences[0, len(ids):].tolist()
        theirs = cut(tok.decode(new, skip_special_tokens=True))
        if theirs == ours:
            equal += 1
            continue
        # The first step whose decoded prefix leaves gpueval's text; gpueval's own argmax on the
        # same (transformers') prefix may pin an earlier step when a token is a prefix of another.
        text_step = next((j for j in range(len(new))
                          if not ours.startswith(tok.decode(new[:j + 1], skip_special_tokens=True))),
                         len(new) - 1)
        ours_top = gpueval_top2(args, ids + new, len(ids) - 1)
        forced = next((j for j in range(len(new)) if ours_top[j][0][0] != new[j]), None)
        step = forced if forced is not None and forced <= text_step else text_step
        scores = gen.scores[step][0]
        (a, la), (b, lb) = top2(scores.tolist())
        (ga, gla), (gb, glb) = ours_top[step]
        mismatches.append({
            "doc_id": doc_id, "prompt": prompt, "step": step,
            "transformers": f"top-1 {a} {tok.id_to_token(a)!r} {la:.6f}, top-2 {b} {tok.id_to_token(b)!r} "
                            f"{lb:.6f}, margin {la - lb:.3g}",
            "gpueval": f"top-1 {ga} {tok.id_to_token(ga)!r} {gla:.6f}, top-2 {gb} {tok.id_to_token(gb)!r} "
                       f"{glb:.6f}, margin {gla - glb:.3g}",
            "forced_argmax_differs": forced is not None and forced == step,
            "ours": ours, "theirs": theirs,
        })
    return equal, mismatches


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default="/tmp/verify_gen_inv", help="work folder (default %(default)s)")
    ap.add_argument("--gpueval", default=str(ROOT / "build" / "gpueval"))
    ap.add_argument("--max-gen-toks", type=int, default=64)
    ap.add_argument("--poll", type=float, default=0.02, help="status.json poll interval, seconds")
    args = ap.parse_args()
    args.gpueval = str(Path(args.gpueval).resolve())
    work = Path(args.work).resolve()
    t0 = time.time()
    write_inputs(work, args.max_gen_toks)

    failed = False
    samples = {}
    ref_config = None
    for name, gpus, batch_size, kind in RUNS:
        log = work / f"{name}.log"
        log.unlink(missing_ok=True)
        t = time.time()
        if kind == "sharded":
            plan, shards, merge, out = sharded_commands(args, work, name, gpus)
            shutil.rmtree(out, ignore_errors=True)
            rc, steps = run_sharded(plan, shards, merge, log)
            for cmd, step_rc, secs in steps:
                print(f"run {name}: {' '.join(cmd)}: rc {step_rc}, {secs:.1f}s")
            if len(steps) < 2 + len(shards):
                print(f"  not run: {'the shards and ' if len(steps) == 1 else ''}the merge")
            print(f"run {name}: rc {rc}, {time.time() - t:.1f}s in all")
        else:
            cmd, out = run_command(args, work, name, gpus, batch_size)
            shutil.rmtree(out, ignore_errors=True)
            if kind == "killed":
                rc, note = run_killed_then_resumed(cmd, out, log, args.poll)
            elif kind == "killed_mid":
                resume_cmd, _ = run_command(args, work, name, "cpu:2", batch_size)
                held = dict(os.environ, GPUEVAL_FAULT="hold-items:5", GPUEVAL_FAULT_ONCE=str(work / f"{name}.held"))
                (work / f"{name}.held").unlink(missing_ok=True)
                rc, note = run_killed_then_resumed(cmd, out, log, args.poll, mid_batch=True, resume_cmd=resume_cmd,
                                                   env=held)
            else:
                rc, note = run_plain(cmd, log), None
            print(f"run {name}: {' '.join(cmd)}: rc {rc}, {time.time() - t:.1f}s")
            if note:
                print(f"  {note}")
        if rc != 0:
            print(f"  FAIL: see {log}")
            failed = True
            continue
        results = json.loads((out / "results.json").read_text())
        j = results.get("journal", {})
        b = results.get("batching", {})
        if kind == "sharded":
            # A merged run's journal section lists its shards' journals.
            journal = "; ".join(
                f"shard {s.get('shard')} ({gpus[s.get('shard')]}): {s.get('batches')} batches, "
                f"{s.get('batches_computed_last_attempt')} computed, "
                f"{s.get('batches_resumed_last_attempt')} resumed"
                for s in j.get("shards", []))
        else:
            journal = (f"{j.get('requests_resumed')} requests resumed, {j.get('requests_computed')} computed, "
                       f"{j.get('batches_resumed')} batches resumed, {j.get('batches_computed')} computed, "
                       f"{j.get('items_resumed_in_batches')} sequences of partly journaled batches resumed")
        print(f"  batch budget {results['config'].get('batch_tokens_used')} tokens, {b.get('batches')} batches, "
              f"{100 * b.get('padding_fraction', 0):.2f}% padding; journal: {journal}")
        if kind.startswith("killed") and not j.get("requests_resumed"):
            print("  FAIL: the resumed run resumed nothing from the journal")
            failed = True
        if kind == "killed_mid" and rows_independent_here() and not j.get("items_resumed_in_batches"):
            print("  FAIL: the resumed run did not run its partly journaled generation batch without the stored sequences")
            failed = True
        if ref_config is None:
            ref_config = results["config"]
        samples[name] = {t: read_samples(out, t) for t in (GREEDY_TASK, SAMPLED_TASK)}

    ref_name = RUNS[0][0]
    if ref_name not in samples:
        print("FAIL: the reference run did not finish")
        return 1
    ref = samples[ref_name]
    for task, label in ((GREEDY_TASK, "greedy"), (SAMPLED_TASK, "sampled")):
        n = len(ref[task])
        nresp = sum(len(r) for _, r in ref[task].values())
        print(f"[A] {label}: reference {ref_name}, {n} documents, {nresp} responses")
        for name, *_ in RUNS[1:]:
            if name not in samples:
                print(f"[A] {label} {name}: no samples (run failed)")
                continue
            same, first = compare(ref[task], samples[name][task])
            print(f"[A] {label} {name}: {same} of {n} identical")
            if first is not None:
                failed = True
                print(f"    first differing doc {first}: prompt {ref[task].get(first, ('?',))[0]!r}")
                print(f"    {ref_name}: {ref[task].get(first, (None, None))[1]!r}")
                print(f"    {name}: {samples[name][task].get(first, (None, None))[1]!r}")

    add_bos = bool(ref_config.get("add_bos_token"))
    equal, mismatches = check_transformers(args, ref[GREEDY_TASK], add_bos)
    n = len(ref[GREEDY_TASK])
    print(f"[B] greedy vs transformers generate (batch 1, float32, BOS {'on' if add_bos else 'off'}): "
          f"{equal} of {n} equal ({100.0 * equal / n:.1f}%)")
    for m in mismatches:
        print(f"    doc {m['doc_id']} {m['prompt']!r}: first differing step {m['step']}"
              f"{' (gpueval argmax differs there on the same prefix)' if m['forced_argmax_differs'] else ''}")
        print(f"      transformers: {m['transformers']}")
        print(f"      gpueval logits on the same prefix: {m['gpueval']}")
        print(f"      gpueval:      {m['ours']!r}")
        print(f"      transformers: {m['theirs']!r}")
    if equal < MIN_EQUAL_SHARE * n:
        print(f"FAIL: fewer than {MIN_EQUAL_SHARE:.0%} equal to transformers")
        failed = True
    print(f"{'FAIL' if failed else 'PASS'} in {time.time() - t0:.1f}s (work folder {work})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
