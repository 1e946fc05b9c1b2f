// gpueval: the command-line entry point. Parses flags with CLI11 and hands off
// to the commands in commands.h; every gpueval::Error becomes one line on
// stderr and exit code 1, a usage error exit code 2. A run or merge prints its
// table of scores on stdout and logs on stderr (--quiet: errors only).
#include <ATen/Parallel.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "common/console.h"
#include "common/dir_lock.h"
#include "common/file_io.h"
#include "common/strings.h"
#include "evaluation/calibration.h"
#include "evaluation/request_run.h"
#include "gpueval/cluster.h"
#include "gpueval/error.h"
#include "gpueval/evaluation.h"
#include "gpueval/run_config.h"
#include "report/report_html.h"
#include "run/devices.h"
#include "run/worker.h"
#include "run/worker_prefork.h"

namespace {

using gpueval::ConfigOverrides;

void add_model_flags(CLI::App* app, gpueval::ModelOptions& m) {
  app->add_option("--model", m.model_dir, "model directory (config.json, *.safetensors, tokenizer)")->required();
  app->add_option("--device", m.device, "cpu or cuda:N")->capture_default_str();
  app->add_option("--dtype", m.dtype, "float32, bfloat16 or float16")->capture_default_str();
}

// The flags `run` and `calibrate` share: which devices, tasks, documents, data and few-shot
// examples, so a calibration probes the request lengths the run will see, and the memory the
// probe may use per CPU worker.
void add_selection_flags(CLI::App* cmd, ConfigOverrides& o) {
  cmd->add_option_function<std::string>(
      "--gpus", [&](const std::string& v) { o.gpus = v; },
      "devices: 0-3, 0,2, all, cpu, cpu:N (default: the config's gpus, else cpu)");
  cmd->add_option_function<std::string>(
      "--tasks",
      [&](const std::string& v) {
        std::vector<std::string> names;
        std::stringstream ss(v);
        for (std::string t; std::getline(ss, t, ',');)
          if (!t.empty()) names.push_back(t);
        o.tasks = names;
      },
      "comma-separated task names (overrides the config)");
  cmd->add_option_function<int64_t>(
      "--limit", [&](const int64_t& v) { o.limit = v; }, "documents per task");
  cmd->add_option_function<int64_t>(
      "--num-fewshot", [&](const int64_t& v) { o.num_fewshot = v; }, "few-shot examples per prompt");
  cmd->add_option_function<std::vector<std::string>>(
         "--data", [&](const std::vector<std::string>& v) { o.data = v; },
         "NAME=PATH: where a task's data root lives (e.g. mmlu=../shared/data/mmlu); repeatable")
      ->allow_extra_args(false);
  cmd->add_option_function<std::string>(
      "--max-memory", [&](const std::string& v) { o.max_memory = v; },
      "memory per CPU worker for batch probing: 6GiB, 512MiB, or a share such as 0.5 "
      "(default: 0.8 of available / workers)");
}

struct RunFlags {
  std::string config;
  ConfigOverrides overrides;
  std::string shard;
  bool recalibrate = false;
  bool fresh = false;
  bool wait = false;
  bool quiet = false;
};

// --quiet, on the commands that print a table of scores (run, merge).
void add_quiet_flag(CLI::App* cmd, bool& quiet) {
  cmd->add_flag("--quiet", quiet,
                "print only the table of scores (stdout) and errors (stderr): no log lines, no progress");
}

// --wait, on every command that holds an output folder (src/evaluation/output_lock.h).
void add_wait_flag(CLI::App* cmd, bool& wait) {
  cmd->add_flag("--wait", wait,
                "if another gpueval holds the output folder, wait for it to finish (default: exit 5 naming it)");
}

// How the model runs and reads its inputs: `run` and `requests` share them.
void add_engine_flags(CLI::App* cmd, ConfigOverrides& o) {
  cmd->add_option_function<std::string>(
      "--dtype", [&](const std::string& v) { o.dtype = v; },
      "auto, float32, bfloat16 or float16: what each worker loads the weights in (overrides the config)");
  cmd->add_option_function<int64_t>(
      "--max-length", [&](const int64_t& v) { o.max_length = v; },
      "context length: longer inputs are left-truncated, rolling texts windowed by it (default: the model's)");
  cmd->add_option_function<int64_t>(
      "--cpu-threads", [&](const int64_t& v) { o.cpu_threads = v; }, "threads of each CPU worker (default 1)");
}

// The flags that change what a run (or a sharded run's plan) computes and where it writes.
void add_run_flags(CLI::App* cmd, ConfigOverrides& o) {
  add_selection_flags(cmd, o);
  add_engine_flags(cmd, o);
  cmd->add_option_function<std::vector<std::string>>(
         "--model", [&](const std::vector<std::string>& v) { o.model = v; },
         "checkpoint directory or glob such as 'runs/exp7/step-*' (repeatable; overrides the config)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->allow_extra_args(false);
  cmd->add_option_function<std::string>(
      "--history", [&](const std::string& v) { o.history = v; },
      "history database of nightly scores (default: see `gpueval history`)");
  cmd->add_option_function<std::string>(
      "--tensorboard", [&](const std::string& v) { o.tensorboard = v; },
      "also write every checkpoint's scores as TensorBoard scalars into DIR, "
      "one run per config");
  cmd->add_option_function<double>(
      "--fail-on-regression", [&](const double& v) { o.fail_on_regression = v; },
      "exit 4, naming the task, when a score drops by more than POINTS against the previous checkpoint");
  cmd->add_option_function<std::string>(
      "--output", [&](const std::string& v) { o.output = v; }, "output directory (overrides the config)");
  cmd->add_option_function<std::string>(
      "--batch-size", [&](const std::string& v) { o.batch_size = v; }, "auto or the most sequences per batch");
  cmd->add_option_function<int64_t>(
      "--batch-tokens", [&](const int64_t& v) { o.batch_tokens = v; },
      "token budget per batch (overrides calibration)");
  cmd->add_option_function<uint64_t>(
      "--seed", [&](const uint64_t& v) { o.seed = v; }, "run seed");
  cmd->add_option_function<std::string>(
      "--add-bos", [&](const std::string& v) { o.add_bos = v; },
      "auto|true|false: start contexts with BOS (auto: as the tokenizer does)");
  cmd->add_option_function<std::string>(
      "--prefix-reuse", [&](const std::string& v) { o.prefix_reuse = v; },
      "on|off: compute a few-shot prefix shared by many documents once (default on)");
  cmd->add_option_function<std::string>(
      "--group-continuations", [&](const std::string& v) { o.group_continuations = v; },
      "on|off: score one context's continuations in one row, the context once "
      "(default on)");
  cmd->add_option_function<int64_t>(
      "--max-sandboxes", [&](const int64_t& v) { o.max_sandboxes = v; },
      "code tasks: programs run at once beside generation (default: the cores the CPU "
      "workers leave, at least 1)");
  // lm-eval's chat options (--apply_chat_template, ...), spelled with dashes as the other flags.
  cmd->add_option_function<std::string>(
         "--apply-chat-template", [&](const std::string& v) { o.apply_chat_template = v; },
         "render prompts with the checkpoint's chat template (NAME: one of its named templates)")
      ->expected(0, 1)
      ->default_str("");
  cmd->add_option_function<std::string>(
      "--chat-template", [&](const std::string& v) { o.chat_template = v; },
      "a chat template file to use instead of the checkpoint's");
  cmd->add_option_function<std::string>(
      "--fewshot-as-multiturn", [&](const std::string& v) { o.fewshot_as_multiturn = v; },
      "true|false: each few-shot example its own user and assistant turns "
      "(default true with a chat template)");
  cmd->add_option_function<std::string>(
      "--system-instruction", [&](const std::string& v) { o.system_instruction = v; },
      "a system prompt before the task's description");
  cmd->add_option_function<std::string>(
      "--think-end-token", [&](const std::string& v) { o.think_end_token = v; },
      "keep what a generation says after the last TEXT (</think>)");
  cmd->add_flag("--unsafe-no-sandbox", o.unsafe_no_sandbox,
                "code tasks: run the model's programs without bubblewrap or seccomp, as this user, with rlimits "
                "only (results.json says so)");
}

CLI::App* add_run_command(CLI::App& app, RunFlags& f) {
  auto* cmd = app.add_subcommand("run", "evaluate a model on a config's tasks, one worker per device (default)");
  cmd->add_option("config", f.config,
                  "run configuration (YAML), or the directory of a sharded run's plan (with --shard)")
      ->required();
  add_run_flags(cmd, f.overrides);
  cmd->add_option("--shard", f.shard,
                  "i/N: run shard i of a sharded run's plan (gpueval plan); default: SLURM_ARRAY_TASK_ID or "
                  "JOB_COMPLETION_INDEX where the output holds a plan");
  cmd->add_flag("--recalibrate", f.recalibrate, "probe batch budgets even when the calibration cache has them");
  cmd->add_flag("--fresh", f.fresh,
                "start over: discard the journal instead of resuming from it, and score again the checkpoints the "
                "history holds");
  add_wait_flag(cmd, f.wait);
  add_quiet_flag(cmd, f.quiet);
  return cmd;
}

struct RequestsFlags {
  ConfigOverrides overrides;
  gpueval::RequestRunOptions run;
  bool describe = false;
  bool fresh = false;
  bool wait = false;
  bool quiet = false;
};

// `gpueval requests`: a request list from outside (lm-eval's `gpueval` model) through the run
// loop; evaluation/request_run.h.
CLI::App* add_requests_command(CLI::App& app, RequestsFlags& f) {
  auto* cmd = app.add_subcommand(
      "requests", "compute a JSONL list of loglikelihood/generate_until requests (lm-eval's model backend)");
  ConfigOverrides& o = f.overrides;
  cmd->add_option_function<std::string>(
         "--model", [&](const std::string& v) { o.model = std::vector<std::string>{v}; }, "checkpoint directory")
      ->required();
  cmd->add_option("--requests", f.run.requests_file, "JSONL requests, one per line ('-': stdin)");
  cmd->add_option("--results", f.run.results_file, "where the results go, one line per request in order ('-': stdout)");
  cmd->add_flag("--describe", f.describe,
                "check the model as a run would and print what it is as JSON (max_length, BOS, EOS, chat "
                "templates); computes nothing");
  cmd->add_option_function<std::string>(
      "--output", [&](const std::string& v) { o.output = v; }, "the run's folder: journal, logs, status.json");
  cmd->add_option("--journal-root", f.run.journal_root,
                  "without --output: the run gets the folder <DIR>/<model>-<key of the model and the requests>");
  cmd->add_option_function<std::string>(
      "--gpus", [&](const std::string& v) { o.gpus = v; }, "devices: 0-3, 0,2, all, cpu, cpu:N (default cpu)");
  add_engine_flags(cmd, o);
  cmd->add_option_function<std::string>(
      "--batch-size", [&](const std::string& v) { o.batch_size = v; }, "auto or the most sequences per batch");
  cmd->add_option_function<int64_t>(
      "--batch-tokens", [&](const int64_t& v) { o.batch_tokens = v; },
      "token budget per batch (overrides calibration)");
  cmd->add_option_function<std::string>(
      "--max-memory", [&](const std::string& v) { o.max_memory = v; }, "memory per CPU worker for batch probing");
  cmd->add_option_function<uint64_t>(
      "--seed", [&](const uint64_t& v) { o.seed = v; }, "run seed (sampled generations)");
  cmd->add_option_function<std::string>(
      "--add-bos", [&](const std::string& v) { o.add_bos = v; },
      "auto|true|false: start contexts with BOS (auto: as the tokenizer does, as lm-eval's hf model)");
  cmd->add_option_function<std::string>(
      "--prefix-reuse", [&](const std::string& v) { o.prefix_reuse = v; },
      "on|off: compute a prefix shared by many requests once (default on)");
  cmd->add_option_function<std::string>(
      "--group-continuations", [&](const std::string& v) { o.group_continuations = v; },
      "on|off: score one context's continuations in one row (default on)");
  cmd->add_flag("--fresh", f.fresh, "start over: discard the journal instead of resuming from it");
  add_wait_flag(cmd, f.wait);
  add_quiet_flag(cmd, f.quiet);
  return cmd;
}

struct CalibrateFlags {
  std::string config;
  ConfigOverrides overrides;
  gpueval::CalibrateCommandOptions options;
};

CLI::App* add_calibrate_command(CLI::App& app, CalibrateFlags& f) {
  auto* cmd = app.add_subcommand("calibrate", "probe each device's batch budget for a config, print it and cache it");
  cmd->add_option("config", f.config, "run configuration (YAML)")->required();
  add_selection_flags(cmd, f.overrides);
  cmd->add_flag("--recalibrate", f.options.recalibrate, "probe again even when the cache has an entry");
  cmd->add_option_function<std::string>(
      "--output", [&](const std::string& v) { f.options.output = v; },
      "where calibration.json, calibration.svg and logs/ go (default: the config's output)");
  cmd->add_option_function<std::string>(
      "--model", [&](const std::string& v) { f.overrides.model = std::vector<std::string>{v}; },
      "model directory (overrides the config)");
  return cmd;
}

CLI::App* add_generate_command(CLI::App& app, gpueval::GenerateCommand& g) {
  auto* cmd = app.add_subcommand("generate", "continue a prompt (greedy unless --temperature)");
  add_model_flags(cmd, g.model);
  cmd->add_option("--prompt", g.prompt, "prompt text")->capture_default_str();
  cmd->add_option("--max-new-tokens", g.max_new_tokens)->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--temperature", g.temperature)->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", g.top_k)->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", g.top_p)->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", g.seed)->capture_default_str();
  return cmd;
}

