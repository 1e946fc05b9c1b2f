"""lm-eval's task index, cached between launches. Every lm-eval process starts by parsing each
task YAML it can see (about 14,700 in lm-eval 0.4.13: 6 s of a 2-core machine), on every run, before
any request exists. `install()` makes lm-eval's own TaskIndex.build keep what it built in a JSON file
and hand it back on the next launch while nothing it read has changed:

- the key: lm-eval's version, the folders indexed (resolved) and the include flag;
- valid while every YAML file under those folders is the same set, each with the same size and
  modification time, and so is every file the build read outside them (an `include:` of a file
  elsewhere): any edit, new or removed file rebuilds the index;
- the index as lm-eval builds it: the same entries (name, kind, file, config, tags), and the log
  lines the build wrote (a task overriding another) written again;
- stored only when JSON holds it exactly (a config with a date or a non-string key is not cached),
  written atomically, in $GPUEVAL_LM_EVAL_INDEX_CACHE (default ~/.cache/gpueval/lm_eval_index);
  GPUEVAL_LM_EVAL_INDEX_CACHE=0 turns the cache off. Never a pickle.

Where lm-eval has no TaskIndex (before 0.4.10), install() does nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

_IGNORE_DIRS = {"__pycache__", ".ipynb_checkpoints"}
_FORMAT = 1
_installed = False


def cache_dir() -> Path | None:
    """The cache's folder, or None when GPUEVAL_LM_EVAL_INDEX_CACHE=0."""
    env = os.environ.get("GPUEVAL_LM_EVAL_INDEX_CACHE")
    if env == "0":
        return None
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "gpueval" / "lm_eval_index"


def _yaml_files(root: Path) -> list[str]:
    """Every *.yaml under root, as lm-eval's index walks them (its ignored folders skipped)."""
    found = []
    for d, dirs, files in os.walk(root, followlinks=True):
        dirs[:] = [x for x in dirs if x not in _IGNORE_DIRS]
        found.extend(os.path.join(d, f) for f in files if f.endswith(".yaml"))
    return sorted(found)


def _stamp(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _files_state(roots: list[Path], outside: list[str]) -> dict[str, Any]:
    files = {}
    for root in roots:
        for f in _yaml_files(root):
            files[f] = _stamp(f)
    return {"files": files, "outside": {f: _stamp(f) for f in outside}}


def _entry_json(entry: Any) -> dict[str, Any]:
    return {"name": entry.name, "kind": entry.kind.name,
            "yaml_path": None if entry.yaml_path is None else str(entry.yaml_path),
            "cfg": entry.cfg, "tags": sorted(entry.tags)}


def _entry_of(d: dict[str, Any], entry_cls: Any, kind_cls: Any) -> Any:
    return entry_cls(name=d["name"], kind=kind_cls[d["kind"]],
                     yaml_path=None if d["yaml_path"] is None else Path(d["yaml_path"]),
                     cfg=d["cfg"], tags=set(d["tags"]))


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[list[Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append([record.levelno, record.getMessage()])


def cached_build(build: Any, index_module: Any, loader_module: Any, paths: Any, resolve_includes: bool) -> dict:
    """lm-eval's TaskIndex.build(paths, resolve_includes=...), from the cache when it still holds."""
    where = cache_dir()
    if where is None:
        return build(paths, resolve_includes=resolve_includes)
    from importlib.metadata import version

    roots = [Path(p).expanduser().resolve() for p in paths]
    # The folders as given and as resolved: the entries' files are named as lm-eval walks them.
    key = json.dumps([_FORMAT, version("lm_eval"), [os.path.abspath(str(p)) for p in paths],
                      [str(r) for r in roots], bool(resolve_includes)])
    file = where / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")
    log = index_module.log
    try:
        stored = json.loads(file.read_text(encoding="utf-8"))
        if stored["key"] == key and _files_state(roots, list(stored["state"]["outside"])) == stored["state"]:
            for level, message in stored["log"]:
                log.log(level, "%s", message)
            return {name: _entry_of(d, index_module.Entry, index_module.Kind) for name, d in stored["index"].items()}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    # Built by lm-eval itself, recording every file it read and every line it logged.
    read: set[str] = set()
    inner = loader_module.load_yaml

    def recording_load_yaml(path: Any, *a: Any, **kw: Any) -> Any:
        read.add(str(Path(path).expanduser().resolve()))
        return inner(path, *a, **kw)

    collect = _Collect()
    log.addHandler(collect)
    loader_module.load_yaml, index_module.load_yaml = recording_load_yaml, recording_load_yaml
    try:
        index = build(paths, resolve_includes=resolve_includes)
    finally:
        loader_module.load_yaml, index_module.load_yaml = inner, inner
        log.removeHandler(collect)
    try:
        state = _files_state(roots, [])
        state["outside"] = {f: _stamp(f) for f in sorted(read) if f not in state["files"]}
        body = {"key": key, "state": state, "log": collect.records,
                "index": {name: _entry_json(e) for name, e in index.items()}}
        text = json.dumps(body, ensure_ascii=False, allow_nan=False)
        back = json.loads(text)
        if back["index"] != body["index"] or any(
            _entry_of(back["index"][n], index_module.Entry, index_module.Kind) != e for n, e in index.items()
        ):
            return index  # not exactly representable in JSON: not cached
        where.mkdir(parents=True, exist_ok=True)
        tmp = file.with_name(f"{file.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, file)
    except (OSError, ValueError, TypeError):
        pass  # a cache that cannot be written is no cache: the index is still right
    return index


def install() -> bool:
    """Makes lm-eval's TaskIndex.build cached (once per process); False where lm-eval has none."""
    global _installed
    if _installed:
        return True
    try:
        from lm_eval.tasks import _index as index_module
        from lm_eval.tasks import _yaml_loader as loader_module
    except ImportError:
        return False
    task_index = getattr(index_module, "TaskIndex", None)
    if task_index is None or not hasattr(loader_module, "load_yaml") or not hasattr(index_module, "load_yaml"):
        return False
    build = task_index.build

    def build_cached(paths: Any, *, resolve_includes: bool = True) -> dict:
        return cached_build(build, index_module, loader_module, list(paths), resolve_includes)

    task_index.build = staticmethod(build_cached)
    _installed = True
    return True
