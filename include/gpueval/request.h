// Requests are the unit of work every task reduces to, exactly as in
// lm-evaluation-harness: loglikelihood(context, continuation),
// loglikelihood_rolling(text) and generate_until(context, stops, max_tokens).
// A RequestResult is what a worker computed for one request. Both are plain
// values that travel over the scheduler's pipes as JSON/CBOR; `index` is the
// request's position in the run's full request list and is what ties a result
// back to its request, whichever worker computed it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gpueval {

enum class RequestType { kLoglikelihood, kLoglikelihoodRolling, kGenerateUntil };

const char* request_type_name(RequestType type);  // "loglikelihood", "loglikelihood_rolling", "generate_until"
RequestType parse_request_type(const std::string& name);  // throws Error

struct Request {
  int64_t index = 0;  // position in the run's request list
  std::string task;  // task name
  int64_t doc_id = 0;  // document within the task
  int64_t choice = 0;  // which continuation of the document (multiple choice); generate_until: which
                       // repeat (0 .. the task's repeats - 1); else 0
  RequestType type = RequestType::kLoglikelihood;
  std::string context;  // loglikelihood/generate_until: the prompt; rolling: the whole text
  std::string continuation;  // loglikelihood only
  std::vector<std::string> stops;  // generate_until only
  int64_t max_tokens = 256;  // generate_until only
  // generate_until sampling (the task's generation_kwargs): temperature 0 decodes greedily;
  // top_k 0 and top_p 1 are off. A negative value stands for "sampling, but not set in the task
  // file": the run fills it from the checkpoint's generation_config.json, else transformers'
  // default (temperature 1, top_k 50, top_p 1), before anything is planned or fingerprinted
  // (resolve_sampling in evaluation/run_inputs).
  double temperature = 0.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  // A request lm-eval made (`gpueval requests`, a run's lm_eval: tasks), whose numbers must be
  // lm-eval's hf model's (0.4.13): a rolling text is encoded with the tokenizer's special tokens
  // (BOS as add_bos says, unless the text starts with it) before the windows' own prefix token, so
  // a tokenizer that adds BOS scores P(BOS | BOS) first (gpueval's own tasks score the text's own
  // tokens only); a generation stops at its `until` texts and the checkpoint's EOS only, not at a
  // chat template's end of turn (PlanOptions::generation_stop_ids, which gpueval's own tasks stop at).
  bool as_hf = false;
  bool sampled() const { return temperature != 0.0; }
};

struct RequestResult {
  int64_t index = 0;
  double logprob = 0;  // loglikelihood(_rolling): sum of target-token logprobs
  bool is_greedy = false;  // loglikelihood: every continuation token was the argmax
  int64_t num_tokens = 0;  // tokens scored (loglikelihood*) or generated (generate_until)
  std::string text;  // generate_until: the continuation, cut at the first stop sequence
};

nlohmann::json to_json(const Request& r);
nlohmann::json to_json(const RequestResult& r);

}  // namespace gpueval
