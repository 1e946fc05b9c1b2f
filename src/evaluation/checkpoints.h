// The checkpoints a run scores. A config's `model` (or --model) names checkpoint directories
// and glob patterns (`runs/exp7/step-*`); resolve_checkpoints() expands them, fingerprints each
// directory (checkpoint_fingerprint(): config.json, the safetensors headers and sizes, and a
// sample of every tensor's bytes; never a hash of every weight byte), drops duplicates (the same
// directory, or two directories with the same fingerprint: copies of one checkpoint are scored
// once), and orders them oldest first: by training step when every checkpoint has one
// (training_step.h: trainer_state.json's global_step or a step-N style name), else by the time the
// checkpoint was written (the newest mtime of its config.json and *.safetensors files); ties by
// name in natural order (step-2 before step-10). Each gets a short name for its output directory and the reports:
// the directory's base name, or parent_base when two base names collide.
//
// A plain path that is not a checkpoint directory (no config.json) is an Error; one whose weights
// cannot be read comes back with `error` set; a glob skips
// matches that are not checkpoint directories (logs, optimizer states) and is an Error only
// when it matches no checkpoint at all. Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpueval {

struct Checkpoint {
  std::string path;  // the directory, as expanded (normalised, no trailing slash)
  std::string name;  // unique within the run: the base name, or parent_base on a clash
  std::string fingerprint;  // checkpoint_fingerprint(path)
  double mtime = 0;  // UNIX time it was written (see above)
  std::optional<int64_t> step;  // the training step it was saved at (training_step.h), if it says
  std::string error;  // non-empty: it cannot be fingerprinted (a damaged or half-written
                      // file); the run reports it as failed and scores the others
};

// True when `pattern` holds a glob metacharacter (*, ? or [).
bool is_glob(const std::string& pattern);

// Expands, fingerprints, deduplicates and orders. `source` names the config (or the flag) in
// errors: "<source>: model 'runs/x/step-*' matches no checkpoint directory (one with config.json)".
std::vector<Checkpoint> resolve_checkpoints(const std::vector<std::string>& patterns, const std::string& source);

// Natural order: digit runs compare as numbers ("step-2" < "step-10"), the rest bytewise.
bool natural_less(const std::string& a, const std::string& b);

}  // namespace gpueval