CLI::App* add_logits_command(CLI::App& app, gpueval::LogitsCommand& l) {
  auto* cmd = app.add_subcommand("logits", "print the logits of every position as JSON");
  add_model_flags(cmd, l.model);
  cmd->add_option("--ids", l.ids, "comma-separated token ids, BOS included")->required();
  cmd->add_flag("--routing", l.routing,
                "mixtures of experts: also \"routing\", per sparse layer each token's experts (ascending) and weights");
  return cmd;
}

CLI::App* add_tokenize_command(CLI::App& app, gpueval::TokenizeCommand& t) {
  auto* cmd = app.add_subcommand("tokenize", "JSONL {\"text\"} on stdin -> {\"ids\"} on stdout");
  cmd->add_option("--tokenizer", t.tokenizer, "tokenizer.json, tokenizer.model or a directory")->required();
  cmd->add_flag("--add-special", t.add_special, "add the tokenizer's special tokens (BOS)");
  return cmd;
}

CLI::App* add_chat_template_command(CLI::App& app, gpueval::ChatTemplateCommand& c) {
  auto* cmd = app.add_subcommand("chat-template",
                                 "JSONL {\"messages\", ...} on stdin -> {\"text\"} or {\"error\"} on stdout, rendered "
                                 "as transformers' apply_chat_template renders it");
  auto* model =
      cmd->add_option("--model", c.model_dir, "a checkpoint or tokenizer folder: its chat template and special tokens");
  auto* file = cmd->add_option("--template", c.template_file, "a Jinja chat template file");
  model->excludes(file);
  cmd->add_option("--name", c.name, "a named template of --model (\"tool_use\"); default: its default");
  cmd->add_flag("--add-generation-prompt", c.add_generation_prompt,
                "end with the assistant's turn header (an input line's \"add_generation_prompt\" wins)");
  cmd->add_option("--bos-token", c.bos_token, "bos_token for the template (over --model's)");
  cmd->add_option("--eos-token", c.eos_token, "eos_token for the template (over --model's)");
  return cmd;
}

