#!/usr/bin/env python3
"""scripts/gpu/summarize.py: the GPU check's figures fail when they are impossible or meaningless.

Run by CTest as GpuCheckScript.SummarizeFailsImpossibleFigures (python3's unittest; no torch).
Each case writes the files a finished run leaves (results.json, status.json) and the model's
config.json + safetensors header, then runs summarize.py's commands as gpu_check.sh does.
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SUMMARIZE = os.path.join(HERE, "..", "..", "scripts", "gpu", "summarize.py")
sys.path.insert(0, os.path.dirname(SUMMARIZE))
import summarize  # noqa: E402

# A tied Llama shape: 2 layers of hidden 64, MLP 256, 4 heads of 16 (2 kv heads), vocab 1000.
V, D, L, FF, KV = 1000, 64, 2, 256, 32
LAYER = {"self_attn.q_proj.weight": [D, D], "self_attn.k_proj.weight": [KV, D], "self_attn.v_proj.weight": [KV, D],
         "self_attn.o_proj.weight": [D, D], "mlp.gate_proj.weight": [FF, D], "mlp.up_proj.weight": [FF, D],
         "mlp.down_proj.weight": [D, FF], "input_layernorm.weight": [D], "post_attention_layernorm.weight": [D]}
BODY = L * sum(math.prod(s) for s in LAYER.values()) + D  # the layers and the final norm


def write_model(d, tied=True):
    shapes = {"model.embed_tokens.weight": [V, D], "model.norm.weight": [D]}
    for i in range(L):
        for k, s in LAYER.items():
            shapes[f"model.layers.{i}.{k}"] = s
    if not tied:
        shapes["lm_head.weight"] = [V, D]
    header, off = {}, 0
    for k, s in shapes.items():
        n = 4 * math.prod(s)
        header[k] = {"dtype": "F32", "shape": s, "data_offsets": [off, off + n]}
        off += n
    blob = json.dumps(header).encode()
    with open(os.path.join(d, "model.safetensors"), "wb") as f:  # the header alone: summarize reads no data
        f.write(struct.pack("<Q", len(blob)) + blob)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"hidden_size": D, "num_hidden_layers": L, "vocab_size": V, "tie_word_embeddings": tied}, f)


def write_run(d, timing, elapsed_s=2.0, tokens_requested=52000, items=400):
    results = {"results": {"mmlu_anatomy": {"acc,none": 0.25}},
               "batching": {"batches": 10, "items": items, "tokens_requested": tokens_requested,
                            "tokens_computed": timing.get("tokens_computed", 0) if timing else 0},
               "total_evaluation_time_seconds": "3.5"}
    if timing is not None:
        results["timing"] = timing
    with open(os.path.join(d, "results.json"), "w") as f:
        json.dump(results, f)
    with open(os.path.join(d, "status.json"), "w") as f:
        json.dump({"elapsed_s": elapsed_s, "task_progress": {"mmlu_anatomy": {"documents": 100, "documents_done": 100}}}, f)


def timing(compute_s, computed=9600, requested=52000, scored=400):
    return {"compute_s": compute_s, "first_batch_s": 0.01, "before_first_batch_s": 0.3, "tokens_requested": requested,
            "tokens_computed": computed, "tokens_scored": scored,
            "workers": [{"name": "cpu:0", "load_s": 0.81, "busy_s": compute_s, "batches": 10,
                         "tokens_requested": requested, "tokens_computed": computed, "tokens_scored": scored}]}


PEAK = {"peak_flops": 100e9, "source": "test: 100 GFLOP/s"}


class Summarize(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.model_dir = os.path.join(self.dir, "model")
        self.run_dir = os.path.join(self.dir, "run")
        os.makedirs(self.model_dir)
        os.makedirs(self.run_dir)
        write_model(self.model_dir)

    def tearDown(self):
        self.tmp.cleanup()

    def cli(self, *args):
        """summarize.py as gpu_check.sh runs it; its JSON."""
        out = subprocess.run([sys.executable, SUMMARIZE, *args], capture_output=True, text=True, check=True).stdout
        return json.loads(out)

    def files(self, hf=None):
        paths = {}
        for name, value in (("model", summarize.model_info(self.model_dir)), ("peak", PEAK), ("hf", hf)):
            if value is not None:
                paths[name] = os.path.join(self.dir, name + ".json")
                with open(paths[name], "w") as f:
                    json.dump(value, f)
        return paths

    def test_model_flops_count_the_layers_and_the_head_apart(self):
        m = summarize.model_info(self.model_dir)
        self.assertEqual(m["body_params"], BODY)
        self.assertEqual(m["params"], BODY + V * D)  # tied: the embedding once
        self.assertEqual(m["head_flops_per_row"], 2 * V * D)
        write_model(self.model_dir, tied=False)
        self.assertEqual(summarize.model_info(self.model_dir)["body_params"], BODY)
        self.assertEqual(summarize.flops_per_token(m, 100), 2 * BODY + 2 * L * D * 100)

    def test_the_issue_case_elapsed_shorter_than_load_fails(self):
        # What the old summarize.py turned into 6.8e12 tok/s: status.json's elapsed_s (0.17 s) shorter
        # than a worker's load (0.81 s), and no measured window in results.json.
        write_run(self.run_dir, timing=None, elapsed_s=0.17)
        p = self.files()
        run = self.cli("run", self.run_dir, p["model"], p["peak"])
        self.assertTrue(run["problems"], run)
        self.assertIn("no timing.compute_s", run["problems"][0])
        self.assertIsNone(run["tok_s"])
        run_json = os.path.join(self.dir, "run.json")
        with open(run_json, "w") as f:
            json.dump(run, f)
        self.assertTrue(self.cli("mfu", run_json, p["model"], p["peak"])["problems"])

    def test_a_window_under_10ms_or_not_positive_fails(self):
        p = self.files()
        for compute_s, words in ((0.0005, "under 10 ms"), (0.0, "not positive"), (-0.64, "not positive")):
            write_run(self.run_dir, timing(compute_s))
            run = self.cli("run", self.run_dir, p["model"], p["peak"])
            self.assertTrue(run["problems"], compute_s)
            self.assertIn(words, run["problems"][0])
            self.assertIsNone(run["computed_tok_s"])

    def test_a_rate_the_peak_cannot_reach_fails_and_so_does_its_mfu(self):
        # 9,600 tokens in 0.05 s through ~0.2 MFLOP/token layers is ~4e10 FLOP/s: fine at 100 GFLOP/s;
        # 9.6 million tokens in the same window is not.
        write_run(self.run_dir, timing(0.05, computed=9_600_000))
        p = self.files()
        run = self.cli("run", self.run_dir, p["model"], p["peak"])
        self.assertTrue(any("above the" in x for x in run["problems"]), run)
        run_json = os.path.join(self.dir, "run.json")
        with open(run_json, "w") as f:
            json.dump(run, f)
        self.assertTrue(self.cli("mfu", run_json, p["model"], p["peak"])["problems"])
        # MFU above 100% fails on its own, even where the rate check did not run (a run with no problems).
        run["problems"] = []
        m = summarize.mfu(run, summarize.model_info(self.model_dir), PEAK)
        self.assertTrue(any("above the peak" in x for x in m["problems"]), m)
        run["tokens_computed"], run["tokens_scored"], run["compute_s"] = -9600, 0, 1.0
        m = summarize.mfu(run, summarize.model_info(self.model_dir), PEAK)
        self.assertTrue(any("negative" in x for x in m["problems"]), m)

    def test_sane_figures_pass_with_the_mfu_worked_by_hand(self):
        write_run(self.run_dir, timing(2.0), tokens_requested=52000, items=400)
        hf = {"requests": 400, "tokens": 52400, "seconds": 8.0, "tokens_per_second": 6550.0, "choice_agreement": 100.0}
        p = self.files(hf)
        run = self.cli("run", self.run_dir, p["model"], p["peak"])
        self.assertEqual(run["problems"], [])
        self.assertAlmostEqual(run["tok_s"], 52000 / 2.0)
        self.assertAlmostEqual(run["computed_tok_s"], 9600 / 2.0)
        self.assertEqual(run["load_s"], 0.81)
        run_json = os.path.join(self.dir, "run.json")
        with open(run_json, "w") as f:
            json.dump(run, f)
        c = self.cli("compare", run_json, p["hf"], p["model"], p["peak"])
        self.assertEqual(c["problems"], [])
        self.assertAlmostEqual(c["ours_over_theirs"], 4.0)  # the same requests: 8 s against 2 s
        self.assertAlmostEqual(c["hf_tok_s"], 52400 / 8.0)
        m = self.cli("mfu", run_json, p["model"], p["peak"], p["hf"])
        self.assertEqual(m["problems"], [])
        t = 52000 / 400  # mean request length
        ours = 9600 * (2 * BODY + 2 * L * D * t) + 400 * 2 * V * D
        self.assertAlmostEqual(m["ours_mfu"], ours / 2.0 / 100e9)
        theirs = 52400 * (2 * BODY + 2 * L * D * (52400 / 400)) + 400 * 2 * V * D
        self.assertAlmostEqual(m["hf_mfu"], theirs / 8.0 / 100e9)
        self.assertGreater(m["ours_mfu"], 0)
        self.assertLess(m["ours_mfu"], 1)

    def test_a_transformers_time_of_zero_gives_no_ratio(self):
        write_run(self.run_dir, timing(2.0))
        for seconds in (0.0, 0.004):
            p = self.files({"requests": 400, "tokens": 52400, "seconds": seconds, "tokens_per_second": 1e12,
                            "choice_agreement": 100.0})
            run_json = os.path.join(self.dir, "run.json")
            with open(run_json, "w") as f:
                json.dump(self.cli("run", self.run_dir, p["model"], p["peak"]), f)
            c = self.cli("compare", run_json, p["hf"], p["model"], p["peak"])
            self.assertTrue(c["problems"], seconds)
            self.assertIsNone(c["ours_over_theirs"])

    def test_peaks(self):
        cpuinfo = "model name\t: Test CPU @ 2.00GHz\ncpu MHz\t\t: 2000.000\nflags\t\t: fpu sse avx avx2 fma avx512f\n"
        p = summarize.cpu_peak(cpuinfo, cpus=2, max_khz=0)
        self.assertAlmostEqual(p["peak_flops"], 2 * 3.0e9 * 64)  # 1.5 x the listed clock without cpufreq
        p = summarize.cpu_peak(cpuinfo.replace(" avx512f", ""), cpus=4, max_khz=3_500_000)
        self.assertAlmostEqual(p["peak_flops"], 4 * 3.5e9 * 32)
        self.assertIn("AVX2+FMA", p["source"])
        self.assertIsNone(summarize.cpu_peak("flags\t: sse\n", cpus=1, max_khz=0)["peak_flops"])
        self.assertEqual(summarize.gpu_peak("NVIDIA H200", "bfloat16")["peak_flops"], 989.4e12)
        self.assertEqual(summarize.gpu_peak("NVIDIA H100 PCIe", "bfloat16")["peak_flops"], 756e12)
        self.assertEqual(summarize.gpu_peak("NVIDIA H200", "float32")["peak_flops"], 494.7e12)
        self.assertIsNone(summarize.gpu_peak("Some Future GPU", "bfloat16")["peak_flops"])
        # This machine's own peak: a positive figure with its source stated.
        here = self.cli("peak", "--device", "cpu", "--dtype", "float32")
        self.assertGreater(here["peak_flops"], 0)
        self.assertIn("FLOP/cycle", here["source"])


if __name__ == "__main__":
    unittest.main()
