// The calibration cache: the batch budget chosen by probing (run/batch_probe.h), remembered per
// (model fingerprint, dtype, device description, length bucket) in a SQLite file, so that a run
// or `gpueval calibrate` on the same hardware does not probe again. The file lives at the run
// config's `calibration_cache`, else $GPUEVAL_CACHE_DIR/calibration.sqlite, else
// $XDG_CACHE_HOME/gpueval/calibration.sqlite, else ~/.cache/gpueval/calibration.sqlite.
//
// Several workers and runs may use one file at once: it is in WAL mode with a busy timeout, and
// every lookup or store opens, uses and closes its own connection, so a CalibrationCache object
// holds nothing but the path and is safe to use from several threads. A cache is an
// optimisation and never fails a run: an unreadable or corrupt file is one warning line on
// stderr and reads as a miss (a store into it is skipped with a warning). The cache keeps the
// probe as the JSON object it was given; reading it back as a ProbeResult is the caller's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace gpueval {

struct CalibrationKey {
  std::string model;  // model_fingerprint()
  std::string dtype;  // resolved: "float32", "bfloat16", ...
  std::string device;  // device_description()
  int64_t length_bucket = 0;  // length_bucket() of the run's longest request
};

struct CalibrationEntry {
  int64_t batch_tokens = 0;  // the chosen budget
  int64_t memory_limit_bytes = 0;  // the limit the probe was judged against
  nlohmann::json probe;  // the probe that chose it, as run/batch_probe.h's to_json(ProbeResult)
  double created = 0;  // Unix time of the store
  std::string version;  // gpueval version that measured it
};

// The smallest power of two >= cost (at least 1): requests of similar length share an entry.
int64_t length_bucket(int64_t longest_cost);

class CalibrationCache {
 public:
  explicit CalibrationCache(std::string path) : path_(std::move(path)) {}

  // Where the cache lives: `configured` if not empty, else the environment as described above.
  static std::string default_path(const std::string& configured = "");

  const std::string& path() const { return path_; }

  // nullopt on a miss, a missing file, or an unreadable one (with a warning).
  std::optional<CalibrationEntry> lookup(const CalibrationKey& key) const;
  // Inserts or replaces the entry; creates the file and its directory. False (with a warning)
  // when the file cannot be written.
  bool store(const CalibrationKey& key, const CalibrationEntry& entry) const;

 private:
  std::string path_;
};

}  // namespace gpueval
