// Weight broadcast (`load: broadcast`): worker 0 reads the checkpoint once and NCCL broadcasts every
// parameter to the other GPU workers, instead of each worker mapping the safetensors itself.
//
// The handshake rides on the scheduler's frames (wire.h): each worker's Hello carries
// {"broadcast": {"rank": r, "world": N}}; rank 0 answers first with a kBroadcast frame holding a
// fresh ncclUniqueId (hex), which the scheduler forwards, as a kBroadcast frame, to ranks 1..N-1;
// then every rank joins the communicator, rank 0 loads from disk and sends, the others receive, and
// each answers Hello as usual. Ranks are slot order; each worker sees only its own GPU (cuda:0).
//
// broadcast_fallback_reason() is in every build; the NCCL functions exist only where
// GPUEVAL_WITH_NCCL is defined (src/run/weight_broadcast.cpp is compiled only then). Everything here is
// called from one thread of one process.
#pragma once

#include <string>
#include <vector>

#include "gpueval/model.h"
#include "run/devices.h"

namespace gpueval {

// Why `load: broadcast` cannot be used for `slots` in this build, or "" when it can: NCCL not built
// in, fewer than two workers, a CPU worker, or two workers on one GPU (NCCL refuses two ranks on
// one device). The caller falls back to per-worker mmap and says so.
inline std::string broadcast_fallback_reason(const std::vector<DeviceSlot>& slots) {
#ifndef GPUEVAL_WITH_NCCL
  (void)slots;
  return "this build has no NCCL";
#else
  if (slots.size() < 2) return "there is only one worker";
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].kind != DeviceSlot::Kind::kCuda) return "the workers are not all on GPUs";
    for (size_t j = 0; j < i; ++j)
      if (slots[j].index == slots[i].index)
        return "two workers share GPU " + std::to_string(slots[i].index) + " (NCCL needs one rank per GPU)";
  }
  return "";
#endif
}

struct BroadcastGroup {
  int rank = 0;  // 0 reads the checkpoint and sends
  int world = 1;  // number of workers in the group
  std::string nccl_id;  // ncclUniqueId as 256 hex digits, made by rank 0
};

#ifdef GPUEVAL_WITH_NCCL
// A fresh ncclUniqueId as hex, for rank 0 to hand out. Throws Error naming the NCCL call.
std::string new_broadcast_id();

// Loads the checkpoint in `dir` onto options.device (a CUDA device): rank 0 from its safetensors,
// the others by receiving each parameter, in named_parameters() order, over NCCL. Blocks until
// every rank has joined. Throws Error when the ranks' models differ (count or bytes of parameters)
// or an NCCL or CUDA call fails; the communicator is destroyed before it returns or throws.
DecoderModel load_model_broadcast(const std::string& dir, LoadOptions options, const BroadcastGroup& group);
#endif

}  // namespace gpueval
