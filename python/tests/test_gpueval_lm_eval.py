"""Tests of the lm-eval package (gpueval_lm_eval) against the gpueval binary ($GPUEVAL_BIN) and the
shipped models/stories260K, with lm-eval from PyPI and no torch. Run by scripts/test_lm_eval_package.sh
(CTest's Python.LmEvalPackage): python -m unittest discover -s python/tests.

What they hold: lm-eval's requests reach the engine whole and come back in order with the numbers
`gpueval requests` gives for the same lines; the launcher is lm-eval's own CLI with the model
registered; the engine's journal makes a second evaluation compute nothing; lm-eval's generation
kwargs map as its hf model's do; every bad model argument, a missing binary and a model gpueval
cannot run fail in one line before any compute.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "stories260K"
BINARY = os.environ.get("GPUEVAL_BIN") or str(REPO / "build" / "gpueval")

import lm_eval  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from gpueval_lm_eval import GpuevalError, GpuevalLM  # noqa: E402
from gpueval_lm_eval.model import continue_final_message, generation_line, gpus_of  # noqa: E402


def demo_tasks(folder: Path) -> Path:
    """The repository's demo tasks (lm-eval's YAML form) with their data as lm-eval's json loader
    reads it, and a generate_until task over the same stories: folder/tasks."""
    import yaml

    tasks = folder / "tasks"
    tasks.mkdir(parents=True)
    for name in ("demo_choice", "demo_perplexity"):
        cfg = yaml.safe_load((REPO / "tasks" / f"{name}.yaml").read_text())
        data = REPO / "tasks" / cfg["dataset_path"]
        cfg.update(dataset_path="json", dataset_kwargs={"data_files": {"test": str(data)}}, test_split="test")
        (tasks / f"{name}.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    (tasks / "demo_story.yaml").write_text(
        "task: demo_story\ndataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {REPO / 'tasks' / 'demo_choice.jsonl'}\n"
        "test_split: test\noutput_type: generate_until\n"
        'doc_to_text: "{{context}}"\ndoc_to_target: "{{choices[label]}}"\n'
        "generation_kwargs:\n  until: [\".\"]\n  max_gen_toks: 24\n  do_sample: false\n"
        "metric_list:\n  - {metric: exact_match, aggregation: mean, higher_is_better: true}\n"
        "metadata:\n  version: 1.0\n")
    return tasks


def engine_results(lines: list[dict], root: Path) -> list[dict]:
    """`gpueval requests` on `lines` directly (one worker, its own journal)."""
    req, res = root / "direct.jsonl", root / "direct_results.jsonl"
    req.write_text("".join(json.dumps(l) + "\n" for l in lines))
    subprocess.run([BINARY, "requests", "--model", str(MODEL), "--gpus", "cpu:1", "--requests", str(req),
                    "--results", str(res), "--output", str(root / "direct"), "--quiet"], check=True)
    return [json.loads(l) for l in res.read_text().splitlines()]


class MappingTest(unittest.TestCase):
    """lm-eval's arguments as the hf model reads them."""

    def test_generation_kwargs_map_as_hf(self):
        line = generation_line("Q:", {"until": "\n\n", "do_sample": False, "temperature": 0.0}, 256, "</s>")
        self.assertEqual(line, {"type": "generate_until", "context": "Q:", "until": ["\n\n", "</s>"],
                                "max_gen_toks": 256})
        line = generation_line("Q:", {"until": ["a", "b"], "max_gen_toks": 7}, 256, None)
        self.assertEqual((line["until"], line["max_gen_toks"]), (["a", "b"], 7))
        self.assertNotIn("temperature", line)  # greedy unless do_sample is true, as transformers decodes
        line = generation_line("Q:", {"do_sample": True, "temperature": 0.7}, 256, "</s>")
        self.assertEqual((line["temperature"], line["top_k"], line["top_p"]), (0.7, -1, -1.0))
        # lm-eval 0.4.13's normalize_gen_kwargs: a temperature without do_sample samples; aliases of max_gen_toks.
        line = generation_line("Q:", {"temperature": 0.5, "top_k": 40, "max_new_tokens": 9}, 256, None)
        self.assertEqual((line["temperature"], line["top_k"], line["max_gen_toks"]), (0.5, 40, 9))
        line = generation_line("Q:", {"do_sample": False, "temperature": 0.5}, 256, None)
        self.assertNotIn("temperature", line)
        with self.assertRaisesRegex(GpuevalError, "generation_kwargs num_beams not supported"):
            generation_line("Q:", {"num_beams": 4}, 256, None)
        with self.assertRaisesRegex(GpuevalError, "until must be a string or a list"):
            generation_line("Q:", {"until": 3}, 256, None)

    def test_devices(self):
        self.assertEqual(gpus_of(None, None), "cpu")
        self.assertEqual(gpus_of(None, "cuda:1"), "1")
        self.assertEqual(gpus_of(None, "cuda"), "all")
        self.assertEqual(gpus_of("0-3", "cuda:1"), "0-3")
        self.assertEqual(gpus_of(0, None), "0")  # lm-eval's arg parser makes gpus=0 an int
        with self.assertRaisesRegex(GpuevalError, "device 'mps' is not supported"):
            gpus_of(None, "mps")

    def test_continue_final_message_cuts_after_the_last_message(self):
        msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "The answer is"}]
        rendered = "<|user|>Hi<|end|><|assistant|>The answer is<|end|>\n"
        self.assertEqual(continue_final_message(rendered, msgs), "<|user|>Hi<|end|><|assistant|>The answer is")


class ModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="gpueval-lm-eval-test-"))
        cls.tasks = demo_tasks(cls.tmp)
        cls.journal = cls.tmp / "journal"
        cls.lm = GpuevalLM(pretrained=str(MODEL), gpus="cpu:2", dtype="float32", batch_size="auto",
                           binary=BINARY, journal_dir=str(cls.journal))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def evaluate(self, tasks, **kw):
        tm = TaskManager(include_path=str(self.tasks), include_defaults=False)
        return lm_eval.simple_evaluate(model=self.lm, tasks=tasks, log_samples=True, task_manager=tm,
                                       bootstrap_iters=0, **kw)

    def test_simple_evaluate_gets_the_engines_numbers(self):
        res = self.evaluate(["demo_choice", "demo_perplexity", "demo_story"])
        lines, got = [], []
        for s in sorted(res["samples"]["demo_choice"], key=lambda s: s["doc_id"]):
            for (ctx, cont), resp in zip(s["arguments"], s["resps"]):
                lines.append({"type": "loglikelihood", "context": ctx, "continuation": cont})
                got.append((float(resp[0][0]), str(resp[0][1])))
        for s in sorted(res["samples"]["demo_perplexity"], key=lambda s: s["doc_id"]):
            lines.append({"type": "loglikelihood_rolling", "context": s["arguments"][0][0]})
            got.append((float(s["resps"][0][0]), "None"))
        for s in sorted(res["samples"]["demo_story"], key=lambda s: s["doc_id"]):
            lines.append({"type": "generate_until", "context": s["arguments"][0][0], "until": [".", "</s>"],
                          "max_gen_toks": 24})
            got.append((s["resps"][0][0], "None"))
        direct = engine_results(lines, self.tmp)
        self.assertEqual(len(direct), len(got))
        for line, (value, greedy), d in zip(lines, got, direct):
            if line["type"] == "generate_until":
                self.assertEqual(value, d["text"])
            else:
                # The same requests through another plan (batches, one worker): equal within fp32 rounding.
                self.assertAlmostEqual(value, d["logprob"], delta=1e-4)
                if line["type"] == "loglikelihood":
                    self.assertEqual(greedy, str(d["is_greedy"]))
        acc = res["results"]["demo_choice"]["acc,none"]
        self.assertGreater(acc, 0.25)  # the demo task is easy for stories260K; chance is 0.25
        self.assertGreater(res["results"]["demo_perplexity"]["word_perplexity,none"], 1.0)
        self.assertEqual(len(res["samples"]["demo_story"]), len(res["samples"]["demo_choice"]))

    def evaluate_logged(self, tasks, **kw):
        """evaluate(), with what the engine writes on stderr (file descriptor 2) captured."""
        with tempfile.TemporaryFile(mode="w+") as log:
            sys.stderr.flush()
            saved = os.dup(2)
            os.dup2(log.fileno(), 2)
            try:
                res = self.evaluate(tasks, **kw)
            finally:
                os.dup2(saved, 2)
                os.close(saved)
            log.seek(0)
            return res, log.read()

    def test_a_second_evaluation_reads_the_journal(self):
        first, log1 = self.evaluate_logged(["demo_choice"], limit=6)
        self.assertIn("complete: 24 requests (24 computed, 0 from the journal)", log1)
        folders = {p.name for p in self.journal.iterdir() if p.is_dir()}
        second, log2 = self.evaluate_logged(["demo_choice"], limit=6)
        self.assertIn("complete: 24 requests (0 computed, 24 from the journal)", log2)
        self.assertNotIn("started worker", log2)
        self.assertEqual({p.name for p in self.journal.iterdir() if p.is_dir()}, folders)
        self.assertEqual(first["results"]["demo_choice"], second["results"]["demo_choice"])

    def test_bad_arguments_fail_before_any_compute(self):
        cases = [
            (dict(pretrained=str(MODEL), binary=BINARY, revision="main"), "model_args revision not supported"),
            (dict(pretrained=str(MODEL), binary="/nonexistent/gpueval"), "binary=/nonexistent/gpueval is not an"),
            (dict(pretrained=str(self.tmp), binary=BINARY), "not a checkpoint directory"),
            (dict(pretrained=str(MODEL), binary=BINARY, dtype="int8"), "dtype=int8 is not supported"),
            (dict(pretrained=str(MODEL), binary=BINARY, batch_size="big"), "batch_size 'big'"),
            (dict(pretrained=str(MODEL), binary=BINARY, gpus="cpu:x"), "--gpus"),
        ]
        for kwargs, message in cases:
            with self.subTest(message=message):
                with self.assertRaises(GpuevalError) as ctx:
                    GpuevalLM(journal_dir=str(self.tmp / "never"), **kwargs)
                self.assertIn(message, str(ctx.exception))
                self.assertEqual(len(str(ctx.exception).splitlines()), 1)
        self.assertFalse((self.tmp / "never").exists())
        unsupported = self.tmp / "unsupported"
        unsupported.mkdir()
        (unsupported / "config.json").write_text(json.dumps({"model_type": "bert", "vocab_size": 10}))
        with self.assertRaisesRegex(GpuevalError, "bert"):
            GpuevalLM(pretrained=str(unsupported), binary=BINARY)
        env = dict(os.environ, PATH="/usr/bin:/bin")
        env.pop("GPUEVAL_BIN", None)
        code = ("from gpueval_lm_eval import GpuevalLM\n"
                f"GpuevalLM(pretrained={str(MODEL)!r})\n")
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("the gpueval binary was not found", proc.stderr)


