#!/usr/bin/env python3
"""The code sandbox's verdicts with the machine idle and under `stress --cpu 2` (not part of CI).

  python3 scripts/verify_sandbox_determinism.py [--gpueval build/gpueval] [--runs 5]
      [--cpu-seconds 2] [--share 0.8] [--stress-workers 2]

A verdict must not depend on machine load: gpueval's time limit is the CPU time of the program's
whole process tree (docs/sandbox.md), not wall-clock time. This script sizes a few borderline
programs to use about --share of the CPU limit on this machine (each workload is measured once
under a generous limit and scaled), adds a clearly passing and a clearly timing-out program, then
runs each --runs times through `gpueval execute` (one sandbox at a time, script mode) with the
machine as it is, and --runs times while `stress --cpu N` (Debian's stress; N = --stress-workers)
keeps every core busy. Both gpueval and the stressors run at nice 19, so they compete as equals.

With the kernel's autogroup scheduling on (/proc/sys/kernel/sched_autogroup_enabled = 1, Debian's
default), every session is one scheduling group, and bubblewrap starts each sandbox in a session
of its own (--new-session): the sandbox then gets as much CPU as all the stressors together and
the stress hardly shows in its wall time. --disable-autogroup (root) turns autogroup off while
the script runs, and back on after, so the stressors compete thread by thread as a busy GPU node's
processes would.

Printed per program and condition: the verdicts, the CPU seconds (min-max) and the wall seconds
(min-max), and what a wall-clock limit of the same seconds would have said (how lm-eval's
code_eval times programs). Exit status 1 when any program's verdicts differ between runs or
conditions.

The programs:
  loop      a pure-Python loop;
  memory    sorting and dictionaries, cache- and allocation-heavy (CPU time moves most here);
  forks     the loop's work split over 3 forked processes (the tree's sum is what counts);
  threads   the loop's work in 3 threads of one process;
  quick     a trivial passing program;
  forever   an infinite loop (times out).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

LOOP = """
def f(n):
    s = 0
    for i in range(n):
        s += i * i % 7
    return s
"""

PROGRAMS = {
    "loop": lambda n: LOOP + f"assert f({n}) >= 0\n",
    "memory": lambda n: (
        "import random\nrandom.seed(1)\nd = {}\n"
        f"for r in range({max(1, n // 1_000_000)}):\n"
        "    xs = [random.random() for _ in range(300_000)]\n    xs.sort()\n"
        "    for i, x in enumerate(xs):\n        d[i] = x\nassert len(d) == 300_000\n"),
    "forks": lambda n: LOOP + (
        "import os\nkids = []\nfor _ in range(3):\n    pid = os.fork()\n    if pid == 0:\n"
        f"        f({n // 3})\n        os._exit(0)\n    kids.append(pid)\n"
        "for k in kids:\n    assert os.waitpid(k, 0)[1] == 0\n"),
    "threads": lambda n: LOOP + (
        "import threading\n"
        f"ts = [threading.Thread(target=f, args=({n // 3},)) for _ in range(3)]\n"
        "[t.start() for t in ts]\n[t.join() for t in ts]\n"),
}


def execute(gpueval, programs, cpu_seconds, wall_seconds):
    """Runs {id: program} through `gpueval execute`, one sandbox at a time; {id: verdict line}."""
    lines = "".join(json.dumps({"id": k, "program": p, "mode": "script"}) + "\n" for k, p in programs.items())
    out = subprocess.run(["nice", "-n", "19", gpueval, "execute", "--max-sandboxes", "1", "--cpu-seconds",
                          str(cpu_seconds), "--wall-seconds", str(wall_seconds)],
                         input=lines, capture_output=True, text=True, check=True).stdout
    return {j["id"]: j for j in map(json.loads, out.splitlines())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpueval", default=os.path.join(REPO, "build", "gpueval"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cpu-seconds", type=float, default=2.0)
    ap.add_argument("--share", type=float, default=0.8, help="of the CPU limit each borderline program uses")
    ap.add_argument("--stress-workers", type=int, default=2)
    ap.add_argument("--disable-autogroup", action="store_true",
                    help="turn the kernel's autogroup scheduling off while running (root)")
    a = ap.parse_args()
    autogroup = "/proc/sys/kernel/sched_autogroup_enabled"
    before = open(autogroup).read().strip() if os.path.exists(autogroup) else None
    if a.disable_autogroup and before == "1":
        with open(autogroup, "w") as f:
            f.write("0")
    try:
        return run(a, before)
    finally:
        if a.disable_autogroup and before == "1":
            with open(autogroup, "w") as f:
                f.write(before)


def run(a, autogroup_before):
    if not shutil.which("stress"):
        sys.exit("verify_sandbox_determinism: needs stress (Debian: apt-get install stress)")

    # Size each workload: measure a known size under a generous limit, scale to the share.
    base = 3_000_000
    measured = execute(a.gpueval, {k: make(base) for k, make in PROGRAMS.items()}, 60, 120)
    programs = {}
    for k, make in PROGRAMS.items():
        j = measured[k]
        if j["verdict"] != "passed":
            sys.exit(f"verify_sandbox_determinism: sizing {k} gave {j['verdict']}: {j['detail']}")
        n = int(base * a.share * a.cpu_seconds / max(j["cpu_s"], 1e-3))
        programs[k] = make(n)
    programs["quick"] = "assert sum(range(1000)) == 499500\n"
    programs["forever"] = "while True:\n    pass\n"

    results = {k: {"idle": [], "stress": []} for k in programs}
    wall = 10 * a.cpu_seconds
    for cond in ("idle", "stress"):
        stress = None
        if cond == "stress":
            stress = subprocess.Popen(["nice", "-n", "19", "stress", "--cpu", str(a.stress_workers)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            time.sleep(1)
        try:
            for _ in range(a.runs):
                for k, j in execute(a.gpueval, programs, a.cpu_seconds, wall).items():
                    results[k][cond].append(j)
        finally:
            if stress:
                os.killpg(stress.pid, 9)
                stress.wait()

    differ = 0
    state = {None: "unknown", "0": "off", "1": "on"}.get(autogroup_before, autogroup_before)
    if a.disable_autogroup and autogroup_before == "1":
        state = "off for this run"
    print(f"CPU limit {a.cpu_seconds} s, {a.runs} runs per condition, stress --cpu {a.stress_workers}, "
          f"autogroup scheduling {state}\n")
    print(f"{'program':8} {'condition':9} {'verdicts':28} {'cpu s':13} {'wall s':13} {'a wall limit would say':24}")
    for k in programs:
        verdicts = set()
        for cond in ("idle", "stress"):
            js = results[k][cond]
            vs = [j["verdict"] for j in js]
            verdicts.update(vs)
            cpu = [j["cpu_s"] for j in js]
            wl = [j["wall_s"] for j in js]
            by_wall = ["timed out" if j["wall_s"] >= a.cpu_seconds else "in time" for j in js]
            summary = ", ".join(f"{v} x{vs.count(v)}" for v in sorted(set(vs)))
            wall_summary = ", ".join(f"{v} x{by_wall.count(v)}" for v in sorted(set(by_wall)))
            print(f"{k:8} {cond:9} {summary:28} {min(cpu):.3f}-{max(cpu):.3f}  {min(wl):.3f}-{max(wl):.3f}  "
                  f"{wall_summary}")
        if len(verdicts) != 1:
            differ += 1
    print(f"\n{len(programs)} programs: {len(programs) - differ} with one verdict throughout, {differ} that differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
