#!/usr/bin/env python3
"""Every shell command in README.md and docs/*.md works as written, or the docs say why it cannot run here.

  tests/scripts/docs_commands_test.py BUILD_DIR      (CTest: Docs.CommandsRunAsWritten)

Each ```sh block must follow, on the line before its fence, one of
  <!-- docs-test: run -->                      the test runs the block
  <!-- docs-test: not run: REASON -->          the reader sees the reason in the page's source
A block without one fails the test (file and line named). A `run` block is one bash script
(`set -e`), run from a scratch copy of the checkout's configs/, models/ and tasks/ (scripts/ linked,
build/gpueval the built binary, ../shared beside it as beside the clone), with its own history,
calibration cache and HOME, so nothing it writes lands in the checkout; it must exit 0 within 300 s.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MARK = re.compile(r"^<!-- docs-test: (run|not run: .+) -->$")


def blocks(path):
    """(line number, mark or None, text) of each ```sh block in a markdown file."""
    lines = open(path).read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```sh":
            start, body = i + 1, []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            prev = lines[start - 2].strip() if start >= 2 else ""
            m = MARK.match(prev)
            out.append((start, m.group(1) if m else None, "\n".join(body)))
        i += 1
    return out


def scratch(build_dir):
    top = tempfile.mkdtemp(prefix="gpueval-docs-")
    repo = os.path.join(top, "gpueval")
    os.makedirs(os.path.join(repo, "build"))
    for d in ("configs", "models", "tasks"):
        shutil.copytree(os.path.join(REPO, d), os.path.join(repo, d))
    os.symlink(os.path.join(REPO, "scripts"), os.path.join(repo, "scripts"))
    os.symlink(os.path.join(os.path.abspath(build_dir), "gpueval"), os.path.join(repo, "build", "gpueval"))
    shared = os.path.join(REPO, "..", "shared")
    if os.path.isdir(shared):
        os.symlink(os.path.abspath(shared), os.path.join(top, "shared"))
    return top, repo


def main():
    build_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "build")
    pages = [os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
    unmarked, failed, ran, skipped = [], [], 0, 0
    top, repo = scratch(build_dir)
    env = dict(os.environ, HOME=os.path.join(top, "home"), GPUEVAL_HISTORY=os.path.join(top, "history.sqlite"),
               GPUEVAL_CACHE_DIR=os.path.join(top, "cache"), GPUEVAL_TASKS_DIR=os.path.join(repo, "tasks"))
    try:
        for page in pages:
            name = os.path.relpath(page, REPO)
            for line, mark, text in blocks(page):
                if mark is None:
                    unmarked.append(f"{name}:{line}: a ```sh block with no <!-- docs-test: run --> or "
                                    f"<!-- docs-test: not run: REASON --> before it")
                    continue
                if mark != "run":
                    skipped += 1
                    print(f"{name}:{line}: not run ({mark[len('not run: '):]})")
                    continue
                if "../shared" in text and not os.path.isdir(os.path.join(top, "shared")):
                    skipped += 1
                    print(f"{name}:{line}: not run (no ../shared beside the checkout)")
                    continue
                ran += 1
                print(f"{name}:{line}: running\n{text}", flush=True)
                try:
                    p = subprocess.run(["bash", "-e", "-c", text], cwd=repo, env=env, capture_output=True, text=True,
                                       timeout=300)
                    rc, tail = p.returncode, (p.stdout + p.stderr)[-2000:]
                except subprocess.TimeoutExpired:
                    rc, tail = "timeout", ""
                if rc != 0:
                    failed.append(f"{name}:{line}: exit {rc}\n{tail}")
    finally:
        shutil.rmtree(top, ignore_errors=True)
    for u in unmarked + failed:
        print("FAIL " + u)
    print(f"{ran} blocks run, {skipped} not run (reasons above), {len(unmarked)} unmarked, {len(failed)} failed")
    sys.exit(1 if unmarked or failed or ran == 0 else 0)


if __name__ == "__main__":
    main()
