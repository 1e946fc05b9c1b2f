// RunConfig is what one evaluation run was asked to do: which checkpoints, which tasks, how to
// batch, where to write. It is read from a YAML file (configs/example.yaml documents every key)
// and then adjusted by command-line flags, which win over the file. Every value is validated as it
// is read: an unknown key, a value of the wrong type or out of range, or a YAML syntax error is a
// one-line gpueval::Error naming the file, the line, the key and the problem
// ("configs/x.yaml:7: unknown key 'batchsize' (did you mean 'batch_size'?)"), or the flag when the
// value came from the command line ("--batch-size: must be 'auto' or a positive integer, got 'x'").
// Relative paths in the file are resolved against the file's directory, so a config means the same
// thing whatever directory gpueval is started from; paths given as flags are left as they are,
// relative to the working directory like any other command-line path. A RunConfig is a plain
// value; copy it freely.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpueval {

struct RunConfig {
  std::string source;  // the YAML file as it was named, for messages
  std::vector<std::string> models;  // checkpoint directories or globs (checkpoints.h); at least one
  // Task names ("demo_choice") or paths to task YAML files; at least one. "lm_eval:NAME" is a task
  // or group of lm-evaluation-harness itself, scored by lm-eval in a helper process
  // (evaluation/lm_eval_tasks.h, docs/lm_eval.md).
  std::vector<std::string> tasks;
  std::string batch_size = "auto";  // "auto" or a positive integer (max sequences per batch), as given
  int64_t batch_tokens = 0;  // token budget per batch; 0 = choose automatically
  std::string dtype = "auto";  // auto | float32 | bfloat16 | float16
  // How workers get the weights: each maps the safetensors itself (mmap), or worker 0 reads them and
  // NCCL broadcasts them to the other GPU workers (broadcast; mmap where NCCL or GPUs are absent).
  std::string load = "mmap";
  uint64_t seed = 1234;
  uint64_t fewshot_seed = 1234;  // seeds lm-eval's default few-shot sampler (its fewshot_random_seed)
  std::string output = "out";  // output directory
  std::optional<int64_t> limit;  // documents per task
  std::optional<int64_t> num_fewshot;
  // Metrics added to every task whose output type computes them, beyond its metric_list:
  // `extra_metrics: [bpb]` scores bits per byte on each multiple-choice and loglikelihood task.
  std::vector<std::string> extra_metrics;
  std::optional<int64_t> max_length;  // context length override
  // Instruct and reasoning checkpoints through their chat template, with lm-eval's options
  // (docs/chat_templates.md; tasks' PromptFormat). apply_chat_template: unset, off; "" the
  // checkpoint's default template (`true`); a name picks one of its named templates. chat_template:
  // a template file used instead of the checkpoint's. fewshot_as_multiturn: each example its own
  // user and assistant turns (default with a template, as lm-eval's CLI does; set without one it
  // is an error). system_instruction: a system prompt before the task's description (also
  // without a template). chat_template_args: keywords the template reads (enable_thinking: false).
  // think_end_token: a generated text keeps what follows its last occurrence, left-stripped,
  // before filters and metrics (lm-eval's; generate_until tasks).
  std::optional<std::string> apply_chat_template;
  std::string chat_template;
  std::optional<bool> fewshot_as_multiturn;
  std::string system_instruction;
  nlohmann::json chat_template_args = nlohmann::json::object();
  std::string think_end_token;
  // Whether prompts go through a chat template, and with each example as its own turns.
  bool chat() const { return apply_chat_template.has_value(); }
  bool multiturn() const { return chat() && fewshot_as_multiturn.value_or(true); }
  // Whether each context starts with the tokenizer's BOS token: "auto" (default) does what the
  // tokenizer's own configuration does when asked to add special tokens (tokenizer.json's
  // post_processor, tokenizer_config.json's add_bos_token for tokenizer.model): Llama-2,
  // Mistral and stories260K add BOS, GPT-2 and this Llama-3 revision do not. "true"/"false"
  // force it. lm-evaluation-harness's `hf` model follows the tokenizer too when its
  // add_bos_token is unset (0.4.13; older versions added none), so "auto" gives lm-eval's
  // default requests and "false" those of add_bos_token=False. Empty contexts and rolling
  // windows start with BOS (else EOS) whatever this says, as lm-eval does without BOS.
  std::string add_bos = "auto";  // auto | true | false
  // Compute shared work once (planner.h, packing.h); results equal those without (fp32: logprobs
  // within 1e-5). Two switches:
  //   prefix_reuse: a prefix shared by many documents' contexts (the few-shot examples) is
  //     computed once per worker; off, every row computes its whole context, as lm-eval does.
  //   group_continuations: one context's continuations (a multiple-choice question's choices)
  //     run as one row, the context once, as lm-eval's HFLM does for one-token continuations;
  //     off, every request computes every token of its own.
  bool prefix_reuse = true;
  bool group_continuations = true;
  // Data roots for tasks that name one (`data_root: mmlu` in a task file): name -> directory,
  // from the file's `data: {mmlu: ../../shared/data/mmlu}` and --data NAME=PATH flags.
  std::map<std::string, std::string> data;
  std::string gpus;  // default for --gpus; "" = not set
  // Fault handling
  // Intra-op threads of each CPU worker. LibTorch's CPU kernels can round
  // differently with another thread count, so this (not the number of workers)
  // fixes it: cpu:1 and cpu:N then give bit-identical results.
  int64_t cpu_threads = 1;
  int64_t max_attempts = 3;  // a batch that killed this many workers is quarantined
  double heartbeat_timeout_s = 30;  // a worker silent this long is treated as crashed
  int64_t max_worker_restarts = 10;  // per device slot
  // Memory a CPU worker may use when its batch budget is probed: "6GiB", "512MiB", or a share of
  // available memory such as "0.5"; "" = 0.8 * MemAvailable / number of CPU workers. GPUs use
  // their whole memory.
  std::string max_memory;
  std::string calibration_cache;  // SQLite file; "" = calibration_cache.h's default
  // Nightly runs (history.h): the history database ("" = its default path), and the drop of a
  // task's score against the previous checkpoint, in points, that fails the run (exit 4).
  std::string history;
  std::optional<double> fail_on_regression;
  // TensorBoard log folder ("" = none): every scored checkpoint's scores as scalars, one run per
  // config fingerprint (report/tensorboard.h).
  std::string tensorboard;
  // Code tasks' programs (docs/sandbox.md), the file's `code_execution:` mapping: at most
  // max_sandboxes at once beside generation, each within cpu_seconds of CPU time over its whole
  // process tree, memory of address space per process over the interpreter's own,
  // max_subprocesses processes and threads, and a wall-clock ceiling only for programs that sleep.
  struct CodeExecution {
    int64_t max_sandboxes = 0;  // 0: the cores the CPU workers leave, at least 1
    double cpu_seconds = 3.0;
    double wall_seconds = 0;  // 0: 10 + 3 x cpu_seconds
    int64_t memory = int64_t{2} << 30;
    int64_t max_subprocesses = 16;
    // --unsafe-no-sandbox: the same limits without bubblewrap or seccomp (the programs see the
    // machine as the user running gpueval); results.json says so.
    bool unsafe_no_sandbox = false;
    bool is_default() const;
    nlohmann::json to_json() const;
  } code_execution;

