// The SQLite calibration cache and the model fingerprint it is keyed by.
#include "store/calibration_cache.h"

#include <gmock/gmock.h>

#include <cstdlib>

#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "model/loading/model_fingerprint.h"
#include "run/batch_probe.h"
#include "test_util.h"

namespace gpueval {
namespace {

using ::testing::HasSubstr;

CalibrationKey key() { return {"abc123", "float32", "cpu: Test CPU x1 threads", 256}; }

CalibrationEntry entry(int64_t tokens) {
  CalibrationEntry e;
  e.batch_tokens = tokens;
  e.memory_limit_bytes = int64_t{3} << 30;
  ProbePoint p;
  p.batch_tokens = tokens;
  p.rows = tokens / 256;
  p.length = 256;
  p.tokens_per_second = 1234.5;
  p.peak_bytes = 99 << 20;
  p.fits = true;
  ProbeResult probe;
  probe.points = {p};
  probe.chosen_batch_tokens = tokens;
  probe.memory_limit_bytes = e.memory_limit_bytes;
  probe.reason = "test";
  e.probe = to_json(probe);
  return e;
}

TEST(CalibrationCache, StoreLookupRoundTripAndReplace) {
  testing::TempDir dir;
  const CalibrationCache cache(dir.file("sub/dir/calibration.sqlite"));
  EXPECT_FALSE(cache.lookup(key()));  // no file yet: a miss, not an error
  ASSERT_TRUE(cache.store(key(), entry(2048)));
  std::optional<CalibrationEntry> got = cache.lookup(key());
  ASSERT_TRUE(got);
  EXPECT_EQ(got->batch_tokens, 2048);
  EXPECT_EQ(got->memory_limit_bytes, int64_t{3} << 30);
  EXPECT_EQ(got->probe, entry(2048).probe);
  EXPECT_EQ(to_json(probe_result_from_json(got->probe)), entry(2048).probe);
  EXPECT_EQ(got->version, GPUEVAL_VERSION);
  EXPECT_GT(got->created, 1.7e9);
  ASSERT_TRUE(cache.store(key(), entry(4096)));
  EXPECT_EQ(cache.lookup(key())->batch_tokens, 4096);
  // A second object on the same file (another run) sees it.
  EXPECT_EQ(CalibrationCache(cache.path()).lookup(key())->batch_tokens, 4096);
}

TEST(CalibrationCache, EveryKeyFieldMatters) {
  testing::TempDir dir;
  const CalibrationCache cache(dir.file("c.sqlite"));
  ASSERT_TRUE(cache.store(key(), entry(1024)));
  CalibrationKey k = key();
  k.dtype = "bfloat16";
  EXPECT_FALSE(cache.lookup(k));
  k = key();
  k.device = "cpu: Test CPU x2 threads";
  EXPECT_FALSE(cache.lookup(k));
  k = key();
  k.length_bucket = 512;
  EXPECT_FALSE(cache.lookup(k));
  k = key();
  k.model = "def456";
  EXPECT_FALSE(cache.lookup(k));
  EXPECT_TRUE(cache.lookup(key()));
}

TEST(CalibrationCache, CorruptFileWarnsAndMisses) {
  testing::TempDir dir;
  const std::string path = dir.write("c.sqlite", std::string(8192, 'x'));
  const CalibrationCache cache(path);
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cache.lookup(key()));
  EXPECT_FALSE(cache.store(key(), entry(1024)));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr("[sched] warning: calibration cache " + path));
  EXPECT_THAT(err, HasSubstr("probing again"));
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 2) << err;
  EXPECT_EQ(io::read_file(path), std::string(8192, 'x'));  // left as it was
}

TEST(CalibrationCache, LengthBucketsAndDefaultPath) {
  EXPECT_EQ(length_bucket(0), 1);
  EXPECT_EQ(length_bucket(1), 1);
  EXPECT_EQ(length_bucket(100), 128);
  EXPECT_EQ(length_bucket(128), 128);
  EXPECT_EQ(length_bucket(129), 256);
  EXPECT_EQ(CalibrationCache::default_path("/x/y.sqlite"), "/x/y.sqlite");
  const char* saved = std::getenv("GPUEVAL_CACHE_DIR");
  const std::string restore = saved ? saved : "";
  ::setenv("GPUEVAL_CACHE_DIR", "/tmp/cachedir", 1);
  EXPECT_EQ(CalibrationCache::default_path(), "/tmp/cachedir/calibration.sqlite");
  ::unsetenv("GPUEVAL_CACHE_DIR");
  ::setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  EXPECT_EQ(CalibrationCache::default_path(), "/tmp/xdg/gpueval/calibration.sqlite");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_THAT(CalibrationCache::default_path(), HasSubstr("/.cache/gpueval/calibration.sqlite"));
  if (saved) ::setenv("GPUEVAL_CACHE_DIR", restore.c_str(), 1);
}

TEST(ModelFingerprint, ChangesWithConfigAndHeadersNotWithWeightBytes) {
  testing::TempDir dir;
  const std::string src = testing::source_dir() + "/models/stories260K";
  const std::string config = io::read_file(src + "/config.json");
  std::string weights = io::read_file(src + "/model.safetensors");
  dir.write("config.json", config);
  dir.write("model.safetensors", weights);
  const std::string a = model_fingerprint(dir.path());
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a, model_fingerprint(dir.path()));
  EXPECT_EQ(a, model_fingerprint(src));  // the name of the directory is not part of it
  weights[weights.size() - 1] ^= 1;  // a weight byte: not read
  dir.write("model.safetensors", weights);
  EXPECT_EQ(model_fingerprint(dir.path()), a);
  dir.write("config.json", config + " ");
  EXPECT_NE(model_fingerprint(dir.path()), a);
  dir.write("config.json", config);
  dir.write("model.safetensors", weights + "pad");  // size changes
  EXPECT_NE(model_fingerprint(dir.path()), a);
  dir.write("model.safetensors", "\x10");
  EXPECT_THAT(testing::error_of([&] { model_fingerprint(dir.path()); }), HasSubstr("model.safetensors"));
}

}  // namespace
}  // namespace gpueval
