// The dispatch policy: which queued batch an idle worker takes next. A pure function of what the
// scheduler knows, so that the policy can be read and tested apart from processes and pipes.
// It decides only the order batches run in and who runs them (and when a busy worker gets its next
// batch ahead: choose_ahead); a batch's results do not depend on
// it (every batch carries its own contents and seeds). Stateless and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace gpueval {

struct DispatchChoice {
  enum class Action {
    kWait,  // nothing queued
    kSwitchCheckpoint,  // the worker holds the previous checkpoint: it loads this one first
    kSend,  // send the batch at queue position `position`
  };
  Action action = Action::kWait;
  size_t position = 0;  // kSend only
};

// A queued batch as the policy sees it.
struct QueuedBatch {
  int64_t prefix_id = -1;  // Batch::prefix_id (-1: no shared prefix)
  int64_t prefix_tokens = 0;  // its prefix's length: what a worker that does not hold it computes first
  int64_t tokens = 0;  // the batch's padded tokens
  bool generation = false;  // a generate_until batch
};

// `queued`: every queued batch, in queue order. `held_prefix`: the prefix of the worker's last
// batch, which its prefix cache holds (-1: none). `others_prefixes`: the same for every other worker
// that is up (starting, idle or busy). The choice is the first queued batch with the prefix the
// worker holds; else work no other worker holds, so that each prefix is computed by as few workers
// as possible, the largest first (so that the last to be taken are short and the workers end
// together): of the batches without a prefix and the prefixes nobody holds (a prefix counts its
// length and all its queued batches), the one with the most tokens, the earlier in the queue on a
// tie, and for a prefix its first queued batch. Else every queued batch's prefix is held
// elsewhere, and taking one means computing its prefix again: the worker takes the last queued
// batch of the prefix whose holders have the most queued tokens each, if computing that prefix and
// batch takes fewer tokens than those holders' share (so the batch ends sooner than they would
// reach it); otherwise it waits, and is asked again as the queue changes.
DispatchChoice choose_dispatch(const std::vector<QueuedBatch>& queued, bool holds_checkpoint, int64_t held_prefix,
                               const std::vector<int64_t>& others_prefixes);

// The batch in flight on a busy worker, as the look-ahead sees it.
struct FlightBatch {
  bool generation = false;
  int64_t prefix_id = -1;
  int64_t items = 0;  // the items it was sent
  int64_t ended = 0;  // of which the worker said have ended (kItems)
  int64_t rows = 0;  // Batch::max_rows (0: all its items at once)
};

// The look-ahead: a busy worker gets its next batch before the current one's result, so that the
// next batch's sequences take the rows the current one's leave (executor.h's execute_generation).
// Only for a generation batch in flight alone (`in_flight` holds one), once a sequence has ended and
// the sequences still running fit its rows (no prompt waits: every row that frees from now on would
// stay empty), and only while the queue holds a batch for every worker that is up (`workers_up`,
// this one included), so that the last batches still go to whichever worker is free first. The
// batch is the first queued generation batch with the same prefix. Returns its queue position.
std::optional<size_t> choose_ahead(const std::vector<QueuedBatch>& queued, const std::vector<FlightBatch>& in_flight,
                                   size_t workers_up);

}  // namespace gpueval