  // How a run reaches lm-eval for its lm_eval: tasks (the file's `lm_eval:` mapping): the Python
  // interpreter that has the gpueval_lm_eval package (python/; "": $GPUEVAL_LM_EVAL_PYTHON, else
  // python3 on PATH), a folder of lm-eval task files (lm-eval's --include_path; "": none), and
  // whether lm-eval's own task files are found too (lm-eval's include_defaults), and whether tasks
  // that run the model's code (humaneval, mbpp) may, in lm-eval's process and as lm-eval runs it
  // (lm-eval's --confirm_run_unsafe_code; gpueval's own code tasks use its sandbox instead).
  struct LmEval {
    std::string python;
    std::string include_path;
    bool include_defaults = true;
    bool confirm_run_unsafe_code = false;
    bool is_default() const {
      return python.empty() && include_path.empty() && include_defaults && !confirm_run_unsafe_code;
    }
    nlohmann::json to_json() const;
  } lm_eval;
  // Every field, unset optionals as null: the "config" object of results.json.
  nlohmann::json to_json() const;
};

// Reads and validates a run configuration; `model` and `tasks` are required, every other key
// falls back to the default above.
RunConfig load_run_config(const std::string& path);

// A config from RunConfig::to_json() (a sharded run's plan.json keeps one): the same checks as a
// file's, errors naming `source`; relative paths resolve against `base_dir`.
RunConfig run_config_from_json(const nlohmann::json& j, const std::string& source, const std::string& base_dir);

