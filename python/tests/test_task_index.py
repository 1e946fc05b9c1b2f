"""The launcher's cache of lm-eval's task index (gpueval_lm_eval/task_index.py): the index it hands
back is the one lm-eval builds, it is rebuilt on any change to a file the build read or to the set
of YAML files, its log lines come again, and what JSON cannot hold exactly is not cached."""

from __future__ import annotations

import logging
import os
import tempfile
import textwrap
import unittest
from pathlib import Path
from unittest import mock

from lm_eval.tasks import TaskManager
from lm_eval.tasks import _index as index_module
from lm_eval.tasks import _yaml_loader as loader_module

from gpueval_lm_eval import task_index

BUILD = index_module.TaskIndex.build  # lm-eval's own, before any install()


class TaskIndexCacheTest(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="gpueval-index-"))
        self.cache = self.tmp / "cache"
        self.root = self.tmp / "tasks"
        self.root.mkdir()
        self.outside = self.tmp / "base.yaml"
        self.outside.write_text("output_type: loglikelihood\ndataset_path: json\nnum_fewshot: 1\n")
        self.write("a.yaml", f"include: {self.outside}\ntask: task_a\ntag: [my_tag]\n")
        self.write("sub/b.yaml", "task: task_b\noutput_type: generate_until\nprocess_results: !function utils.f\n")
        self.write("g.yaml", "group: my_group\ntask: [task_a, task_b]\n")
        self.builds = 0
        env = mock.patch.dict(os.environ, {"GPUEVAL_LM_EVAL_INDEX_CACHE": str(self.cache)})
        env.start()
        self.addCleanup(env.stop)

    def write(self, name: str, text: str) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        return path

    def counted_build(self, paths, resolve_includes=True):
        self.builds += 1
        return BUILD(paths, resolve_includes=resolve_includes)

    def cached(self) -> dict:
        return task_index.cached_build(self.counted_build, index_module, loader_module, [self.root], True)

    def test_the_cached_index_is_lm_evals_and_is_read_back(self):
        first = self.cached()
        second = self.cached()
        self.assertEqual(self.builds, 1)
        self.assertEqual(len(list(self.cache.glob("*.json"))), 1)
        plain = BUILD([self.root])
        self.assertEqual(first, plain)
        self.assertEqual(second, plain)
        self.assertEqual(second["task_a"].cfg["num_fewshot"], 1)  # the include, resolved
        self.assertEqual(second["task_b"].cfg["process_results"], str(self.root / "sub" / "utils.f"))
        self.assertEqual(second["my_tag"].tags, {"task_a"})
        self.assertIs(second["my_group"].kind, index_module.Kind.GROUP)

    def test_any_change_rebuilds(self):
        self.cached()
        self.outside.write_text("output_type: loglikelihood\ndataset_path: json\nnum_fewshot: 3\n")
        os.utime(self.outside, ns=(1, 1))  # a file read outside the folders, edited
        self.assertEqual(self.cached()["task_a"].cfg["num_fewshot"], 3)
        self.assertEqual(self.builds, 2)
        self.write("sub/c.yaml", "task: task_c\n")  # a new file
        self.assertIn("task_c", self.cached())
        self.assertEqual(self.builds, 3)
        b = self.root / "sub" / "b.yaml"
        b.write_text(b.read_text().replace("task_b", "task_x"))  # same size, another time
        os.utime(b, ns=(2, 2))
        index = self.cached()
        self.assertIn("task_x", index)
        self.assertNotIn("task_b", index)
        self.assertEqual(self.builds, 4)
        (self.root / "sub" / "c.yaml").unlink()  # a removed file
        self.assertNotIn("task_c", self.cached())
        self.assertEqual(self.builds, 5)
        self.cached()
        self.assertEqual(self.builds, 5)

    def test_the_builds_log_lines_come_again(self):
        self.write("dup.yaml", "task: task_a\n")
        with self.assertLogs(index_module.log, logging.WARNING) as built:
            self.cached()
        with self.assertLogs(index_module.log, logging.WARNING) as read:
            self.cached()
        self.assertEqual(self.builds, 1)
        self.assertTrue(any("Duplicate task name 'task_a'" in line for line in built.output))
        self.assertEqual(read.output, built.output)

    def test_what_json_cannot_hold_is_not_cached(self):
        self.write("dated.yaml", "task: dated\nmetadata: {released: 2024-01-01}\n")
        self.assertEqual(self.cached(), BUILD([self.root]))
        self.assertEqual(list(self.cache.glob("*.json")), [])
        self.cached()
        self.assertEqual(self.builds, 2)

    def test_off_when_asked(self):
        with mock.patch.dict(os.environ, {"GPUEVAL_LM_EVAL_INDEX_CACHE": "0"}):
            self.assertEqual(self.cached(), BUILD([self.root]))
        self.assertFalse(self.cache.exists())

    def test_task_manager_with_lm_evals_own_tasks(self):
        """lm-eval's ~14,700 YAML files and an include folder, through its TaskManager."""
        plain = TaskManager(include_path=str(self.root))
        self.assertTrue(task_index.install())
        try:
            built = TaskManager(include_path=str(self.root))
            read = TaskManager(include_path=str(self.root))
        finally:
            index_module.TaskIndex.build = staticmethod(BUILD)
            task_index._installed = False
        self.assertEqual(built.task_index, plain.task_index)
        self.assertEqual(read.task_index, plain.task_index)
        self.assertEqual(read.all_tasks, plain.all_tasks)
        self.assertEqual(len(list(self.cache.glob("*.json"))), 1)
        self.assertGreater(len(plain.task_index), 10000)


if __name__ == "__main__":
    unittest.main()
