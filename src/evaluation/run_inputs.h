// What a run (or `gpueval calibrate`) works on, loaded and checked from its RunConfig: the device
// slots, the model's config and tokenizer, the tasks and their requests, and the plan options with
// everything but the batch budget decided. The first step of the evaluation flow (evaluation.h);
// it calls tasks/, tokenizer/, model/ (config only), plan/ and run/devices, never a process.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "evaluation/lm_eval_tasks.h"
#include "gpueval/model_config.h"
#include "gpueval/request.h"
#include "gpueval/run_config.h"
#include "gpueval/task.h"
#include "gpueval/task_group.h"
#include "gpueval/tokenizer.h"
#include "plan/planner.h"
#include "run/devices.h"

namespace gpueval {

// What a run (or `gpueval calibrate`) works on, loaded and checked: the device slots, the model,
// the tasks and their requests (numbered in (task, document, choice) order), and the plan options
// with everything but the batch budget decided. Movable, not copyable (it owns the tokenizer).
struct RunInputs {
  nlohmann::json chat;  // the prompt format's record (ChatFormat::to_json); {} for plain prompts
  std::string spec;  // the device spec used (--gpus, else the config's, else "cpu")
  std::vector<DeviceSlot> slots;
  std::string model_dir;
  ModelConfig model_config;
  std::unique_ptr<Tokenizer> tokenizer;
  TaskSelection selection;
  std::vector<Task> tasks;
  std::vector<Request> requests;  // the tasks', then lm_eval's (from lm_eval_first)
  LmEvalRequests lm_eval;  // the lm_eval: tasks (lm_eval_tasks.h)
  int64_t lm_eval_first = 0;  // the index of lm_eval's first request in `requests`
  PlanOptions plan_options;  // batch_tokens: the config's, else 4096
};

// The config's tasks (groups expanded, from task_search_dirs) and their requests over the first
// `limit` documents of each, numbered in (task, document, choice) order. With apply_chat_template,
// their contexts are rendered by the chat template of the config's first checkpoint (or its
// chat_template file, with that checkpoint's special tokens): evaluation/chat_format.h.
// The config's lm_eval: entries are lm-eval's (lm_eval_tasks.h): their requests, as lm-eval built
// them for the same checkpoint, follow, numbered on from the tasks'. A name that is both one of
// gpueval's tasks and an lm-eval task of the run is an Error (their reports would collide).
struct TaskInputs {
  TaskSelection selection;
  std::vector<Task> tasks;
  std::vector<Request> requests;
  nlohmann::json chat;  // the prompt format they were built with (ChatFormat::to_json); {} for plain prompts
  LmEvalRequests lm_eval;
  int64_t lm_eval_first = 0;  // the index of lm_eval's first request in `requests`
};
TaskInputs load_tasks(const RunConfig& config, const std::string& executable);

// Sampling requests' settings their task file left unset (negative, request.h) filled from
// model_dir's generation_config.json, else transformers' defaults (model/config/generation_config.h).
void resolve_sampling(std::vector<Request>& requests, const std::string& model_dir);

// A run's tasks, loaded once for all its checkpoints, and their config fingerprint
// (run_identity.h), which the history and every checkpoint's journal key on.
struct RunTasks {
  TaskInputs inputs;
  std::string config_fp;
};
RunTasks load_run_tasks(const RunConfig& config, const std::string& executable);

// The device slots of `config.gpus` (else "cpu") on this machine, CPU slots with cpu_threads each.
std::vector<DeviceSlot> run_device_slots(const RunConfig& config);
// Refuses a model whose weights (every expert counted) do not fit the devices of `slots` in the dtype
// each worker will load (run/device_memory.h's check_weights_fit), before any worker starts.
void check_slots_fit(const ModelConfig& model, const RunConfig& config, const std::vector<DeviceSlot>& slots,
                     const std::string& model_dir);

// Whether every worker of `in` decodes a generation batch's sequences independently of each other
// (generate.h's generation_rows_independent for each slot's device, in the dtype it loads): then
// RunJournal::remaining may run a partly stored generation batch without its stored items.
bool generation_rows_independent_on(const RunInputs& in, const std::string& dtype);

// `model_dir`: the checkpoint to load; empty: the config's one model (an Error for a list or a glob).
// `tasks`: the config's tasks loaded already (load_run_tasks), copied in; null: loaded here.
RunInputs load_run_inputs(const RunConfig& config, const std::string& executable, const std::string& model_dir = "",
                          const TaskInputs* tasks = nullptr);

// The cost (WorkItem::cost) of the longest item the run's requests plan into.
int64_t longest_item_cost(const RunInputs& inputs);

// Where a task name is looked up, in order: $GPUEVAL_TASKS_DIR, <executable dir>/../tasks (an
// install's tasks/, or the checkout's for a build/ inside it), then the config file's directory.
std::vector<std::string> task_search_dirs(const RunConfig& config, const std::string& executable);

}  // namespace gpueval
