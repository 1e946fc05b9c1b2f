#include "store/calibration_cache.h"

#include <chrono>
#include <cstdlib>
#include <iostream>

#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "gpueval/error.h"
#include "store/sqlite_db.h"

namespace gpueval {
namespace {

const char* kSchema =
    "CREATE TABLE IF NOT EXISTS calibration ("
    " model TEXT NOT NULL, dtype TEXT NOT NULL, device TEXT NOT NULL, length_bucket INTEGER NOT NULL,"
    " batch_tokens INTEGER NOT NULL, memory_limit_bytes INTEGER NOT NULL, points TEXT NOT NULL,"
    " created REAL NOT NULL, version TEXT NOT NULL,"
    " PRIMARY KEY (model, dtype, device, length_bucket))";

using sqlite::Statement;

// One connection with the table in place, closed on scope exit.
class Db : public sqlite::Db {
 public:
  Db(const std::string& path, bool create) : sqlite::Db(path, create) {
    enable_wal();
    exec(kSchema);
  }
};

void bind_key(Statement& s, const CalibrationKey& key) {
  s.bind(1, key.model);
  s.bind(2, key.dtype);
  s.bind(3, key.device);
  s.bind(4, key.length_bucket);
}

}  // namespace

int64_t length_bucket(int64_t longest_cost) {
  int64_t b = 1;
  while (b < longest_cost) b *= 2;
  return b;
}

std::string CalibrationCache::default_path(const std::string& configured) {
  if (!configured.empty()) return configured;
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v && *v ? v : "";
  };
  if (!env("GPUEVAL_CACHE_DIR").empty()) return env("GPUEVAL_CACHE_DIR") + "/calibration.sqlite";
  if (!env("XDG_CACHE_HOME").empty()) return env("XDG_CACHE_HOME") + "/gpueval/calibration.sqlite";
  const std::string home = env("HOME").empty() ? "." : env("HOME");
  return home + "/.cache/gpueval/calibration.sqlite";
}

std::optional<CalibrationEntry> CalibrationCache::lookup(const CalibrationKey& key) const {
  if (!io::path_exists(path_)) return std::nullopt;
  try {
    Db db(path_, /*create=*/false);
    Statement s(db,
                "SELECT batch_tokens, memory_limit_bytes, points, created, version FROM calibration"
                " WHERE model = ?1 AND dtype = ?2 AND device = ?3 AND length_bucket = ?4");
    bind_key(s, key);
    if (!s.step()) return std::nullopt;
    CalibrationEntry e;
    e.batch_tokens = s.int_at(0);
    e.memory_limit_bytes = s.int_at(1);
    e.probe = nlohmann::json::parse(s.text_at(2));
    if (!e.probe.is_object()) fail(path_, "entry's probe is not a JSON object");
    e.created = s.double_at(3);
    e.version = s.text_at(4);
    if (e.batch_tokens <= 0) fail(path_, "entry has batch_tokens {}", e.batch_tokens);
    return e;
  } catch (const std::exception& e) {
    std::cerr << "[sched] warning: calibration cache " << e.what() << "; ignoring it and probing again\n";
    return std::nullopt;
  }
}

bool CalibrationCache::store(const CalibrationKey& key, const CalibrationEntry& entry) const {
  try {
    io::make_directories(io::dir_of(path_));
    Db db(path_, /*create=*/true);
    Statement s(db,
                "INSERT OR REPLACE INTO calibration (model, dtype, device, length_bucket, batch_tokens,"
                " memory_limit_bytes, points, created, version) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
    bind_key(s, key);
    s.bind(5, entry.batch_tokens);
    s.bind(6, entry.memory_limit_bytes);
    s.bind(7, entry.probe.dump());
    const double now = entry.created > 0
                           ? entry.created
                           : std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    s.bind(8, now);
    s.bind(9, entry.version.empty() ? std::string(GPUEVAL_VERSION) : entry.version);
    s.step();
    return true;
  } catch (const std::exception& e) {
    std::cerr << "[sched] warning: calibration cache " << e.what() << "; not stored\n";
    return false;
  }
}

}  // namespace gpueval
