// The planner turns a run's requests into batches of model work. It tokenizes
// every request exactly as lm-evaluation-harness's HFLM does (so scores are
// comparable with published ones), splits loglikelihood_rolling texts into
// context-sized windows, sorts the work longest first and cuts it into batches
// under a token budget. A Batch is what the scheduler hands to a worker; it
// travels as JSON (or CBOR) and is validated on arrival.
//
// The plan is a pure function of (requests, tokenizer, options): nothing in it
// knows how many workers will run it, which is what lets any number of
// workers, or a resumed run, produce bit-identical per-request results.
// make_plan may tokenize on several threads (Tokenizer is thread-safe); the
// result never depends on how many. Plans and batches are plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpueval/request.h"
#include "gpueval/tokenizer.h"

namespace gpueval {

// One unit of model work.
//   loglikelihood:         tokens = context + continuation; tokens[first_target..] are scored.
//   loglikelihood_rolling: one window (part k of `parts`) of a request; same fields.
//   generate_until:        tokens = the prompt; generation stops at max_tokens, EOS or a stop string.
struct WorkItem {
  int64_t request_index = 0;  // Request::index
  int32_t part = 0;  // rolling windows: 0 .. parts-1; else 0
  int32_t parts = 1;
  RequestType type = RequestType::kLoglikelihood;
  std::vector<int32_t> tokens;
  int64_t first_target = 1;  // loglikelihood*: first scored position, >= 1
  std::vector<std::string> stops;  // generate_until
  int64_t max_tokens = 0;  // generate_until
  double temperature = 0.0;  // generate_until: 0 is greedy
  int64_t top_k = 0;  // generate_until sampling: 0 is off
  double top_p = 1.0;  // generate_until sampling: 1 is off
  uint64_t seed = 0;  // generate_until: request_seed(), so sampling never depends on the worker
  // generate_until: whether it also stops at PlanOptions::generation_stop_ids (not a request lm-eval
  // made: Request::as_hf). A batch holds items of one kind. Planning only; not in a plan's JSON.
  bool template_stops = true;
  // loglikelihood: the request index of the first of one document's requests whose contexts
  // differ but whose continuation is the same (a multiple-input task's choices); -1 otherwise.
  // Packing runs a family as one row over the prefix its contexts share (packing.h).
  int64_t family = -1;