class BridgeTest(unittest.TestCase):
    """The bridge a gpueval run will call for lm-eval tasks (route 2): lm-eval's requests out as
    `gpueval requests` lines, the engine's results back through lm-eval's metrics, the same scores as
    lm-eval with the gpueval model (route 1)."""

    def test_requests_out_and_scores_back_give_the_models_scores(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            tasks = demo_tasks(tmp)
            common = ["--tasks", "demo_choice,demo_perplexity,demo_story", "--include_path", str(tasks),
                      "--include_defaults", "false", "--limit", "10", "--model", str(MODEL), "--binary", BINARY]
            bridge = [sys.executable, "-m", "gpueval_lm_eval.bridge"]
            subprocess.run(bridge + ["requests", *common, "--out", str(tmp / "requests.jsonl")], check=True)
            lines = [json.loads(l) for l in (tmp / "requests.jsonl").read_text().splitlines()]
            self.assertEqual(len(lines), 10 * 4 + 10 + 10)
            self.assertEqual(len({l["key"] for l in lines}), len(lines))
            subprocess.run([BINARY, "requests", "--model", str(MODEL), "--gpus", "cpu:2", "--requests",
                            str(tmp / "requests.jsonl"), "--results", str(tmp / "results.jsonl"), "--output",
                            str(tmp / "engine"), "--quiet"], check=True)
            subprocess.run(bridge + ["score", *common, "--requests", str(tmp / "requests.jsonl"), "--responses",
                                     str(tmp / "results.jsonl"), "--out", str(tmp / "scores.json")], check=True)
            scores = json.loads((tmp / "scores.json").read_text())
            lm = GpuevalLM(pretrained=str(MODEL), gpus="cpu:1", binary=BINARY, journal_dir=str(tmp / "journal"))
            tm = TaskManager(include_path=str(tasks), include_defaults=False)
            direct = lm_eval.simple_evaluate(model=lm, tasks=["demo_choice", "demo_perplexity", "demo_story"],
                                             limit=10, task_manager=tm, bootstrap_iters=0)
            for task in ("demo_choice", "demo_perplexity", "demo_story"):
                for metric, value in direct["results"][task].items():
                    if isinstance(value, float) and "stderr" not in metric:
                        # The same requests in another plan (one list, not one per type): fp32 rounding.
                        self.assertAlmostEqual(scores["results"][task][metric], value, delta=1e-6 * max(1, abs(value)),
                                               msg=f"{task} {metric}")
            # Each task's samples file as lm-eval's --log_samples writes it, and its hash.
            samples = [json.loads(l) for l in scores["samples"]["demo_choice"].splitlines()]
            self.assertEqual([s["doc_id"] for s in samples], list(range(10)))
            self.assertIn("gen_args_0", samples[0]["arguments"])
            self.assertEqual(len(scores["task_hashes"]["demo_choice"]), 64)
            # Responses that do not match the requests: one line, exit 1.
            (tmp / "short.jsonl").write_text("\n".join((tmp / "results.jsonl").read_text().splitlines()[:5]))
            proc = subprocess.run(bridge + ["score", *common, "--requests", str(tmp / "requests.jsonl"),
                                            "--responses", str(tmp / "short.jsonl"), "--out", str(tmp / "x.json")],
                                  capture_output=True, text=True)
            self.assertEqual(proc.returncode, 1)
            self.assertIn("5 responses for 60 requests", proc.stderr)


class RunConfigTest(unittest.TestCase):
    """lm-eval's tasks inside a gpueval run (route 2): `tasks: [..., lm_eval:NAME]` with the config's
    `lm_eval:` mapping; gpueval computes their requests in its own plan and journal, lm-eval scores them,
    and the run's report and history hold them beside gpueval's own tasks."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="gpueval-route2-test-"))
        cls.tasks = demo_tasks(cls.tmp)
        (cls.tasks / "demo_group.yaml").write_text(
            "group: demo_group\ntask: [demo_choice, demo_story]\n"
            "aggregate_metric_list:\n  - {metric: acc, weight_by_size: true}\nmetadata:\n  version: 2.0\n")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def config(self, name: str, tasks: list[str], **lm_eval_keys) -> Path:
        keys = {"python": sys.executable, "include_path": str(self.tasks), "include_defaults": False, **lm_eval_keys}
        cfg = {"model": str(MODEL), "tasks": tasks, "limit": 6, "gpus": "cpu:2", "dtype": "float32",
               "output": str(self.tmp / name / "out"), "history": str(self.tmp / name / "history.sqlite"),
               "lm_eval": keys}
        path = self.tmp / f"{name}.yaml"
        path.write_text(json.dumps(cfg))  # JSON is YAML
        return path

    def run_gpueval(self, config: Path, *flags: str) -> subprocess.CompletedProcess:
        return subprocess.run([BINARY, "run", str(config), *flags], capture_output=True, text=True)

    def test_lm_eval_tasks_are_scored_beside_gpuevals_own_and_resume_from_the_journal(self):
        cfg = self.config("mixed", ["demo_perplexity_text", "lm_eval:demo_group", "lm_eval:demo_perplexity"])
        first = self.run_gpueval(cfg)
        self.assertEqual(first.returncode, 0, first.stderr[-3000:])
        out = self.tmp / "mixed" / "out"
        results = json.loads((out / "results.json").read_text())
        # lm-eval with the gpueval model (route 1) on the same tasks: the same metrics.
        lm = GpuevalLM(pretrained=str(MODEL), gpus="cpu:1", binary=BINARY, journal_dir=str(self.tmp / "journal"))
        tm = TaskManager(include_path=str(self.tasks), include_defaults=False)
        direct = lm_eval.simple_evaluate(model=lm, tasks=["demo_group", "demo_perplexity"], limit=6,
                                         task_manager=tm, log_samples=True)
        for task in ("demo_choice", "demo_story", "demo_perplexity", "demo_group"):
            for metric, value in direct["results"][task].items():
                if isinstance(value, float) and "stderr" not in metric:
                    self.assertAlmostEqual(results["results"][task][metric], value, delta=1e-6 * max(1, abs(value)),
                                           msg=f"{task} {metric}")
        self.assertIn("word_perplexity,none", results["results"]["demo_perplexity_text"])  # gpueval's own
        self.assertEqual(results["groups"]["demo_group"]["alias"], "demo_group")
        self.assertEqual(results["group_subtasks"]["demo_group"], ["demo_choice", "demo_story"])
        self.assertEqual(results["n-samples"]["demo_choice"], {"original": 60, "effective": 6})
        self.assertEqual({k: v for k, v in results["versions"].items() if k != "demo_perplexity_text"},
                         json.loads(json.dumps(direct["versions"], default=str)))
        self.assertEqual(results["higher_is_better"]["demo_perplexity"]["word_perplexity"], False)
        self.assertEqual(results["configs"]["demo_story"]["output_type"], "generate_until")
        samples = (out / "samples_demo_story.jsonl").read_text().splitlines()
        self.assertEqual(len(samples), 6)
        want = {s["doc_id"]: s["resps"] for s in direct["samples"]["demo_story"]}
        for line in samples:
            s = json.loads(line)
            self.assertEqual(s["resps"], [[str(r) for r in want[s["doc_id"]][0]]])  # the same generations
        report = (out / "report.md").read_text()
        self.assertIn("| demo_choice |", report)
        self.assertIn("| demo_group |", report)
        for name in ("requests.jsonl", "responses.jsonl", "scores.json"):
            self.assertTrue((out / "lm_eval" / name).is_file(), name)
        self.assertIn("lm-eval builds the requests of demo_group,demo_perplexity", first.stderr)
        # The history holds lm-eval's tasks and group as it holds gpueval's.
        hist = subprocess.run([BINARY, "history", "--history", str(self.tmp / "mixed" / "history.sqlite")],
                              capture_output=True, text=True)
        self.assertEqual(hist.returncode, 0, hist.stderr)
        for name in ("demo_choice", "demo_group", "demo_perplexity", "demo_perplexity_text"):
            self.assertIn(name, hist.stdout)
        # The same command again: every result from the journal, the same report.
        second = self.run_gpueval(cfg)
        self.assertEqual(second.returncode, 0, second.stderr[-3000:])
        self.assertRegex(second.stderr, r"journal .*: computed 0 requests in 0 batches")
        again = json.loads((out / "results.json").read_text())
        self.assertEqual(again["results"], results["results"])

    def test_a_config_lm_eval_cannot_honour_fails_in_one_line(self):
        cases = [
            (self.config("nopython", ["lm_eval:demo_choice"], python=str(self.tmp / "no-python")),
             "lm_eval.python"),
            (self.config("clash", ["demo_perplexity", "lm_eval:demo_perplexity"]),
             "'demo_perplexity' is both one of gpueval's tasks and an lm-eval task of this run"),
            (self.config("unknown", ["lm_eval:no_such_task"]), "lm-eval's requests step failed"),
        ]
        for cfg, message in cases:
            proc = self.run_gpueval(cfg)
            self.assertNotEqual(proc.returncode, 0, cfg)
            self.assertIn(message, proc.stderr)
            self.assertFalse((cfg.parent / cfg.stem / "out" / "results.json").exists())
        bad = self.tmp / "bad.yaml"
        bad.write_text(f"model: {MODEL}\ntasks: ['lm_eval:']\n")
        proc = self.run_gpueval(bad)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("bad.yaml:2: key 'tasks' has 'lm_eval:' without a task name after it", proc.stderr)


class LauncherTest(unittest.TestCase):
    def test_lm_evals_cli_runs_the_gpueval_model(self):
        launcher = shutil.which("gpueval-lm-eval", path=os.path.dirname(sys.executable))
        self.assertIsNotNone(launcher, "pip install ./python puts gpueval-lm-eval beside the interpreter")
        with tempfile.TemporaryDirectory() as tmp:
            tasks = demo_tasks(Path(tmp))
            out = Path(tmp) / "out"
            args = [launcher, "run", "--model", "gpueval", "--model_args",
                    f"pretrained={MODEL},gpus=cpu:1,dtype=float32,binary={BINARY},journal_dir={tmp}/journal",
                    "--tasks", "demo_choice", "--include_path", str(tasks), "--limit", "8", "--batch_size", "auto",
                    "--output_path", str(out), "--log_samples"]
            proc = subprocess.run(args, capture_output=True, text=True)
            self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
            results = list(out.rglob("results_*.json"))
            self.assertEqual(len(results), 1, proc.stderr[-2000:])
            data = json.loads(results[0].read_text())
            self.assertEqual(data["config"]["model"], "gpueval")
            self.assertIn("acc,none", data["results"]["demo_choice"])
            self.assertEqual(len(list(out.rglob("samples_demo_choice_*.jsonl"))), 1)
            # A bad model argument: lm-eval's CLI exits non-zero with gpueval's line, nothing computed.
            bad = args[:5] + [f"pretrained={MODEL},binary={BINARY},parallelize=True"] + args[6:]
            proc = subprocess.run(bad, capture_output=True, text=True)
            self.assertNotEqual(proc.returncode, 0)
            self.assertIn("gpueval: model_args parallelize not supported", proc.stderr)


if __name__ == "__main__":
    unittest.main()
