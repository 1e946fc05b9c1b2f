// gpueval: the command-line entry point. Parses flags with CLI11 and hands off
// to the commands in commands.h; every gpueval::Error becomes one line on
// stderr and exit code 1, a usage error exit code 2.
#include <ATen/Parallel.h>
#include <unistd.h>

#include <iostream>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "common/strings.h"
#include "evaluation/calibration.h"
#include "gpueval/error.h"
#include "gpueval/evaluation.h"
#include "gpueval/run_config.h"
#include "report/report_html.h"
#include "run/worker.h"

namespace {

void add_model_flags(CLI::App* app, gpueval::ModelOptions& m) {
  app->add_option("--model", m.model_dir, "model directory (config.json, *.safetensors, tokenizer)")->required();
  app->add_option("--device", m.device, "cpu or cuda:N")->capture_default_str();
  app->add_option("--dtype", m.dtype, "float32, bfloat16 or float16")->capture_default_str();
}

// `gpueval --gpus 0-3 configs/mmlu.yaml` is `gpueval run --gpus 0-3 configs/mmlu.yaml`.
std::vector<std::string> with_default_subcommand(int argc, char** argv) {
  static const char* kSubcommands[] = {"run", "worker", "generate", "logits", "tokenize", "score", "convert-llama2c", "init-model", "report", "calibrate", "history"};
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpueval: multi-GPU local inference evaluator for language models"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags such as --threads may follow the subcommand
  app.set_version_flag("--version", GPUEVAL_VERSION);
  int threads = 0;
  app.add_option("--threads", threads, "CPU threads for LibTorch (0: all cores)");

  std::string config_path;
  gpueval::ConfigOverrides overrides;
  auto* run_cmd = app.add_subcommand("run", "evaluate a model on a config's tasks, one worker per device (default)");
  run_cmd->add_option("config", config_path, "run configuration (YAML)")->required();
  run_cmd->add_option_function<std::string>("--gpus", [&](const std::string& v) { overrides.gpus = v; },
                                            "devices: 0-3, 0,2, all, cpu, cpu:N (default: the config's gpus, else cpu)");
  run_cmd->add_option_function<std::string>("--tasks", [&](const std::string& v) {
    std::vector<std::string> names;
    std::stringstream ss(v);
    for (std::string t; std::getline(ss, t, ',');)
      if (!t.empty()) names.push_back(t);
    overrides.tasks = names;
  }, "comma-separated task names (overrides the config)");
  run_cmd
      ->add_option_function<std::vector<std::string>>(
          "--model", [&](const std::vector<std::string>& v) { overrides.model = v; },
          "checkpoint directory or glob such as 'runs/exp7/step-*' (repeatable; overrides the config)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->allow_extra_args(false);
  run_cmd->add_option_function<std::string>("--history", [&](const std::string& v) { overrides.history = v; },
                                            "history database of nightly scores (default: see `gpueval history`)");
  run_cmd->add_option_function<double>(
      "--fail-on-regression", [&](const double& v) { overrides.fail_on_regression = v; },
      "exit 4, naming the task, when a score drops by more than POINTS against the previous checkpoint");
  run_cmd->add_option_function<std::string>("--output", [&](const std::string& v) { overrides.output = v; },
                                            "output directory (overrides the config)");
  run_cmd->add_option_function<int64_t>("--limit", [&](const int64_t& v) { overrides.limit = v; },
                                        "documents per task");
  run_cmd->add_option_function<std::string>("--batch-size", [&](const std::string& v) { overrides.batch_size = v; },
                                            "auto or the most sequences per batch");
  run_cmd->add_option_function<int64_t>("--num-fewshot", [&](const int64_t& v) { overrides.num_fewshot = v; },
                                        "few-shot examples per prompt");
  run_cmd->add_option_function<std::vector<std::string>>(
      "--data", [&](const std::vector<std::string>& v) { overrides.data = v; },
      "NAME=PATH: where a task's data root lives (e.g. mmlu=../shared/data/mmlu); repeatable")
      ->allow_extra_args(false);
  run_cmd->add_option_function<uint64_t>("--seed", [&](const uint64_t& v) { overrides.seed = v; }, "run seed");
  run_cmd->add_option_function<std::string>("--add-bos", [&](const std::string& v) { overrides.add_bos = v; },
                                            "auto|true|false: start contexts with BOS (auto: as the tokenizer does)");
  run_cmd->add_option_function<std::string>("--prefix-reuse", [&](const std::string& v) { overrides.prefix_reuse = v; },
                                            "on|off: compute shared contexts and few-shot prefixes once (default on)");
  bool recalibrate = false;
  run_cmd->add_flag("--recalibrate", recalibrate, "probe batch budgets even when the calibration cache has them");
  bool fresh = false;
  run_cmd->add_flag("--fresh", fresh, "start over: discard the journal instead of resuming from it, and score again the checkpoints the history holds");
  run_cmd->add_option_function<std::string>("--max-memory", [&](const std::string& v) { overrides.max_memory = v; },
                                            "memory per CPU worker for batch probing: 6GiB, 512MiB, or a share such as 0.5");
  auto* worker_cmd = app.add_subcommand("worker", "")->group("");  // started by the scheduler only

  std::string calibrate_config;
  gpueval::ConfigOverrides calibrate_overrides;
  gpueval::CalibrateCommandOptions calibrate;
  auto* calibrate_cmd =
      app.add_subcommand("calibrate", "probe each device's batch budget for a config, print it and cache it");
  calibrate_cmd->add_option("config", calibrate_config, "run configuration (YAML)")->required();
  calibrate_cmd->add_option_function<std::string>(
      "--gpus", [&](const std::string& v) { calibrate_overrides.gpus = v; }, "devices: 0-3, 0,2, all, cpu, cpu:N");
  calibrate_cmd->add_flag("--recalibrate", calibrate.recalibrate, "probe again even when the cache has an entry");
  calibrate_cmd->add_option_function<std::string>(
      "--output", [&](const std::string& v) { calibrate.output = v; },
      "where calibration.json, calibration.svg and logs/ go (default: the config's output)");
  calibrate_cmd->add_option_function<std::string>(
      "--max-memory", [&](const std::string& v) { calibrate_overrides.max_memory = v; },
      "memory per CPU worker: 6GiB, 512MiB, or a share such as 0.5 (default: 0.8 of available / workers)");
  calibrate_cmd->add_option_function<std::string>(
      "--model", [&](const std::string& v) { calibrate_overrides.model = std::vector<std::string>{v}; }, "model directory (overrides the config)");

  gpueval::GenerateCommand gen;
  auto* generate = app.add_subcommand("generate", "continue a prompt (greedy unless --temperature)");
  add_model_flags(generate, gen.model);
  generate->add_option("--prompt", gen.prompt, "prompt text")->capture_default_str();
  generate->add_option("--max-new-tokens", gen.max_new_tokens)->capture_default_str()->check(CLI::NonNegativeNumber);
  generate->add_option("--temperature", gen.temperature)->capture_default_str()->check(CLI::NonNegativeNumber);
  generate->add_option("--top-k", gen.top_k)->capture_default_str()->check(CLI::NonNegativeNumber);
  generate->add_option("--top-p", gen.top_p)->capture_default_str()->check(CLI::Range(0.0, 1.0));
  generate->add_option("--seed", gen.seed)->capture_default_str();

  gpueval::LogitsCommand logits;
  auto* logits_cmd = app.add_subcommand("logits", "print the logits of every position as JSON");
  add_model_flags(logits_cmd, logits.model);
  logits_cmd->add_option("--ids", logits.ids, "comma-separated token ids, BOS included")->required();

  gpueval::TokenizeCommand tokenize;
  auto* tokenize_cmd = app.add_subcommand("tokenize", "JSONL {\"text\"} on stdin -> {\"ids\"} on stdout");
  tokenize_cmd->add_option("--tokenizer", tokenize.tokenizer, "tokenizer.json, tokenizer.model or a directory")->required();
  tokenize_cmd->add_flag("--add-special", tokenize.add_special, "add the tokenizer's special tokens (BOS)");

  gpueval::ScoreCommand score;
  auto* score_cmd = app.add_subcommand("score", "per-token log-probabilities and perplexity of a text file");
  add_model_flags(score_cmd, score.model);
  score_cmd->add_option("--text", score.text_file, "UTF-8 text file")->required();
  score_cmd->add_option("--max-length", score.max_length, "window length (default: the model's context)")
      ->check(CLI::NonNegativeNumber);
  score_cmd->add_option("--batch-windows", score.batch_windows, "windows per forward pass")->capture_default_str();
  score_cmd->add_flag("--stepwise", score.stepwise, "token-at-a-time through the KV cache (baseline)");

  gpueval::ConvertLlama2cCommand convert;
  auto* convert_cmd = app.add_subcommand("convert-llama2c", "convert a llama2.c checkpoint to Hugging Face layout");
  convert_cmd->add_option("--checkpoint", convert.checkpoint, "llama2.c model .bin")->required();
  convert_cmd->add_option("--tokenizer", convert.tokenizer, "llama2.c tokenizer .bin")->required();
  convert_cmd->add_option("--out", convert.out_dir, "output directory")->required();

  gpueval::InitModelCommand init;
  auto* init_cmd = app.add_subcommand("init-model", "write a random-weight Llama checkpoint with a real tokenizer");
  gpueval::RandomModelSpec& spec = init.spec;
  init_cmd->add_option("--tokenizer", init.tokenizer_dir, "directory with tokenizer.json, tokenizer.model or tokenizer.bin")
      ->required();
  init_cmd->add_option("--out", init.out_dir, "output directory")->required();
  init_cmd->add_option("--hidden", spec.hidden, "hidden size")->capture_default_str();
  init_cmd->add_option("--intermediate", spec.intermediate, "MLP size")->capture_default_str();
  init_cmd->add_option("--layers", spec.layers, "decoder layers")->capture_default_str();
  init_cmd->add_option("--heads", spec.heads, "attention heads")->capture_default_str();
  init_cmd->add_option("--kv-heads", spec.kv_heads, "key/value heads")->capture_default_str();
  init_cmd->add_option("--max-positions", spec.max_positions, "context length")->capture_default_str();
  init_cmd->add_option("--vocab", spec.vocab, "embedding rows (0: the tokenizer's vocabulary)")->capture_default_str();
  init_cmd->add_option("--rope-theta", spec.rope_theta, "rotary base")->capture_default_str();
  init_cmd->add_flag("--tied", spec.tied, "share the embedding with the output head");
  init_cmd->add_option("--seed", spec.seed, "weights seed")->capture_default_str();
  init_cmd->add_option("--dtype", spec.dtype, "float32, bfloat16 or float16")->capture_default_str();
  init_cmd->add_flag("--force", init.force, "write into a non-empty --out directory");

  std::string report_results, report_out;
  auto* report_cmd = app.add_subcommand("report", "write report.html from a results.json");
  report_cmd->add_option("--results", report_results, "results.json of a run")->required();
  report_cmd->add_option("--out", report_out, "output file (default: report.html beside results.json)");

  gpueval::HistoryCommand history;
  auto* history_cmd =
      app.add_subcommand("history", "print each checkpoint's scores per task from the history database, oldest first");
  history_cmd->add_option("--task", history.task, "only this task's (or group's) primary metric");
  history_cmd->add_option("--history", history.history,
                          "history file (default: $GPUEVAL_HISTORY, else $XDG_DATA_HOME/gpueval/history.sqlite, "
                          "else ~/.local/share/gpueval/history.sqlite)");
  history_cmd->add_option("--config", history.config, "only configs whose fingerprint starts with this");
  history_cmd->add_option("--report", history.report,
                          "also write each config's trend report.md and report.html into DIR/<config fingerprint>/");

  std::vector<std::string> args = with_default_subcommand(argc, argv);
  std::vector<std::string> reversed(args.rbegin(), args.rend() - 1);  // CLI11 takes the arguments reversed
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  at::set_num_threads(threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  try {
    if (*worker_cmd) return gpueval::run_worker();
    if (*run_cmd) {
      gpueval::RunConfig config = gpueval::load_run_config(config_path);
      gpueval::apply_overrides(config, overrides);
      gpueval::EvaluationOptions eo;
      eo.executable = self_executable(argv[0]);
      eo.live_progress = ::isatty(2) != 0;
      eo.recalibrate = recalibrate;
      eo.fresh = fresh;
      return gpueval::run_evaluation(config, eo);
    }
    if (*calibrate_cmd) {
      gpueval::RunConfig config = gpueval::load_run_config(calibrate_config);
      gpueval::apply_overrides(config, calibrate_overrides);
      calibrate.executable = self_executable(argv[0]);
      return gpueval::run_calibrate(config, calibrate);
    }
    if (*generate) gpueval::run_generate(gen, std::cout);
    else if (*logits_cmd) gpueval::run_logits(logits, std::cout);
    else if (*tokenize_cmd) gpueval::run_tokenize(tokenize, std::cin, std::cout);
    else if (*score_cmd) gpueval::run_score(score, std::cout);
    else if (*convert_cmd) gpueval::run_convert_llama2c(convert);
    else if (*init_cmd) gpueval::run_init_model(init);
    else if (*report_cmd) gpueval::write_report_html(report_results, report_out);
    else if (*history_cmd) gpueval::run_history(history, std::cout);
  } catch (const gpueval::Error& e) {
    std::cerr << "gpueval: " << e.what() << "\n";
    return 1;
  } catch (const c10::Error& e) {
    std::cerr << "gpueval: internal error: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "gpueval: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
