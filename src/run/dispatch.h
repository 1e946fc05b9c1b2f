// The dispatch policy: which queued batch an idle worker takes next. A pure function of what the
// scheduler knows, so that the policy can be read and tested apart from processes and pipes.
// It decides only the order batches run in and who runs them; a batch's results do not depend on
// it (every batch carries its own contents and seeds). Stateless and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpueval {

struct DispatchChoice {
  enum class Action {
    kWait,              // nothing queued
    kSwitchCheckpoint,  // the worker holds the previous checkpoint: it loads this one first
    kSend,              // send the batch at queue position `position`
  };
  Action action = Action::kWait;
  size_t position = 0;  // kSend only
};

// `queued_prefixes`: Batch::prefix_id of every queued batch, in queue order (-1: no shared
// prefix). `held_prefix`: the prefix of the worker's last batch, which its prefix cache holds
// (-1: none). `others_prefixes`: the same for every other worker that is up (starting, idle or
// busy). The choice is the first queued batch with the prefix the worker holds; else the first
// one without a prefix or with a prefix no other worker holds, so each prefix is computed by as
// few workers as possible; else the head of the queue.
DispatchChoice choose_dispatch(const std::vector<int64_t>& queued_prefixes, bool holds_checkpoint,
                               int64_t held_prefix, const std::vector<int64_t>& others_prefixes);

}  // namespace gpueval
