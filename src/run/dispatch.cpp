#include "run/dispatch.h"

#include <algorithm>

namespace gpueval {

DispatchChoice choose_dispatch(const std::vector<int64_t>& queued_prefixes, bool holds_checkpoint,
                               int64_t held_prefix, const std::vector<int64_t>& others_prefixes) {
  DispatchChoice choice;
  if (queued_prefixes.empty()) return choice;
  if (!holds_checkpoint) {
    choice.action = DispatchChoice::Action::kSwitchCheckpoint;
    return choice;
  }
  choice.action = DispatchChoice::Action::kSend;
  const auto held_by_other = [&](int64_t prefix) {
    return std::find(others_prefixes.begin(), others_prefixes.end(), prefix) != others_prefixes.end();
  };
  if (held_prefix >= 0)
    for (size_t k = 0; k < queued_prefixes.size(); ++k)
      if (queued_prefixes[k] == held_prefix) {
        choice.position = k;
        return choice;
      }
  for (size_t k = 0; k < queued_prefixes.size(); ++k)
    if (queued_prefixes[k] < 0 || !held_by_other(queued_prefixes[k])) {
      choice.position = k;
      return choice;
    }
  choice.position = 0;
  return choice;
}

}  // namespace gpueval