CLI::App* add_score_command(CLI::App& app, gpueval::ScoreCommand& s) {
  auto* cmd = app.add_subcommand("score", "per-token log-probabilities and perplexity of a text file");
  add_model_flags(cmd, s.model);
  cmd->add_option("--text", s.text_file, "UTF-8 text file")->required();
  cmd->add_option("--max-length", s.max_length, "window length (default: the model's context)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--batch-windows", s.batch_windows, "windows per forward pass")->capture_default_str();
  cmd->add_flag("--stepwise", s.stepwise, "token-at-a-time through the KV cache (baseline)");
  return cmd;
}

CLI::App* add_convert_command(CLI::App& app, gpueval::ConvertLlama2cCommand& c) {
  auto* cmd = app.add_subcommand("convert-llama2c", "convert a llama2.c checkpoint to Hugging Face layout");
  cmd->add_option("--checkpoint", c.checkpoint, "llama2.c model .bin")->required();
  cmd->add_option("--tokenizer", c.tokenizer, "llama2.c tokenizer .bin")->required();
  cmd->add_option("--out", c.out_dir, "output directory")->required();
  return cmd;
}

CLI::App* add_init_model_command(CLI::App& app, gpueval::InitModelCommand& init) {
  auto* cmd = app.add_subcommand("init-model", "write a random-weight Llama checkpoint with a real tokenizer");
  gpueval::RandomModelSpec& spec = init.spec;
  cmd->add_option("--tokenizer", init.tokenizer_dir, "directory with tokenizer.json, tokenizer.model or tokenizer.bin")
      ->required();
  cmd->add_option("--out", init.out_dir, "output directory")->required();
  cmd->add_option("--hidden", spec.hidden, "hidden size")->capture_default_str();
  cmd->add_option("--intermediate", spec.intermediate, "MLP size")->capture_default_str();
  cmd->add_option("--layers", spec.layers, "decoder layers")->capture_default_str();
  cmd->add_option("--heads", spec.heads, "attention heads")->capture_default_str();
  cmd->add_option("--kv-heads", spec.kv_heads, "key/value heads")->capture_default_str();
  cmd->add_option("--max-positions", spec.max_positions, "context length")->capture_default_str();
  cmd->add_option("--vocab", spec.vocab, "embedding rows (0: the tokenizer's vocabulary)")->capture_default_str();
  cmd->add_option("--rope-theta", spec.rope_theta, "rotary base")->capture_default_str();
  cmd->add_flag("--tied", spec.tied, "share the embedding with the output head");
  cmd->add_option("--seed", spec.seed, "weights seed")->capture_default_str();
  cmd->add_option("--dtype", spec.dtype, "float32, bfloat16 or float16")->capture_default_str();
  cmd->add_flag("--force", init.force, "write into a non-empty --out directory");
  return cmd;
}

