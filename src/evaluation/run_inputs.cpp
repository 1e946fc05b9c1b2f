#include "evaluation/run_inputs.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <thread>

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include "common/file_io.h"
#include "evaluation/chat_format.h"
#include "evaluation/checkpoints.h"
#include "evaluation/run_identity.h"
#include "gpueval/error.h"
#include "model/config/dtype.h"
#include "model/decoder/generate.h"
#include "model/config/generation_config.h"
#include "run/device_memory.h"

namespace gpueval {
namespace {

int visible_cuda_devices() {
  // Asking the CUDA runtime here is safe: workers are exec'd, so no CUDA state crosses a fork.
  return at::hasCUDA() ? static_cast<int>(at::detail::getCUDAHooks().getNumGPUs()) : 0;
}

}  // namespace

void check_slots_fit(const ModelConfig& model, const RunConfig& config, const std::vector<DeviceSlot>& slots,
                     const std::string& model_dir) {
  std::map<std::string, int> workers;  // per device: the workers that hold a replica on it
  for (const DeviceSlot& s : slots) ++workers[s.kind == DeviceSlot::Kind::kCuda ? s.name() : "cpu"];
  for (const auto& [name, n] : workers) {
    const at::Device device(name);
    check_weights_fit(model, resolve_dtype(config.dtype, device, model_dir), device, n, model_dir);
  }
}

bool generation_rows_independent_on(const RunInputs& in, const std::string& dtype) {
  for (const DeviceSlot& s : in.slots) {
    const at::Device device(s.kind == DeviceSlot::Kind::kCuda ? s.name() : "cpu");
    if (!generation_rows_independent(device, resolve_dtype(dtype, device, in.model_dir))) return false;
  }
  return !in.slots.empty();
}

std::vector<DeviceSlot> run_device_slots(const RunConfig& config) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<DeviceSlot> slots =
      parse_device_spec(config.gpus.empty() ? "cpu" : config.gpus, visible_cuda_devices(), cores);
  for (DeviceSlot& s : slots)
    if (s.kind == DeviceSlot::Kind::kCpu) s.threads = static_cast<int>(config.cpu_threads);
  return slots;
}

std::vector<std::string> task_search_dirs(const RunConfig& config, const std::string& executable) {
  // Task directories come before the config's own directory: a run config named after a task
  // (configs/mmlu.yaml running `tasks: [mmlu]`) must not be read as that task's definition.
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("GPUEVAL_TASKS_DIR")) dirs.emplace_back(env);
  if (!executable.empty()) dirs.push_back(io::dir_of(executable) + "/../tasks");
  if (!config.source.empty()) dirs.push_back(io::dir_of(config.source));
  return dirs;
}

// KV cache positions a generation batch's running rows may hold on the smallest of `slots`: a
// quarter of the memory one worker has besides its weights (a CPU worker's share of what is
// available; a GPU's memory shared by its workers), at least the scoring budget.
int64_t generation_kv_positions(const ModelConfig& model, const RunConfig& config, const std::vector<DeviceSlot>& slots,
                                const std::string& model_dir, int64_t batch_tokens) {
  int64_t cpu_workers = 0;
  std::map<int, int64_t> per_gpu;
  for (const DeviceSlot& s : slots) {
    if (s.kind == DeviceSlot::Kind::kCpu)
      ++cpu_workers;
    else
      ++per_gpu[s.index];
  }
  int64_t smallest = std::numeric_limits<int64_t>::max();
  if (cpu_workers > 0) {
    const at::ScalarType dtype = resolve_dtype(config.dtype, at::kCPU, model_dir);
    const int64_t per_position = (model.cache_values_are_keys() ? 1 : 2) * model.num_hidden_layers *
                                 model.cache_heads() * model.cache_head_dim() *
                                 static_cast<int64_t>(c10::elementSize(dtype));
    const int64_t memory = static_cast<int64_t>(0.8 * static_cast<double>(available_host_bytes())) / cpu_workers;
    smallest = std::min(smallest, memory / 4 / std::max<int64_t>(1, per_position));
  }
  for (const auto& [index, workers] : per_gpu) {
    const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
    const at::ScalarType dtype = resolve_dtype(config.dtype, device, model_dir);
    const int64_t per_position = (model.cache_values_are_keys() ? 1 : 2) * model.num_hidden_layers *
                                 model.cache_heads() * model.cache_head_dim() *
                                 static_cast<int64_t>(c10::elementSize(dtype));
    const int64_t memory = device_total_bytes(device) / workers - weight_bytes(model, dtype);
    smallest = std::min(smallest, std::max<int64_t>(0, memory) / 4 / std::max<int64_t>(1, per_position));
  }
  if (smallest == std::numeric_limits<int64_t>::max()) smallest = 0;
  return std::max(smallest, batch_tokens);
}

