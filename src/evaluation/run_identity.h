// What a run's per-request results depend on, as fingerprints: the key the journal
// (journal.h) stores each result under, so that a resumed run reuses a stored result only
// when the model, everything in the config that changes results, and the request itself are
// the same. Devices, the number of workers, batch limits, prefix reuse and the output
// directory are deliberately left out: the plan, and so every result, is independent of the
// workers, and the batch budget is kept in the journal itself (Journal::batch_tokens).
//
// Each fingerprint is SHA-256 (lowercase hex) over a canonical encoding: every field as
// name, byte length and bytes, so any byte string (including invalid UTF-8 in a task's data)
// is encoded exactly and no two different values encode alike. Stateless and thread-safe.
#pragma once

#include <string>
#include <vector>

#include "gpueval/request.h"
#include "gpueval/run_config.h"

namespace gpueval {

// The request's identity without its index: task, doc_id, choice, type, context,
// continuation, stops and max_tokens.
std::string canonical_request(const Request& r);

// Over every request (canonical_request, in order) and the config's dtype, add_bos (as
// configured), max_length, seed, limit, num_fewshot and fewshot_seed (and, when set, extra_metrics,
// code_execution limits and the chat options: apply_chat_template, fewshot_as_multiturn,
// chat_template_args, system_instruction, think_end_token).
std::string config_fingerprint(const RunConfig& config, const std::vector<Request>& requests);

// The journal key of one request: SHA-256 of the model fingerprint, the config fingerprint
// and canonical_request(r).
std::string request_key(const std::string& model_fp, const std::string& config_fp, const Request& r);

}  // namespace gpueval