CLI::App* add_execute_command(CLI::App& app, gpueval::ExecuteCommand& e) {
  auto* cmd = app.add_subcommand("execute",
                                 "run programs in the code sandbox: JSONL {\"id\", \"program\"} on stdin -> "
                                 "{\"id\", \"verdict\", \"detail\", \"cpu_s\", \"wall_s\"} on stdout");
  cmd->add_option("--max-sandboxes", e.max_sandboxes, "programs at once (default: the machine's cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--cpu-seconds", e.cpu_seconds, "CPU time limit per program, its processes together")
      ->capture_default_str();
  cmd->add_option("--wall-seconds", e.wall_seconds, "wall-clock ceiling per program (default: 10 + 3 x CPU seconds)");
  cmd->add_option("--memory", e.memory, "address space per process over the interpreter's own: 2GiB, 512MiB")
      ->capture_default_str();
  cmd->add_option("--max-subprocesses", e.max_subprocesses, "processes and threads per sandbox")->capture_default_str();
  cmd->add_option("--mode", e.mode,
                  "code_eval: as lm-eval's code_eval runs a program (exec under its guard); script: as python3 main.py")
      ->capture_default_str();
  cmd->add_option("--python", e.python, "the interpreter programs run on")->capture_default_str();
  cmd->add_flag("--unsafe-no-sandbox", e.unsafe_no_sandbox,
                "run the programs without a sandbox (same limits, no isolation): trusted programs only");
  return cmd;
}