void resolve_sampling(std::vector<Request>& requests, const std::string& model_dir) {
  std::optional<SamplingDefaults> defaults;
  for (Request& r : requests) {
    if (!r.sampled() || (r.temperature >= 0 && r.top_k >= 0 && r.top_p >= 0)) continue;
    if (!defaults) defaults = generation_sampling_defaults(model_dir);
    if (r.temperature < 0) r.temperature = defaults->temperature;
    if (r.top_k < 0) r.top_k = defaults->top_k;
    if (r.top_p < 0) r.top_p = defaults->top_p;
  }
}

// The checkpoint whose chat template and special tokens a run's prompts use: its first.
std::string chat_model_dir(const RunConfig& config) {
  if (config.models.size() == 1 && !is_glob(config.models[0])) return config.models[0];
  for (const Checkpoint& c : resolve_checkpoints(config.models, config.source))
    if (c.error.empty()) return c.path;
  fail(config.source, "no checkpoint to take the chat template from");
}

TaskInputs load_tasks(const RunConfig& config, const std::string& executable) {
  const std::vector<std::string> search = task_search_dirs(config, executable);
  TaskInputs out;
  std::vector<std::string> native;
  for (const std::string& entry : config.tasks)
    if (!is_lm_eval_task(entry)) native.push_back(entry);
  // Groups (`tasks: [mmlu]`) expand to their tasks; the report aggregates them back.
  if (!native.empty()) out.selection = expand_tasks(native, search);
  TaskLoadOptions load_options;
  load_options.data_roots = config.data;
  load_options.num_fewshot = config.num_fewshot;
  load_options.fewshot_seed = config.fewshot_seed;
  load_options.extra_metrics = config.extra_metrics;
  if (!native.empty() && (config.chat() || !config.system_instruction.empty() || !config.think_end_token.empty())) {
    const ChatFormat chat = load_chat_format(config, chat_model_dir(config));
    load_options.prompt = chat.prompt;
    out.chat = chat.to_json();
  }
  out.tasks.reserve(out.selection.tasks.size());
  for (const std::string& name : out.selection.tasks) out.tasks.push_back(Task::load(name, search, load_options));
  std::vector<const Task*> task_ptrs;
  for (const Task& t : out.tasks) task_ptrs.push_back(&t);
  check_member_metrics(out.selection.groups, task_ptrs);  // suite scores name metrics the tasks have
  out.requests = build_requests(task_ptrs, config.limit);
  out.lm_eval_first = static_cast<int64_t>(out.requests.size());
  if (std::any_of(config.tasks.begin(), config.tasks.end(), is_lm_eval_task)) {
    out.lm_eval = load_lm_eval_requests(config, executable, chat_model_dir(config));
    std::set<std::string> ours;
    for (const Task& t : out.tasks) ours.insert(t.name());
    for (const TaskGroup& g : out.selection.groups) ours.insert(g.name());
    for (Request r : out.lm_eval.requests) {
      const std::string name = r.task.substr(kLmEvalPrefix.size());
      if (ours.count(name))
        fail(config.source, "'{}' is both one of gpueval's tasks and an lm-eval task of this run; list it once", name);
      r.index += out.lm_eval_first;
      out.requests.push_back(std::move(r));
    }
  }
  return out;
}

RunTasks load_run_tasks(const RunConfig& config, const std::string& executable) {
  RunTasks out;
  out.inputs = load_tasks(config, executable);
  out.config_fp = config_fingerprint(config, out.inputs.requests);
  return out;
}

