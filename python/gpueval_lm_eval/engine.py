"""The gpueval binary, as the package calls it: finding it, `gpueval requests` on a request list
(the requests written as JSONL, the results read back in order), `--describe` for what the model
is, and a `gpueval chat-template` process kept open for prompts. Knows nothing of lm-eval's
Instances: model.py turns them into these lines and back.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from typing import Any


class GpuevalError(RuntimeError):
    """A one-line error the user can act on: a missing binary, a bad model argument, a failed run."""


def find_binary(given: str | None = None) -> str:
    """binary=PATH, else $GPUEVAL_BIN, else `gpueval` on PATH."""
    for candidate, origin in ((given, "binary="), (os.environ.get("GPUEVAL_BIN"), "$GPUEVAL_BIN")):
        if candidate:
            if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
                raise GpuevalError(f"gpueval: {origin}{candidate} is not an executable file")
            return os.path.abspath(candidate)
    found = shutil.which("gpueval")
    if found:
        return found
    raise GpuevalError(
        "gpueval: the gpueval binary was not found: build it (bash scripts/build.sh) and pass "
        "binary=PATH in --model_args, set GPUEVAL_BIN=PATH, or put it on PATH"
    )


def default_journal_root() -> str:
    """$GPUEVAL_JOURNAL_ROOT, else $XDG_CACHE_HOME/gpueval/lm_eval (~/.cache/gpueval/lm_eval)."""
    root = os.environ.get("GPUEVAL_JOURNAL_ROOT")
    if root:
        return root
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "gpueval", "lm_eval")


class Engine:
    """`gpueval requests` with a fixed model and engine flags."""

    def __init__(self, binary: str, model: str, flags: list[str], journal_root: str):
        self.binary = binary
        self.model = model
        self.flags = flags
        self.journal_root = journal_root

    def _base(self) -> list[str]:
        return [self.binary, "requests", "--model", self.model, *self.flags]

    def describe(self) -> dict[str, Any]:
        """What the model is, checked as a run checks it; GpuevalError with gpueval's line otherwise."""
        proc = subprocess.run(
            [*self._base(), "--describe"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        if proc.returncode != 0:
            lines = [l for l in proc.stderr.splitlines() if l.strip() and not l.startswith("[sched]")]
            raise GpuevalError(lines[-1] if lines else f"gpueval requests --describe failed ({proc.returncode})")
        return json.loads(proc.stdout)

    def run(self, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Every request at once; its results in the same order. The engine's log and progress go
        to this process's stderr; a failure raises GpuevalError (what was computed stays in the
        journal, so the same call computes only the rest)."""
        if not lines:
            return []
        os.makedirs(self.journal_root, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="requests-", dir=self.journal_root) as tmp:
            requests = os.path.join(tmp, "requests.jsonl")
            results = os.path.join(tmp, "results.jsonl")
            with open(requests, "w", encoding="utf-8") as f:
                for line in lines:
                    f.write(json.dumps(line, ensure_ascii=False))
                    f.write("\n")
            cmd = [*self._base(), "--requests", requests, "--results", results, "--journal-root", self.journal_root]
            code = subprocess.call(cmd)
            if code != 0:
                how = f"was killed by signal {-code}" if code < 0 else f"exited with {code} (its error is above)"
                raise GpuevalError(
                    f"gpueval requests {how}; the results computed are in its journal under "
                    f"{self.journal_root}: the same command goes on from there"
                )
            with open(results, encoding="utf-8") as f:
                out = [json.loads(l) for l in f if l.strip()]
        if len(out) != len(lines):
            raise GpuevalError(f"gpueval requests gave {len(out)} results for {len(lines)} requests")
        return out


class ChatTemplates:
    """One `gpueval chat-template` process per template and options, kept open: lm-eval renders a
    prompt at a time, and one process per prompt would cost a start-up each."""

    def __init__(self, binary: str, model: str, name: str | None = None):
        cmd = [binary, "chat-template", "--model", model]
        if name:
            cmd += ["--name", name]
        self._cmd = cmd
        self._proc: subprocess.Popen | None = None

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool, **kwargs: Any) -> dict:
        if self._proc is None:
            self._proc = subprocess.Popen(
                self._cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                encoding="utf-8",
            )
        line = dict(kwargs)
        line["messages"] = messages
        line["add_generation_prompt"] = add_generation_prompt
        assert self._proc.stdin is not None and self._proc.stdout is not None
        try:
            self._proc.stdin.write(json.dumps(line, ensure_ascii=False) + "\n")
            self._proc.stdin.flush()
            reply = self._proc.stdout.readline()
        except BrokenPipeError:
            reply = ""
        if not reply:
            err = self._proc.stderr.read() if self._proc.stderr else ""
            self._proc = None
            raise GpuevalError(err.strip().splitlines()[-1] if err.strip() else "gpueval chat-template ended")
        return json.loads(reply)

    def close(self) -> None:
        if self._proc is not None:
            self._proc.stdin.close()  # type: ignore[union-attr]
            self._proc.wait()
            self._proc = None