struct ReportFlags {
  std::string results;
  std::string out;
};

CLI::App* add_report_command(CLI::App& app, ReportFlags& r) {
  auto* cmd = app.add_subcommand("report", "write report.html from a results.json");
  cmd->add_option("--results", r.results, "results.json of a run")->required();
  cmd->add_option("--out", r.out, "output file (default: report.html beside results.json)");
  return cmd;
}

CLI::App* add_history_command(CLI::App& app, gpueval::HistoryCommand& h) {
  auto* cmd =
      app.add_subcommand("history", "print each checkpoint's scores per task from the history database, oldest first");
  cmd->add_option("--task", h.task, "only this task's (or group's) primary metric");
  cmd->add_option("--history", h.history,
                  "history file (default: $GPUEVAL_HISTORY, else $XDG_DATA_HOME/gpueval/history.sqlite, "
                  "else ~/.local/share/gpueval/history.sqlite)");
  cmd->add_option("--config", h.config, "only configs whose fingerprint starts with this");
  cmd->add_option("--report", h.report,
                  "also write each config's trend report.md and report.html into DIR/<config fingerprint>/");
  return cmd;
}

struct PlanFlags {
  std::string config;
  ConfigOverrides overrides;
  int shards = 1;
  bool recalibrate = false;
  bool fresh = false;
  bool wait = false;
};

CLI::App* add_plan_command(CLI::App& app, PlanFlags& f) {
  auto* cmd = app.add_subcommand("plan",
                                 "plan a sharded run once: <output>/plan.json, which every shard and the "
                                 "merge read (gpueval run DIR --shard i/N, gpueval merge DIR)");
  cmd->add_option("config", f.config, "run configuration (YAML)")->required();
  cmd->add_option("--shards", f.shards, "how many shards (machines, job array tasks)")
      ->required()
      ->check(CLI::PositiveNumber);
  add_run_flags(cmd, f.overrides);
  cmd->add_flag("--recalibrate", f.recalibrate, "probe the batch budget even when the calibration cache has it");
  cmd->add_flag("--fresh", f.fresh, "start over: delete the shards' journals, plan checkpoints the history holds");
  add_wait_flag(cmd, f.wait);
  return cmd;
}

struct StatusFlags {
  std::string dir;
  bool json = false;
};

CLI::App* add_status_command(CLI::App& app, StatusFlags& f) {
  auto* cmd = app.add_subcommand("status", "each shard of a sharded run: done, running, failed, pending; ETA");
  cmd->add_option("dir", f.dir, "the sharded run's directory (with plan.json)")->required();
  cmd->add_flag("--json", f.json, "one JSON object instead of the table");
  return cmd;
}

struct MergeFlags {
  std::string dir;
  bool wait = false;
  bool quiet = false;
};

CLI::App* add_merge_command(CLI::App& app, MergeFlags& f) {
  auto* cmd = app.add_subcommand("merge", "merge every shard of a sharded run into its reports and history");
  cmd->add_option("dir", f.dir, "the sharded run's directory (with plan.json)")->required();
  add_wait_flag(cmd, f.wait);
  add_quiet_flag(cmd, f.quiet);
  return cmd;
}

struct SlurmFlags {
  std::string config;
  ConfigOverrides overrides;
  gpueval::SlurmOptions options;
};