RunInputs load_run_inputs(const RunConfig& config, const std::string& executable, const std::string& model_dir,
                          const TaskInputs* loaded) {
  RunInputs in;
  in.spec = config.gpus.empty() ? "cpu" : config.gpus;
  in.slots = run_device_slots(config);
  if (model_dir.empty() && (config.models.size() != 1 || is_glob(config.models[0])))
    fail(config.source, "model: this command takes one checkpoint, not a list or a glob");
  in.model_dir = model_dir.empty() ? config.models[0] : model_dir;
  if (!io::is_directory(in.model_dir)) fail(in.model_dir, "model directory does not exist");
  in.model_config = ModelConfig::load(in.model_dir + "/config.json");
  check_slots_fit(in.model_config, config, in.slots, in.model_dir);
  in.tokenizer = load_tokenizer(in.model_dir);

  TaskInputs tasks = loaded ? *loaded : load_tasks(config, executable);
  in.selection = std::move(tasks.selection);
  in.chat = tasks.chat;
  // Every checkpoint of a run is scored with the prompts of the first one's chat template.
  std::optional<ChatFormat> own;
  if (config.chat()) own = load_chat_format(config, in.model_dir);
  if (own && in.chat.contains("sha256")) {
    if (own->sha256 != in.chat["sha256"].get<std::string>())
      fail(in.model_dir,
           "its chat template ({}) differs from the one the run's prompts were rendered with ({}); "
           "score it in a run of its own, or give one template with chat_template: FILE",
           own->where, in.chat["template"].get<std::string>());
  }
  in.tasks = std::move(tasks.tasks);
  in.requests = std::move(tasks.requests);
  in.lm_eval = std::move(tasks.lm_eval);
  in.lm_eval_first = tasks.lm_eval_first;
  resolve_sampling(in.requests, in.model_dir);
  for (const Task& task : in.tasks) {
    for (const std::string& note : task.notes()) std::cerr << "[sched] note: " << note << "\n";
  }

  PlanOptions& po = in.plan_options;
  po.batch_tokens = config.batch_tokens > 0 ? config.batch_tokens : 4096;
  if (config.batch_size != "auto") po.max_batch_size = std::stoll(config.batch_size);
  po.max_length = config.max_length ? *config.max_length : in.model_config.max_position_embeddings;
  if (in.model_config.arch.learned_positions && po.max_length > in.model_config.max_position_embeddings)
    fail(config.source, "max_length {} is past the {} positions the model in {} has learned (max_position_embeddings)",
         po.max_length, in.model_config.max_position_embeddings, in.model_dir);
  // What the tokenizer does by default: whether encoding with special tokens puts BOS first.
  const std::vector<int32_t> probe = in.tokenizer->encode("a", /*add_special_tokens=*/true);
  const bool tokenizer_adds_bos = in.tokenizer->bos_id() && !probe.empty() && probe.front() == *in.tokenizer->bos_id();
  po.add_bos = resolve_add_bos(config.add_bos, tokenizer_adds_bos);
  if (po.add_bos && !in.tokenizer->bos_id())
    fail(config.source, "add_bos is true but the tokenizer of {} has no BOS token", in.model_dir);
  std::cerr << fmt::format("[sched] contexts {} BOS ({}add_bos: {})\n", po.add_bos ? "start with" : "have no",
                           config.add_bos == "auto" ? "the tokenizer's default, " : "", config.add_bos);
  // A chat template's end of turn ends generation as EOS does (recorded with the template).
  if (own) {
    po.generation_stop_ids = own->end_of_turn_ids(*in.tokenizer);
    nlohmann::json ends = nlohmann::json::array();
    for (int32_t id : po.generation_stop_ids) ends.push_back(in.tokenizer->decode({id}, false));
    in.chat["end_of_turn"] = ends;
  }
  po.seed = config.seed;
  po.prefix_reuse = config.prefix_reuse;
  po.group_continuations = config.group_continuations;
  po.rope_length_threshold = in.model_config.rope_length_threshold();
  po.workers = static_cast<int64_t>(in.slots.size());
  po.generation_kv_positions =
      generation_kv_positions(in.model_config, config, in.slots, in.model_dir, po.batch_tokens);
  return in;
}

int64_t longest_item_cost(const RunInputs& inputs) {
  return std::max<int64_t>(1, longest_item(make_plan(inputs.requests, *inputs.tokenizer, inputs.plan_options)));
}

}  // namespace gpueval
