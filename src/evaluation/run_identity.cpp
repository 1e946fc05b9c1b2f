#include "evaluation/run_identity.h"

#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/sha256.h"

namespace gpueval {
namespace {

// name, length and bytes: "context\x1f12:Hello world!\x1e"
void field(std::string& out, const char* name, const std::string& value) {
  out += name;
  out += '\x1f';
  out += std::to_string(value.size());
  out += ':';
  out += value;
  out += '\x1e';
}

void field(std::string& out, const char* name, int64_t value) { field(out, name, std::to_string(value)); }

void field(std::string& out, const char* name, const std::optional<int64_t>& value) {
  field(out, name, value ? std::to_string(*value) : std::string("null"));
}

}  // namespace

std::string canonical_request(const Request& r) {
  std::string out;
  field(out, "task", r.task);
  field(out, "doc_id", r.doc_id);
  field(out, "choice", r.choice);
  field(out, "type", request_type_name(r.type));
  field(out, "context", r.context);
  field(out, "continuation", r.continuation);
  if (r.as_hf) field(out, "as_hf", "true");
  field(out, "stops", static_cast<int64_t>(r.stops.size()));
  for (const std::string& s : r.stops) field(out, "stop", s);
  field(out, "max_tokens", r.max_tokens);
  // Only when sampling, so that greedy requests keep their keys (and their history).
  if (r.sampled()) {
    field(out, "temperature", fmt::format("{}", r.temperature));
    field(out, "top_k", r.top_k);
    field(out, "top_p", fmt::format("{}", r.top_p));
  }
  return out;
}

std::string config_fingerprint(const RunConfig& config, const std::vector<Request>& requests) {
  std::string out = "gpueval-config-v1\n";
  field(out, "dtype", config.dtype);
  field(out, "add_bos", config.add_bos);
  field(out, "max_length", config.max_length);
  field(out, "seed", std::to_string(config.seed));
  field(out, "limit", config.limit);
  field(out, "num_fewshot", config.num_fewshot);
  field(out, "fewshot_seed", std::to_string(config.fewshot_seed));
  // Only when set, so that configs without it keep their fingerprint (and their history).
  for (const std::string& metric : config.extra_metrics) field(out, "extra_metric", metric);
  // The limits code tasks' programs run under decide their verdicts (how many sandboxes run at
  // once does not): only when changed, as above.
  RunConfig::CodeExecution limits = config.code_execution;
  limits.max_sandboxes = 0;
  if (!limits.is_default()) field(out, "code_execution", limits.to_json().dump());
  // The prompt format (only when used, as above): the template's text enters through every
  // context it rendered; think_end_token changes what metrics read.
  if (config.chat()) {
    field(out, "apply_chat_template", *config.apply_chat_template);
    field(out, "fewshot_as_multiturn", config.multiturn() ? "true" : "false");
    if (!config.chat_template_args.empty()) field(out, "chat_template_args", config.chat_template_args.dump());
  }
  if (!config.system_instruction.empty()) field(out, "system_instruction", config.system_instruction);
  if (!config.think_end_token.empty()) field(out, "think_end_token", config.think_end_token);
  field(out, "requests", static_cast<int64_t>(requests.size()));
  for (const Request& r : requests) field(out, "request", canonical_request(r));
  return sha256_hex(out);
}

std::string request_key(const std::string& model_fp, const std::string& config_fp, const Request& r) {
  std::string out = "gpueval-request-v1\n";
  field(out, "model", model_fp);
  field(out, "config", config_fp);
  field(out, "request", canonical_request(r));
  return sha256_hex(out);
}

}  // namespace gpueval