CLI::App* add_slurm_command(CLI::App& app, SlurmFlags& f) {
  auto* cmd = app.add_subcommand("slurm",
                                 "write (and with --submit, submit) the Slurm jobs of a sharded run: the "
                                 "plan, a job array of shards, the merge");
  gpueval::SlurmOptions& o = f.options;
  cmd->add_option("config", f.config, "run configuration (YAML)")->required();
  cmd->add_option("--nodes", o.nodes, "nodes, one shard each")->required()->check(CLI::PositiveNumber);
  cmd->add_option("--gpus-per-node", o.gpus_per_node, "GPUs per node, one worker each (0: CPU workers)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--cpu-workers", o.cpu_workers, "CPU workers per node when --gpus-per-node is 0")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--cpus-per-task", o.cpus_per_task, "CPUs per shard (default: what its workers use)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--partition", o.partition, "Slurm partition");
  cmd->add_option("--time", o.time, "time limit per job (Slurm's format, e.g. 4:00:00)");
  cmd->add_option("--account", o.account, "Slurm account");
  cmd->add_option("--qos", o.qos, "Slurm QOS");
  cmd->add_option("--mem", o.mem, "memory per node (Slurm's --mem)");
  cmd->add_option("--sbatch-arg", o.sbatch_args,
                  "another #SBATCH option, verbatim (repeatable), e.g. --constraint=h100")
      ->allow_extra_args(false);
  cmd->add_option("--max-requeues", o.max_requeues, "times a shard killed on its node is requeued")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--submit", o.submit, "submit the jobs with sbatch (else write the scripts only)");
  add_run_flags(cmd, f.overrides);
  return cmd;
}

// `gpueval --gpus 0-3 configs/mmlu.yaml` is `gpueval run --gpus 0-3 configs/mmlu.yaml`.
std::vector<std::string> with_default_subcommand(int argc, char** argv) {
  static const char* kSubcommands[] = {
      "run",        "worker",  "generate",  "logits",       "tokenize", "score", "convert-llama2c",
      "init-model", "report",  "calibrate", "history",      "plan",     "merge", "status",
      "slurm",      "execute", "requests",  "chat-template"};
  std::vector<std::string> args(argv, argv + argc);
  bool has_subcommand = false, looks_like_run = false;
  for (int i = 1; i < argc; ++i) {
    for (const char* s : kSubcommands) has_subcommand = has_subcommand || args[i] == s;
    looks_like_run = looks_like_run || args[i] == "--gpus" || args[i].rfind("--gpus=", 0) == 0 ||
                     gpueval::ends_with(args[i], ".yaml") || gpueval::ends_with(args[i], ".yml");
  }
  if (!has_subcommand && looks_like_run) args.insert(args.begin() + 1, "run");
  return args;
}

std::string self_executable(const char* argv0) {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) return std::string(buf, static_cast<size_t>(n));
  return argv0;
}

// The command line, for the lock an output folder's holder leaves (whoever finds it locked reads it).
std::string g_command_line;

gpueval::EvaluationOptions evaluation_options(const char* argv0, bool recalibrate, bool fresh, bool wait) {
  gpueval::EvaluationOptions eo;
  eo.wait = wait;
  eo.command = g_command_line;
  eo.executable = self_executable(argv0);
  eo.live_progress = ::isatty(2) != 0;
  eo.scores_out = &std::cout;
  eo.recalibrate = recalibrate;
  eo.fresh = fresh;
  return eo;
}

// Whether any flag but --gpus and --fresh is set: those change what is computed, which a shard
// takes from its plan.
bool changes_the_plan(const ConfigOverrides& o) {
  return o.model || o.output || o.batch_size || o.batch_tokens || o.limit || o.num_fewshot || o.seed || o.add_bos ||
         o.dtype || o.max_length || o.cpu_threads || o.prefix_reuse || o.group_continuations || o.max_memory ||
         o.history || o.tensorboard || o.fail_on_regression || o.tasks || !o.data.empty() || o.max_sandboxes ||
         o.unsafe_no_sandbox;
}

// `gpueval run CONFIG`, one machine; or one shard of a sharded run: `gpueval run DIR --shard i/N`,
// or CONFIG whose output holds a plan (the shard from --shard or the environment).
int run_command(const RunFlags& f, const char* argv0) {
  const gpueval::EvaluationOptions eo = evaluation_options(argv0, f.recalibrate, f.fresh, f.wait);
  std::optional<gpueval::ShardId> shard;
  if (!f.shard.empty()) shard = gpueval::parse_shard(f.shard);
  gpueval::ShardRunOptions so{eo, f.overrides.gpus.value_or("")};
  if (gpueval::io::is_directory(f.config)) {
    if (changes_the_plan(f.overrides))
      throw gpueval::Error(f.config +
                           ": a shard runs its plan as planned; only --gpus, --shard and --fresh apply "
                           "(make the plan again to change it)");
    return gpueval::run_shard_command(f.config, shard, so);
  }
  gpueval::RunConfig config = gpueval::load_run_config(f.config);
  gpueval::apply_overrides(config, f.overrides);
  if (gpueval::io::path_exists(config.output + "/plan.json")) {
    so.config = config;
    return gpueval::run_shard_command(config.output, shard, so);
  }
  if (shard)
    throw gpueval::Error(fmt::format("--shard {}: {} holds no plan; make one first: gpueval plan {} --shards {}",
                                     f.shard, config.output, f.config, shard->count));
  return gpueval::run_evaluation(config, eo);
}