  // Tokens the item occupies in a padded batch: the forward's inputs
  // (tokens - 1) for loglikelihood*, prompt + max_tokens for generate_until.
  int64_t cost() const;
};

struct Batch {
  int64_t id = 0;  // position in the plan
  std::vector<WorkItem> items;  // longest first (a context group's items together)
  // Prefix reuse (packing.h): items with the same context share one row, and
  // every item starts with `prefix`, whose keys and values a worker computes
  // once and keeps for the following batches with the same prefix_id.
  bool share_contexts = false;
  std::vector<int32_t> prefix;  // empty: none
  int64_t prefix_id = -1;  // the plan's id of `prefix`; -1 when empty
  // With share_contexts: the width rows are packed into (packing.h's pack_rows; a row wider than
  // it has a sequence of its own); 0: the longest row's.
  int64_t sequence_width = 0;
  int64_t padded_tokens = 0;  // sequences * their width (packing.h's pack_rows)
  // generate_until: the sequences decoded together (continuous batching, model/decoder/generate.h): when
  // one ends, the next item takes its place; 0: every item at once.
  int64_t max_rows = 0;
  // generate_until: tokens that end a sequence besides the model's EOS (generation_config.json's
  // eos_token_id and the tokenizer's): a chat template's end-of-turn token. Not returned.
  std::vector<int32_t> stop_ids;
};

struct PlanOptions {
  // Budget per batch: items * longest item's cost must stay within it. An item
  // longer than the budget gets a batch of its own.
  int64_t batch_tokens = 4096;
  // Batch::stop_ids of every generate_until batch (the run's chat template's end of turn).
  std::vector<int32_t> generation_stop_ids;
  int64_t max_batch_size = 0;  // most sequences (packed rows) per batch; 0 = unlimited
  // The model's context. Longer loglikelihood inputs are left-truncated to it,
  // rolling texts are windowed by it, generate_until prompts are left-truncated
  // to max_length - max_tokens.
  int64_t max_length = 2048;
  // Whether contexts start with the tokenizer's BOS (when it has one). Empty
  // loglikelihood contexts and rolling windows use the prefix token (BOS, else
  // EOS) whatever this says, as lm-evaluation-harness does.
  bool add_bos = true;
  uint64_t seed = 1234;  // run seed for generate_until sampling
  // Tokenizer threads; 0 = one per core. Never changes the plan.
  int threads = 0;
  // Shared computation (packing.h), two switches:
  //   prefix_reuse: a prefix of at least min_prefix_tokens shared by a set of contexts (a task's
  //     few-shot examples) is computed once per worker. Off: each row computes its whole context.
  //   group_continuations: a context's continuations (and a family's contexts) run as one row,
  //     and short rows are packed several to a sequence. Off: one row per item.
  // Both off computes every token of every request; prefix_reuse off with continuations grouped
  // computes what lm-evaluation-harness's HFLM computes.
  bool prefix_reuse = true;
  bool group_continuations = true;
  int64_t min_prefix_tokens = 16;
  // The model's RoPE length threshold (ModelConfig::rope_length_threshold(): dynamic and longrope
  // scaling). A row's RoPE tables follow its longest sequence, so a scoring item with more inputs
  // than this runs alone: a row of its own, in a batch that shares nothing (no prefix, no shared
  // context, no packing). Unset: no such rule.
  std::optional<int64_t> rope_length_threshold;
  // generate_until batching. Prompts equal to each other (a task's repeats) go together, and
  // prompts sharing a prefix of at least min_prefix_tokens (a task's few-shot examples) go in
  // batches that carry it (with prefix_reuse), longest first. A batch decodes up to
  // generation_rows sequences at once (and at most max_batch_size), fewer where their cache (twice
  // the widest row's prompt after the prefix plus max_tokens, per row) would pass
  // generation_kv_positions, and holds up to kGenerationItemsPerRow times that many items (within
  // generation_kv_positions of rows, and max_batch_size), and no more than an equal share of its
  // prefix's items among `workers`, so that every worker gets some. Its running set is refilled as sequences end, so it
  // runs full until its last sequences start; only then does it drain. Every sequence is journaled as it ends (where
  // rows are independent: run_journal.h), so a long batch loses no finished work to a crash. generation_kv_positions 0:
  // batch_tokens.
  static constexpr int64_t kGenerationItemsPerRow = 8;
  int64_t generation_rows = 16;
  int64_t generation_kv_positions = 0;
  int64_t workers = 1;
};

struct Plan {
  std::vector<Batch> batches;  // ids 0..n-1, longest first
  int64_t num_requests = 0;
  int64_t num_items = 0;
  int64_t total_tokens = 0;  // sum of item costs: the tokens a run without any reuse computes
  int64_t row_tokens = 0;  // tokens in the plan's rows (after packing, without prefixes)
  int64_t prefix_tokens = 0;  // sum of the distinct prefixes' lengths
  int64_t padded_tokens = 0;  // sum of batch padded_tokens
  int64_t num_prefixes = 0;  // distinct prefixes (prefix ids 0 .. num_prefixes-1)
  int64_t truncated_requests = 0;  // loglikelihood/generate_until requests left-truncated to fit max_length
  // Of those, loglikelihood requests whose continuation alone is longer than max_length: only
  // its last max_length tokens are scored (lm-eval 0.4.13 fails on these).
  int64_t long_continuations = 0;
  double padding_fraction() const;  // 1 - rows/padded; 0 for an empty plan
};

// Throws Error on bad options, duplicate request indices, a continuation longer
// than max_length, or a generate_until max_tokens that leaves no room for a prompt.
// Batches of one prefix are consecutive in the plan.
Plan make_plan(const std::vector<Request>& requests, const Tokenizer& tokenizer, const PlanOptions& options);

// The seed of a generate_until request: a fixed 64-bit hash of the run seed and
// the request's identity (task, doc_id, choice), stable across platforms.
uint64_t request_seed(uint64_t run_seed, const std::string& task, int64_t doc_id, int64_t choice);

// The same plan's work cut under other batch limits (batch_tokens,
// max_batch_size); the items, their grouping and prefixes do not change.
Plan rebatch(const Plan& plan, const PlanOptions& options);

// A batch's padded size: rows (packing.h's pack_rows; generate_until: items)
// times the longest row. Throws Error for items that do not extend the prefix.
int64_t batch_padded_tokens(const Batch& batch);

// A generate_until batch with only its items at `positions` (ascending, not empty): the same id
// and prefix, max_rows at most the items left, padded_tokens for them. What goes on of a
// batch some of whose sequences have ended already (scheduler.h, run_journal.h); its sequences
// give the tokens they give in the whole batch only where generation_rows_independent (generate.h).
Batch generation_batch_subset(const Batch& batch, const std::vector<size_t>& positions);

// The longest item cost in the plan: the length an auto batch size is probed at.
int64_t longest_item(const Plan& plan);

// The width rows of these lengths (one prefix's, or the loose rows) are packed into under
// `budget`: four times the median row, so that first fit leaves little room unused, and at
// least the 90th percentile, so that most rows fit; at most the budget. A row wider than this
// gets a sequence of its own, so one outlier does not make every sequence as long as it.
// 0 for no rows.
int64_t packed_sequence_width(std::vector<int64_t> lengths, int64_t budget);

nlohmann::json to_json(const WorkItem& item);
WorkItem work_item_from_json(const nlohmann::json& j);  // throws Error on a malformed object
nlohmann::json to_json(const Batch& batch);
Batch batch_from_json(const nlohmann::json& j);  // throws Error on a malformed object
nlohmann::json to_json(const Plan& plan);  // the batches, for logs and determinism checks

}  // namespace gpueval
