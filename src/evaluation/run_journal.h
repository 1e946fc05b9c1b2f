// How an evaluation run uses its journal (journal.h) to resume: it keys every
// request of the run (run_identity.h), loads what an earlier run of the same
// model and config stored, drops from the plan every batch whose items are all
// stored (their results are taken from the journal instead), and records each
// finished batch as it arrives, and each generation item as its sequence ends
// (Scheduler::run's on_items). The plan itself is made exactly as an
// uninterrupted run makes it, and a batch with only some items stored runs
// whole, so every result is computed in the same batch it would have been
// computed in without the interruption: a resumed run's results are bit for
// bit those of an uninterrupted one, with any number of workers. The one
// exception keeps that promise too: where a generation batch's sequences do not
// depend on each other (generation_rows_independent, generate.h), a batch with
// some items stored runs only the others.
//
// Not thread-safe; the aggregator (run_evaluation) owns it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpueval/request.h"
#include "gpueval/run_config.h"
#include "plan/planner.h"
#include "run/executor.h"
#include "store/journal.h"

namespace gpueval {

class RunJournal {
 public:
  // Opens <output_dir>/journal.sqlite for (model_fp, config_fp, requests), config_fp being
  // config_fingerprint(config, requests) (run_identity.h); fresh starts it over.
  // Throws Error as Journal::open does (another model or config, a corrupt journal).
  RunJournal(const std::string& output_dir, const std::string& model_fp, const std::string& model_path,
             const std::string& config_fp, const std::vector<Request>& requests, bool fresh);

  const std::string& path() const { return journal_.path(); }
  // Where the journal of a run writing to `output_dir` is: <output_dir>/journal.sqlite.
  static std::string path_in(const std::string& output_dir) { return output_dir + "/journal.sqlite"; }
  std::optional<int64_t> batch_tokens() const { return journal_.batch_tokens(); }
  void set_batch_tokens(int64_t tokens) { journal_.set_batch_tokens(tokens); }
  std::optional<std::string> plan_fingerprint() const { return journal_.plan_fingerprint(); }
  void set_plan_fingerprint(const std::string& fp) { journal_.set_plan_fingerprint(fp); }

  // The plan with only the batches that still need computing (ids kept); the
  // stored items of every dropped batch are appended to items_of[request_index].
  // Logs "[sched] journal <path>: N of M requests already scored; computing K in B batches", M
  // counting the requests with items in `plan` (a shard's plan holds only some). With
  // `generation_rows_independent`, a generate_until batch keeps only its items not stored (the
  // stored ones are appended to items_of), and the line adds "(B batches go on without their I
  // sequences that ended before)".
  Plan remaining(const Plan& plan, std::vector<std::vector<ItemResult>>& items_of,
                 bool generation_rows_independent = false);

  // Commits a finished batch's items in one transaction. Throws Error
  // ("<path>: cannot record results: database or disk is full") when it cannot.
  void record(const std::vector<ItemResult>& items);
  // Commits items that are final before their batch is (a generation's sequences as they end),
  // in one transaction; a batch's record() later writes them again, unchanged. Errors as record().
  void record_ahead(const std::vector<ItemResult>& items);

  // Program verdicts by execution key (program_runs.h): the stored ones, and storing more (one
  // transaction; errors as record()). May be called from another thread than the rest while no
  // other call runs (program_runs.h records from its sandbox threads, one at a time).
  std::map<std::string, Journal::StoredVerdict> load_verdicts() const { return journal_.load_verdicts(); }
  void record_verdicts(const std::vector<std::pair<std::string, Journal::StoredVerdict>>& verdicts) {
    journal_.record_verdicts(verdicts);
  }

  // results.json's "journal": path, requests_resumed, requests_computed,
  // batches_resumed, batches_computed, items_resumed_in_batches (stored items of batches that
  // ran without them) and items_recorded_ahead (items this run recorded before their batch ended).
  nlohmann::json summary() const;
  size_t stored_items() const { return stored_.size(); }  // results of this run's requests found on disk
  int64_t requests_computed() const { return requests_computed_; }
  int64_t batches_computed() const { return batches_computed_; }

 private:
  std::string config_fp_;  // before journal_: it is opened with it
  Journal journal_;
  std::vector<std::string> keys_;  // [request index] -> request key
  std::map<std::pair<int64_t, int32_t>, ItemResult> stored_;  // (request index, part) -> stored item
  std::vector<bool> computed_;  // [request index]: recorded by this run
  int64_t requests_resumed_ = 0, requests_computed_ = 0;
  int64_t batches_resumed_ = 0, batches_computed_ = 0;
  int64_t items_resumed_in_batches_ = 0, items_recorded_ahead_ = 0;
};

}  // namespace gpueval