// How many CPU workers a device spec ("" is cpu) starts: 0 for GPUs or a spec that does not parse.
int cpu_workers_of(const std::string& gpus) {
  try {
    const std::string spec = gpus.empty() ? "cpu" : gpus;
    if (!gpueval::starts_with(spec, "cpu")) return 0;
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return static_cast<int>(gpueval::parse_device_spec(spec, 0, cores).size());
  } catch (const std::exception&) {
    return 0;
  }
}

// How many CPU workers a plain `gpueval run` of this config starts: forked ahead, before any thread
// (worker_prefork.h). 0 for a sharded run, GPUs, or a config that does not load (the run says why).
int cpu_workers_to_fork(const RunFlags& f) {
  try {
    if (!f.shard.empty() || gpueval::io::is_directory(f.config)) return 0;
    gpueval::RunConfig config = gpueval::load_run_config(f.config);
    gpueval::apply_overrides(config, f.overrides);
    if (gpueval::io::path_exists(config.output + "/plan.json")) return 0;
    return cpu_workers_of(config.gpus);
  } catch (const std::exception&) {
    return 0;
  }
}

int plan_command(const PlanFlags& f, const char* argv0) {
  gpueval::RunConfig config = gpueval::load_run_config(f.config);
  gpueval::apply_overrides(config, f.overrides);
  return gpueval::run_plan_command(config, f.shards, evaluation_options(argv0, f.recalibrate, f.fresh, f.wait));
}

int slurm_command(SlurmFlags& f, const char* argv0) {
  gpueval::RunConfig config = gpueval::load_run_config(f.config);
  gpueval::apply_overrides(config, f.overrides);
  f.options.executable = self_executable(argv0);
  return gpueval::run_slurm_command(config, f.options, std::cout);
}

int requests_command(RequestsFlags& f, const char* argv0) {
  gpueval::RunConfig config;
  config.source = "the command line";
  config.output.clear();  // a folder under --journal-root unless --output names one
  gpueval::apply_overrides(config, f.overrides);
  f.run.config = config;
  if (f.describe) {
    std::cout << gpueval::describe_model(config, self_executable(argv0)).dump() << "\n";
    return 0;
  }
  if (f.run.requests_file.empty() || f.run.results_file.empty())
    throw gpueval::Error("gpueval requests: give --requests FILE and --results FILE (or --describe)");
  return gpueval::run_requests(f.run, evaluation_options(argv0, false, f.fresh, f.wait));
}

int calibrate_command(CalibrateFlags& f, const char* argv0) {
  gpueval::RunConfig config = gpueval::load_run_config(f.config);
  gpueval::apply_overrides(config, f.overrides);
  f.options.executable = self_executable(argv0);
  return gpueval::run_calibrate(config, f.options);
}

}  // namespace

