#!/usr/bin/env python3
"""gpueval's TensorBoard export read back by TensorBoard's own reader (not part of CI).

Makes three checkpoints step-0, step-500 and step-1000 (copies of the shipped stories260K with
their weights perturbed, so their scores differ), writes them to disk in the wrong order
(step-1000 first), runs one nightly evaluation over the glob with --tensorboard, then the same
night again, then a third night after a checkpoint step-250 arrives late (readers take a tag's
points in file order: appended, it would come after step 1000), and reads the log folder with tensorboard's EventMultiplexer and EventAccumulator:

  - one run (one config fingerprint);
  - every scalar tag has exactly four points, at steps 0, 250, 500 and 1000, whose values are the
    checkpoints' results.json values (to float32);
  - the checkpoint markers (text plugin) name the checkpoints in step order;
  - report.md lists the checkpoints in step order.

Usage: scripts/verify_tensorboard.sh [--gpueval build/gpueval] [--keep DIR]
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np


def perturb(src, dst, scale, seed):
    """Copies a checkpoint folder, adding scale * std(w) * N(0,1) to each float32 tensor (safetensors)."""
    shutil.copytree(src, dst)
    path = os.path.join(dst, "model.safetensors")
    with open(path, "rb") as f:
        data = bytearray(f.read())
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + n])
    rng = np.random.default_rng(seed)
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        b, e = t["data_offsets"]
        w = np.frombuffer(bytes(data[8 + n + b : 8 + n + e]), dtype=np.float32).copy()
        w += np.float32(scale) * w.std() * rng.standard_normal(w.shape).astype(np.float32)
        data[8 + n + b : 8 + n + e] = w.tobytes()
    with open(path, "wb") as f:
        f.write(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpueval", default=os.environ.get("GPUEVAL_BIN", "build/gpueval"))
    ap.add_argument("--keep", help="work in this folder and keep it")
    args = ap.parse_args()
    from tensorboard.backend.event_processing import event_accumulator, event_multiplexer

    work = args.keep or tempfile.mkdtemp(prefix="verify_tensorboard.")
    os.makedirs(work, exist_ok=True)
    runs = os.path.join(work, "runs")
    shutil.rmtree(runs, ignore_errors=True)
    for k, (step, scale) in enumerate([(1000, 0.3), (500, 0.05), (0, 0.0)]):  # written newest first
        d = os.path.join(runs, f"step-{step}")
        perturb("models/stories260K", d, scale, k + 1)
        for root, _, files in os.walk(d):
            for f in files:
                os.utime(os.path.join(root, f), (1700000000 + 100 * k, 1700000000 + 100 * k))
    logdir = os.path.join(work, "tb")
    for p in ("tb", "night", "history.sqlite"):
        q = os.path.join(work, p)
        shutil.rmtree(q, ignore_errors=True) if os.path.isdir(q) else (os.path.exists(q) and os.remove(q))
    cfg = os.path.join(work, "night.yaml")
    with open(cfg, "w") as f:
        f.write(f"model: {runs}/step-*\ntasks: [demo_choice, demo_perplexity]\noutput: {work}/night\n"
                f"history: {work}/history.sqlite\nbatch_tokens: 512\n")
    for night in (1, 2, 3):
        if night == 3:
            perturb("models/stories260K", os.path.join(runs, "step-250"), 0.02, 9)
        r = subprocess.run([args.gpueval, "run", "--gpus", "cpu:1", "--tensorboard", logdir, cfg],
                           capture_output=True, text=True)
        tb_lines = [l for l in r.stderr.splitlines() if "[sched] tensorboard" in l]
        print(f"night {night}: exit {r.returncode}; " + " | ".join(tb_lines))
        if r.returncode != 0:
            sys.exit(r.stderr)

    failures = []
    mux = event_multiplexer.EventMultiplexer(size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
    mux.AddRunsFromDirectory(logdir)
    mux.Reload()
    run_names = sorted(mux.Runs())
    print(f"runs: {run_names}")
    if len(run_names) != 1:
        failures.append(f"expected one run, got {run_names}")
    acc = mux.GetAccumulator(run_names[0])
    tags = acc.Tags()
    steps_want = [0, 250, 500, 1000]
    results = {s: json.load(open(f"{work}/night/step-{s}/results.json"))["results"] for s in steps_want}
    print(f"{'tag':40} {'steps':18} values")
    for tag in sorted(tags["scalars"]):
        events = acc.Scalars(tag)
        steps = [e.step for e in events]
        values = [e.value for e in events]
        print(f"{tag:40} {str(steps):18} {', '.join(f'{v:.6g}' for v in values)}")
        if steps != steps_want:
            failures.append(f"{tag}: steps {steps}")
        task, metric, *rest = tag.split("/")
        key = f"{metric},{rest[0] if rest else 'none'}"
        for s, v in zip(steps, values):
            want = results.get(s, {}).get(task, {}).get(key)
            if want is None or np.float32(want) != np.float32(v):
                failures.append(f"{tag} at {s}: {v} against results.json {want}")
    names = [json.loads(e.tensor_proto.string_val[0])["name"] for e in acc.Tensors("gpueval/checkpoint")]
    print(f"checkpoint markers: {names}")
    if names != [f"step-{s}" for s in steps_want]:
        failures.append(f"markers {names}")
    md = open(f"{work}/night/report.md").read()
    at = [md.find(f"step-{s} ") for s in steps_want]
    if not (0 <= at[0] < at[1] < at[2] < at[3]):
        failures.append(f"report.md order {at}")
    files = [f for f in os.listdir(os.path.join(logdir, run_names[0])) if "tfevents" in f]
    print(f"event files in the run: {len(files)}")
    if not args.keep:
        shutil.rmtree(work)
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print(f"PASS: {len(tags['scalars'])} scalar tags, each 4 points at steps {steps_want}, read by tensorboard's "
          "EventAccumulator")
    return 0


if __name__ == "__main__":
    sys.exit(main())