// The config as a file's keys (to_json() without `source` and unset values, `models` as
// `model`): JSON is YAML, so load_run_config() reads it back as this config.
nlohmann::json run_config_file(const RunConfig& config);

// The same config with every path (checkpoints, task files, data roots, output, history,
// calibration cache) absolute, relative ones taken from the working directory: what a config
// must be to mean the same on another machine with another working directory.
RunConfig with_absolute_paths(const RunConfig& config);

// Command-line flags that override the file; an unset field leaves the file's value.
struct ConfigOverrides {
  std::optional<std::vector<std::string>> model;  // --model (repeatable; globs allowed): replaces the file's models
  std::optional<std::string> output;  // --output
  std::optional<std::string> batch_size;  // --batch-size
  std::optional<int64_t> batch_tokens;  // --batch-tokens
  std::optional<std::string> gpus;  // --gpus
  std::optional<int64_t> limit;  // --limit
  std::optional<int64_t> num_fewshot;  // --num-fewshot
  std::optional<uint64_t> seed;  // --seed
  std::optional<std::string> dtype;  // --dtype auto|float32|bfloat16|float16
  std::optional<int64_t> max_length;  // --max-length
  std::optional<int64_t> cpu_threads;  // --cpu-threads
  std::optional<std::string> add_bos;  // --add-bos auto|true|false
  std::optional<std::string> prefix_reuse;  // --prefix-reuse on|off
  std::optional<std::string> group_continuations;  // --group-continuations on|off
  std::optional<std::string> max_memory;  // --max-memory
  std::optional<std::string> history;  // --history
  std::optional<std::string> tensorboard;  // --tensorboard
  std::optional<double> fail_on_regression;  // --fail-on-regression POINTS
  std::optional<std::vector<std::string>> tasks;  // --tasks: replaces the file's list
  std::vector<std::string> data;  // --data NAME=PATH, repeatable; each adds or replaces one root
  std::optional<std::string> apply_chat_template;  // --apply-chat-template [NAME] ("": the default template)
  std::optional<std::string> chat_template;  // --chat-template FILE
  std::optional<std::string> fewshot_as_multiturn;  // --fewshot-as-multiturn true|false
  std::optional<std::string> system_instruction;  // --system-instruction TEXT
  std::optional<std::string> think_end_token;  // --think-end-token TEXT
  std::optional<int64_t> max_sandboxes;  // --max-sandboxes
  bool unsafe_no_sandbox = false;  // --unsafe-no-sandbox
};

// Applies the set overrides, validating each new value as the file's would be; errors name the
// flag, and leave `config` unchanged.
void apply_overrides(RunConfig& config, const ConfigOverrides& overrides);

// The add_bos decision for a tokenizer that does (`tokenizer_adds_bos`) or does not add BOS
// by default; throws Error on a value other than auto/true/false.
bool resolve_add_bos(const std::string& add_bos, bool tokenizer_adds_bos);

}  // namespace gpueval
