// The training step a checkpoint was saved at, so that a night's checkpoints can be ordered and
// plotted by step (issue 35: the trend and the TensorBoard export). Checkpoints synced from object
// storage or another cluster arrive in any order, so the time a file was written says little; the
// step says what the training run meant.
//
// Where the step comes from, first match wins:
//   1. trainer_state.json's global_step (Hugging Face Trainer writes it into every checkpoint-N/);
//   2. the directory's base name: step-1000, step_1000, step1000, global_step1000, iter_0001000
//      (Megatron), checkpoint-1000 (Trainer), after an optional prefix that ends in '-', '_' or '.'
//      (run7-step-1000); letters' case does not matter.
// Neither: no step. Pure functions but for reading trainer_state.json; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace gpueval {

// The step in a directory's base name alone (rule 2); none when the name carries none, or a number
// too large for int64.
std::optional<int64_t> step_in_name(const std::string& base_name);

// Rules 1 and 2 for `checkpoint_dir`. A trainer_state.json that is not JSON, or whose global_step is
// present but not a non-negative integer, is a gpueval::Error naming the file.
std::optional<int64_t> training_step(const std::string& checkpoint_dir);

}  // namespace gpueval
