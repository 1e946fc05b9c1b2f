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
  nlohmann::json j = {{"index", r.index},   {"task", r.task},       {"doc_id", r.doc_id},
                      {"choice", r.choice}, {"type", request_type_name(r.type)}, {"context", r.context}};
  if (r.type == RequestType::kLoglikelihood) j["continuation"] = r.continuation;
  if (r.type == RequestType::kGenerateUntil) {
    j["stops"] = r.stops;
    j["max_tokens"] = r.max_tokens;
  }
  return j;
}

Request request_from_json(const nlohmann::json& j) {
  try {
    Request r;
    r.index = j.at("index").get<int64_t>();
    r.task = j.at("task").get<std::string>();
    r.doc_id = j.at("doc_id").get<int64_t>();
    r.choice = j.at("choice").get<int64_t>();
    r.type = parse_request_type(j.at("type").get<std::string>());
    r.context = j.at("context").get<std::string>();
    if (r.type == RequestType::kLoglikelihood) r.continuation = j.at("continuation").get<std::string>();
    if (r.type == RequestType::kGenerateUntil) {
      r.stops = j.at("stops").get<std::vector<std::string>>();
      r.max_tokens = j.at("max_tokens").get<int64_t>();
    }
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("malformed request: {}", e.what()));
  }
}

nlohmann::json to_json(const RequestResult& r) {
  return {{"index", r.index}, {"logprob", r.logprob}, {"is_greedy", r.is_greedy}, {"num_tokens", r.num_tokens},
          {"text", r.text}};
}

RequestResult result_from_json(const nlohmann::json& j) {
  try {
    RequestResult r;
    r.index = j.at("index").get<int64_t>();
    r.logprob = j.at("logprob").get<double>();
    r.is_greedy = j.at("is_greedy").get<bool>();
    r.num_tokens = j.at("num_tokens").get<int64_t>();
    r.text = j.at("text").get<std::string>();
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("malformed result: {}", e.what()));
  }
}

}  // namespace gpueval
