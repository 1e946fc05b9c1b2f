// A run of a request list handed over from outside: what lm-evaluation-harness's `gpueval` model
// (python/gpueval_lm_eval) calls for each of loglikelihood, loglikelihood_rolling and
// generate_until with the whole list at once (`gpueval requests`, docs/lm_eval.md). The requests
// come in as JSONL, go through the same flow as a native run's (run_inputs.h's load_run_inputs
// without tasks, the planner: tokenized as lm-eval's hf model does, sorted, prefixes shared,
// batched, rolling texts windowed as hf does (Request::as_hf); the run loop: journal, scheduler, one
// worker per device), and their results go out as JSONL in the order they came. Nothing here knows lm-eval: the package
// turns its Instances into these lines and the results back.
//
// The journal is keyed by content: the requests (task, document and their position in it, type,
// text, generation settings) and the options that change results, in a folder of their own under
// a journal root, so the same command rerun after a crash or a kill -9 computes only what is
// missing, with any number of workers, and gives the same bits.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpueval/evaluation.h"
#include "gpueval/request.h"
#include "gpueval/run_config.h"

namespace gpueval {

// One request per line, an object with:
//   "type":         "loglikelihood" | "loglikelihood_rolling" | "generate_until" (required)
//   "context":      the prompt; for loglikelihood_rolling the whole text (required)
//   "continuation": loglikelihood only, required
//   "until":        generate_until: stop strings (default none: EOS and max_gen_toks end it)
//   "max_gen_toks": generate_until: the most tokens generated (default 256)
//   "temperature", "top_k", "top_p": generate_until sampling (default greedy: 0, 0, 1); a negative
//                   value takes the checkpoint's generation_config.json (request.h)
//   "task", "doc_id": where it comes from (default "" and 0): sampled requests' seeds, the
//                   journal's keys and the planner's families (one document's contexts) use them
//   "key":          a string the caller names the request by (the lm-eval bridge's); not read
// An unknown key, a missing or mistyped one is an Error naming <path>:<line>. Requests are numbered
// in file order; `choice` counts a document's requests in file order (so repeats stay apart); a
// request is hf's (Request::as_hf).
std::vector<Request> read_request_lines(const std::string& text, const std::string& path);

// A result line for `r`: loglikelihood {"logprob", "is_greedy", "tokens"}, loglikelihood_rolling
// {"logprob", "tokens"}, generate_until {"text", "tokens"}.
std::string result_line(const Request& request, const RequestResult& result);

struct RequestRunOptions {
  // The model (models[0]), devices, dtype, batch size and tokens, max_length, add_bos, seed,
  // prefix_reuse, group_continuations, cpu_threads and fault limits; `tasks` unused. `output`: the
  // run's folder (journal, logs, status.json); empty: a folder of its own under journal_root.
  RunConfig config;
  std::string requests_file;  // JSONL as read_request_lines reads it; "-": stdin
  std::string results_file;  // written whole (atomically) once every request has its result; "-": stdout
  std::string journal_root;  // where a run without `output` gets its folder: <root>/<key>
};

// What the model behind `config` is, checked as a run checks it (the checkpoint, its family, the
// devices, the tokenizer, add_bos and max_length) without starting a worker: {"model", "model_type",
// "max_length", "add_bos", "bos_token", "eos_token" (their text, null when absent), "chat_templates"
// ({name: text}, "default" for a single one)}. `gpueval requests --describe`: what the lm-eval
// package asks before any compute, so a bad model fails in one line first.
nlohmann::json describe_model(const RunConfig& config, const std::string& executable);

// Runs every request of the file and writes the results. Exit codes as run_evaluation's: 0 every
// result written; kExitIncomplete some request failed every attempt (quarantined; nothing
// written); 130/143 interrupted (what was computed is in the journal); kExitBusy another run holds
// the folder. Bad input is an Error before any worker starts.
int run_requests(const RequestRunOptions& run, const EvaluationOptions& options);

}  // namespace gpueval