namespace {

int run_main(int argc, char** argv) {
  CLI::App app{"gpueval: multi-GPU local inference evaluator for language models"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags such as --threads may follow the subcommand
  app.set_version_flag("--version", GPUEVAL_VERSION);
  int threads = 0;
  app.add_option("--threads", threads, "CPU threads for LibTorch (0: all cores)");

  RunFlags run;
  RequestsFlags requests;
  CalibrateFlags calibrate;
  gpueval::GenerateCommand generate;
  gpueval::LogitsCommand logits;
  gpueval::TokenizeCommand tokenize;
  gpueval::ScoreCommand score;
  gpueval::ConvertLlama2cCommand convert;
  gpueval::InitModelCommand init;
  ReportFlags report;
  gpueval::HistoryCommand history;
  gpueval::ExecuteCommand execute;
  gpueval::ChatTemplateCommand chat_template;
  PlanFlags plan;
  StatusFlags status;
  MergeFlags merge;
  SlurmFlags slurm;
  auto* run_cmd = add_run_command(app, run);
  auto* requests_cmd = add_requests_command(app, requests);
  auto* plan_cmd = add_plan_command(app, plan);
  auto* merge_cmd = add_merge_command(app, merge);
  auto* status_cmd = add_status_command(app, status);
  auto* slurm_cmd = add_slurm_command(app, slurm);
  auto* worker_cmd = app.add_subcommand("worker", "")->group("");  // started by the scheduler only
  auto* calibrate_cmd = add_calibrate_command(app, calibrate);
  auto* generate_cmd = add_generate_command(app, generate);
  auto* logits_cmd = add_logits_command(app, logits);
  auto* tokenize_cmd = add_tokenize_command(app, tokenize);
  auto* score_cmd = add_score_command(app, score);
  auto* convert_cmd = add_convert_command(app, convert);
  auto* init_cmd = add_init_model_command(app, init);
  auto* report_cmd = add_report_command(app, report);
  auto* history_cmd = add_history_command(app, history);
  auto* execute_cmd = add_execute_command(app, execute);
  auto* chat_template_cmd = add_chat_template_command(app, chat_template);

  std::vector<std::string> args = with_default_subcommand(argc, argv);
  g_command_line = "gpueval";
  for (size_t i = 1; i < args.size(); ++i) g_command_line += " " + args[i];
  std::vector<std::string> reversed(args.rbegin(), args.rend() - 1);  // CLI11 takes the arguments reversed
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  // Before the first thread (at::set_num_threads starts LibTorch's pools): a forked process
  // returns here as a worker once the scheduler launches it.
  gpueval::PreforkRole role = gpueval::PreforkRole::kParent;
  if (*run_cmd) role = gpueval::prefork_workers(cpu_workers_to_fork(run));
  if (*requests_cmd) role = gpueval::prefork_workers(cpu_workers_of(requests.overrides.gpus.value_or("")));
  if (role == gpueval::PreforkRole::kUnused) return 0;
  if (role == gpueval::PreforkRole::kWorker) threads = 0;  // as `gpueval worker` has it
  at::set_num_threads(threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  // The commands that run workers and print scores write stderr through the console: log lines
  // whole, a status line on a terminal, only errors under --quiet (common/console.h).
  std::optional<gpueval::Console> console;
  if (role == gpueval::PreforkRole::kParent && (*run_cmd || *merge_cmd || *requests_cmd))
    console.emplace(2, gpueval::ConsoleOptions{::isatty(2) != 0, *run_cmd        ? run.quiet
                                                                 : *requests_cmd ? requests.quiet
                                                                                 : merge.quiet});
  try {
    if (*worker_cmd || role == gpueval::PreforkRole::kWorker) return gpueval::run_worker();
    if (*run_cmd) return run_command(run, argv[0]);
    if (*requests_cmd) return requests_command(requests, argv[0]);
    if (*calibrate_cmd) return calibrate_command(calibrate, argv[0]);
    if (*plan_cmd) return plan_command(plan, argv[0]);
    if (*merge_cmd) return gpueval::run_merge_command(merge.dir, evaluation_options(argv[0], false, false, merge.wait));
    if (*status_cmd) return gpueval::run_status_command(status.dir, status.json, std::cout);
    if (*slurm_cmd) return slurm_command(slurm, argv[0]);
    if (*generate_cmd)
      gpueval::run_generate(generate, std::cout);
    else if (*logits_cmd)
      gpueval::run_logits(logits, std::cout);
    else if (*tokenize_cmd)
      gpueval::run_tokenize(tokenize, std::cin, std::cout);
    else if (*score_cmd)
      gpueval::run_score(score, std::cout);
    else if (*convert_cmd)
      gpueval::run_convert_llama2c(convert);
    else if (*init_cmd)
      gpueval::run_init_model(init);
    else if (*report_cmd)
      gpueval::write_report_html(report.results, report.out);
    else if (*history_cmd)
      gpueval::run_history(history, std::cout);
    else if (*execute_cmd)
      gpueval::run_execute(execute, std::cin, std::cout);
    else if (*chat_template_cmd)
      gpueval::run_chat_template(chat_template, std::cin, std::cout);
  } catch (const gpueval::DirectoryBusy& e) {
    gpueval::Console::error(std::string("gpueval: ") + e.what());
    return gpueval::kExitBusy;
  } catch (const gpueval::Error& e) {
    gpueval::Console::error(std::string("gpueval: ") + e.what());
    return 1;
  } catch (const c10::Error& e) {
    gpueval::Console::error(std::string("gpueval: internal error: ") + e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    gpueval::Console::error(std::string("gpueval: ") + e.what());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int code = run_main(argc, argv);
  // Whatever the command opened is closed by now (its journal, history and files; its workers
  // reaped). What is left is LibTorch's static teardown, about 0.1 s of every process (a run's
  // and each of its workers'), which nothing needs: it is skipped. Sanitizer builds exit the
  // usual way, so that their leak check still runs.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
#ifndef GPUEVAL_SANITIZE
  std::_Exit(code);
#endif
  return code;
}
