// The single-process subcommands of the `gpueval` CLI (generate, logits,
// tokenize, score, convert-llama2c, init-model, history, execute, chat-template). main.cpp parses flags into these
// option structs; each command writes its result to `out` and logs to stderr, and throws gpueval::Error on bad input.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "cli/random_model.h"

namespace gpueval {

struct ModelOptions {
  std::string model_dir;
  std::string device = "cpu";
  std::string dtype = "float32";
};

struct GenerateCommand {
  ModelOptions model;
  std::string prompt;
  int64_t max_new_tokens = 256;
  double temperature = 0.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
};
void run_generate(const GenerateCommand& cmd, std::ostream& out);

struct LogitsCommand {
  ModelOptions model;
  std::string ids;  // "1,403,407"
  bool routing = false;  // also each sparse layer's experts and weights per token
};
void run_logits(const LogitsCommand& cmd, std::ostream& out);

struct TokenizeCommand {
  std::string tokenizer;
  bool add_special = false;
};
void run_tokenize(const TokenizeCommand& cmd, std::istream& in, std::ostream& out);

struct ScoreCommand {
  ModelOptions model;
  std::string text_file;
  int64_t max_length = 0;  // 0: the model's context
  int64_t batch_windows = 8;
  bool stepwise = false;  // token-at-a-time through the KV cache (the baseline)
};
void run_score(const ScoreCommand& cmd, std::ostream& out);

struct ConvertLlama2cCommand {
  std::string checkpoint;
  std::string tokenizer;
  std::string out_dir;
};
void run_convert_llama2c(const ConvertLlama2cCommand& cmd);

struct InitModelCommand {
  std::string tokenizer_dir;
  std::string out_dir;
  RandomModelSpec spec;
  bool force = false;  // write into an existing non-empty out_dir
};
void run_init_model(const InitModelCommand& cmd);

struct HistoryCommand {
  std::string history;  // the history file; empty: History::default_path()
  std::string task;  // only this task's (or group's) column; empty: every task
  std::string config;  // only configs whose fingerprint starts with this; empty: every config
  std::string report;  // non-empty: also write each shown config's report.md/report.html into report/<fingerprint>/
};
// `gpueval history`: per config (most recently run first), the checkpoint x task table of
// trend_report.h's trend_table(). A missing file, an unknown --task or a --config that matches
// nothing is an Error; a file without runs prints one line saying so.
void run_history(const HistoryCommand& cmd, std::ostream& out);

struct ExecuteCommand {
  int max_sandboxes = 0;  // 0: the machine's cores
  double cpu_seconds = 3.0;  // per program, its whole process tree
  double wall_seconds = 0;  // 0: 10 + 3 * cpu_seconds
  std::string memory = "2GiB";  // address space per process, over the interpreter's own
  int max_subprocesses = 16;
  std::string mode = "code_eval";  // or "script"
  std::string python = "/usr/bin/python3";
  bool unsafe_no_sandbox = false;
};
// `gpueval execute` (cli/execute_command.cpp): JSONL {"id", "program"[, "cpu_seconds", "memory",
// "mode"]} on `in`, one {"id", "verdict", "detail", "cpu_s", "wall_s"} line per program on `out` in
// input order, each in its own sandbox (sandbox/sandbox.h), a summary on stderr. Every line is
// checked before any program runs: a bad one is an Error naming its line.
void run_execute(const ExecuteCommand& cmd, std::istream& in, std::ostream& out);

struct ChatTemplateCommand {
  std::string model_dir;  // the checkpoint (or tokenizer folder) whose template renders
  std::string template_file;  // or a template file
  std::string name;  // a named template of the checkpoint ("tool_use"); empty: its default
  bool add_generation_prompt = false;
  std::optional<std::string> bos_token, eos_token;  // over the checkpoint's special tokens
};
// `gpueval chat-template` (cli/chat_template_command.cpp): JSONL on `in`, one object per line with
// "messages" and any of "tools", "documents", "add_generation_prompt" (over the flag) and other
// keywords the template reads ("enable_thinking"); one line per input on `out`, {"text": ...} as
// transformers' apply_chat_template(tokenize=False) renders it, or {"error": ...}: the template's
// own raise_exception message, else "<ExceptionType>: <message>" as Jinja2 raises it. A template
// that does not load, or an input line that is not such an object, is an Error naming the file
// or <stdin>:<line>.
void run_chat_template(const ChatTemplateCommand& cmd, std::istream& in, std::ostream& out);

// "1,403,407" -> ids; `flag` names the option in errors.
std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag);

}  // namespace gpueval
