#include "gpueval/request.h"

#include <nlohmann/json.hpp>

#include "gpueval/error.h"

namespace gpueval {

const char* request_type_name(RequestType type) {
  switch (type) {
    case RequestType::kLoglikelihood: return "loglikelihood";
    case RequestType::kLoglikelihoodRolling: return "loglikelihood_rolling";
    case RequestType::kGenerateUntil: return "generate_until";
  }
  return "?";
}

RequestType parse_request_type(const std::string& name) {
  if (name == "loglikelihood") return RequestType::kLoglikelihood;
  if (name == "loglikelihood_rolling") return RequestType::kLoglikelihoodRolling;
  if (name == "generate_until") return RequestType::kGenerateUntil;
  throw Error(fmt::format("unknown request type '{}'", name));
}

nlohmann::json to_json(const Request& r) {
  nlohmann::json j = {{"index", r.index},
                      {"task", r.task},
                      {"doc_id", r.doc_id},
                      {"choice", r.choice},
                      {"type", request_type_name(r.type)},
                      {"context", r.context}};
  if (r.type == RequestType::kLoglikelihood) j["continuation"] = r.continuation;
  if (r.type == RequestType::kGenerateUntil) {
    j["stops"] = r.stops;
    j["max_tokens"] = r.max_tokens;
    if (r.sampled()) {
      j["temperature"] = r.temperature;
      j["top_k"] = r.top_k;
      j["top_p"] = r.top_p;
    }
  }
  return j;
}

nlohmann::json to_json(const RequestResult& r) {
  return {{"index", r.index},
          {"logprob", r.logprob},
          {"is_greedy", r.is_greedy},
          {"num_tokens", r.num_tokens},
          {"text", r.text}};
}

}  // namespace gpueval
