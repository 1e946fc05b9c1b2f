// The segment ids of a packed row, the contract between the planner that packs rows (plan/packing.h)
// and the decoder whose attention masks read them (gpueval/model.h, DecoderModelImpl::forward_packed):
// a token's segment is part * kSegmentsPerPart + branch, where a row holds one or more parts (a
// context's trunk, branch 0, and its continuations, branches 1, 2, ...). Header-only, no LibTorch, so
// the planner reaches it without the model's headers.
#pragma once

#include <cstdint>

namespace gpueval {

inline constexpr int64_t kSegmentsPerPart = int64_t{1} << 32;

}  // namespace gpueval
