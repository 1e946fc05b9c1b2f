// The executor is what a worker runs for one Batch of the plan: one packed
// scoring forward for loglikelihood and rolling windows (packing.h: a shared
// context once per row, a shared prefix from the worker's PrefixCache), or one
// batched generation for generate_until, giving an ItemResult (plan/item_result.h) per work item
// (and, for generation, each one as its sequence ends: ExecutionOptions::on_item_done). A worker
// runs its generation batches through execute_generation, where the next batch's sequences join
// the running set as the current one's end.
// A forward that runs out of device memory (c10::OutOfMemoryError) is retried
// as two halves of the batch, recursively, so the run goes on with the results
// a smaller batch gives; only a single row that does not fit is an Error.
//
// execute_batch runs its forwards under c10::InferenceMode on the model's
// device; it reads the model and tokenizer only, so several threads may
// execute batches on the same model at once. Results are plain values that
// travel back to the scheduler as JSON/CBOR.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpueval/model.h"
#include "gpueval/request.h"
#include "gpueval/tokenizer.h"
#include "plan/item_result.h"
#include "plan/planner.h"
#include "run/prefix_cache.h"

namespace gpueval {

struct ExecutionOptions {
  PrefixCache* prefixes = nullptr;  // null: a batch's prefix is computed for it alone
  // Called before every forward with its rows and padded width; it may throw
  // c10::OutOfMemoryError (fault injection, a host memory guard), which is
  // handled as a real out-of-memory error.
  std::function<void(int64_t rows, int64_t width)> before_forward;
  // Called with each generate_until item's result as soon as its sequence ends, before the batch
  // is done, where generation_rows_independent(model) (generate.h): a batch's unfinished items
  // alone then give the tokens they give in it, so what ended need not be computed again.
  std::function<void(const ItemResult& item)> on_item_done;
};

struct ExecutionStats {
  int64_t tokens_computed = 0;  // real (unpadded) tokens through the model, prefixes included
  int64_t prefix_tokens = 0;  // of which prefix tokens computed for this batch (cache misses)
  int64_t oom_splits = 0;  // times a forward ran out of memory and was split
  nlohmann::json to_json() const;
  void add(const ExecutionStats& other);
};

// A generation batch to join the one under way (execute_generation), or none for now.
using GenerationNext = std::function<std::optional<Batch>()>;
// A batch of execute_generation is done: its results in its items' order, and what it computed.
using GenerationDone =
    std::function<void(const Batch& batch, std::vector<ItemResult> items, const ExecutionStats& stats)>;

// Throws Error for a batch that mixes generation with scoring, or whose items do not fit the
// model. Generation rows sample each with its own settings and seed (WorkItem).
std::vector<ItemResult> execute_batch(const DecoderModelImpl& model, const Tokenizer& tokenizer, const Batch& batch,
                                      const ExecutionOptions& options = {}, ExecutionStats* stats = nullptr);

// Generation batches back to back through one running set (generate.h's MorePrompts): `first`,
// then, while rows are free and where generation_rows_independent(model) (so that joining changes
// no token), each batch `next` returns, which must have first's prefix. `done` gets each batch as
// its last sequence ends, in the order they end, with the results execute_batch would give it
// alone; on_item_done hears of each item before. A batch with nothing to generate is done when it
// joins. Out of memory: every batch not yet done runs again on its own (execute_batch's splitting).
// Throws Error as execute_batch does, and for a joining batch with another prefix or other stop_ids
// (Batch::stop_ids, which end its sequences besides the model's EOS); `done` has then
// been called for the batches finished before.
void execute_generation(const DecoderModelImpl& model, const Tokenizer& tokenizer, const Batch& first,
                        const ExecutionOptions& options, const GenerationNext& next, const GenerationDone& done);

// lm-evaluation-harness's stop handling: the text cut at the first occurrence
// of each non-empty stop string in turn.
std::string cut_at_stops(std::string text, const std::vector<std::string>& stops);

}  // namespace gpueval
