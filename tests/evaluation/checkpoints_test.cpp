// Checkpoint lists and globs (checkpoints.h) and the checkpoint fingerprint that tells nightly
// checkpoints of one architecture apart (model_fingerprint.h).
#include <sys/stat.h>
#include <utime.h>

#include <filesystem>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/file_io.h"
#include "evaluation/checkpoints.h"
#include "gpueval/error.h"
#include "model/loading/model_fingerprint.h"
#include "model/loading/safetensors.h"
#include "test_util.h"

namespace gpueval {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string stories() { return testing::source_dir() + "/models/stories260K"; }

// Sets the mtime of every file in `dir` (when the checkpoint was "written").
void set_written(const std::string& dir, time_t when) {
  for (const auto& e : fs::directory_iterator(dir)) {
    utimbuf t{when, when};
    ASSERT_EQ(::utime(e.path().c_str(), &t), 0);
  }
}

TEST(CheckpointFingerprint, SeesWeightChangesTheArchitectureFingerprintIgnores) {
  testing::TempDir dir;
  testing::perturbed_copy(stories(), dir.file("copy"), 0.0, 1);
  testing::perturbed_copy(stories(), dir.file("noisy"), 0.01, 1);
  // Same architecture, headers and sizes: one model fingerprint (one calibration entry)...
  EXPECT_EQ(model_fingerprint(dir.file("noisy")), model_fingerprint(stories()));
  // ...but the weights differ, and a byte-identical copy is the same checkpoint.
  EXPECT_NE(checkpoint_fingerprint(dir.file("noisy")), checkpoint_fingerprint(stories()));
  EXPECT_EQ(checkpoint_fingerprint(dir.file("copy")), checkpoint_fingerprint(stories()));
  EXPECT_EQ(checkpoint_fingerprint(stories()).size(), 64u);
}

TEST(CheckpointFingerprint, OneFlippedWeightInAnyTensorIsSeen) {
  testing::TempDir dir;
  testing::perturbed_copy(stories(), dir.file("a"), 0.0, 1);
  const std::string weights = dir.file("a") + "/model.safetensors";
  const std::string before = checkpoint_fingerprint(dir.file("a"));
  // Every tensor is sampled: flip one bit at the start of the tensor stored last.
  std::string bytes = io::read_file(weights);
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  uint64_t last = 0;
  // The file is kept in a variable: looping over a temporary's tensors() read freed memory (ASan).
  const auto file = SafetensorsFile::open(weights);
  for (const TensorInfo& t : file->tensors()) last = std::max(last, t.data_begin);
  bytes[8 + header_len + last] ^= 0x01;
  io::write_file_atomic(weights, bytes);
  EXPECT_NE(checkpoint_fingerprint(dir.file("a")), before);
}

// Checkpoints whose names carry no training step (training_step.h) go by the time they were written.
TEST(Checkpoints, GlobExpandsOldestFirstSkippingNonCheckpoints) {
  testing::TempDir dir;
  fs::create_directories(dir.file("run/logs"));  // matches the glob, holds no config.json
  testing::perturbed_copy(stories(), dir.file("run/v10"), 0.01, 10);
  testing::perturbed_copy(stories(), dir.file("run/v2"), 0.01, 2);
  testing::perturbed_copy(stories(), dir.file("run/v300"), 0.01, 300);
  set_written(dir.file("run/v10"), 1700000200);
  set_written(dir.file("run/v2"), 1700000100);
  set_written(dir.file("run/v300"), 1700000050);  // rewritten earlier than the others: it goes first
  const auto cks = resolve_checkpoints({dir.file("run/*")}, "cfg.yaml");
  ASSERT_EQ(cks.size(), 3u);
  EXPECT_EQ(cks[0].name, "v300");
  EXPECT_EQ(cks[1].name, "v2");
  EXPECT_EQ(cks[2].name, "v10");
  EXPECT_EQ(cks[1].path, dir.file("run/v2"));
  EXPECT_DOUBLE_EQ(cks[1].mtime, 1700000100);
  EXPECT_FALSE(cks[1].step.has_value());
  EXPECT_EQ(cks[0].fingerprint, checkpoint_fingerprint(dir.file("run/v300")));
  // Written at the same second: natural order of the names.
  for (const char* s : {"v10", "v2", "v300"}) set_written(dir.file(std::string("run/") + s), 1700000000);
  const auto tied = resolve_checkpoints({dir.file("run/v*")}, "cfg.yaml");
  ASSERT_EQ(tied.size(), 3u);
  EXPECT_EQ(tied[0].name, "v2");
  EXPECT_EQ(tied[1].name, "v10");
  EXPECT_EQ(tied[2].name, "v300");
}

// Checkpoints synced from elsewhere arrive in any order: when every one has a training step, the
// step orders them (here against the order they were written); one without a step puts the whole
// run back in write order.
TEST(Checkpoints, TrainingStepsOrderThemWhenEveryOneHasOne) {
  testing::TempDir dir;
  testing::perturbed_copy(stories(), dir.file("run/step-0"), 0.01, 1);
  testing::perturbed_copy(stories(), dir.file("run/step-500"), 0.01, 2);
  testing::perturbed_copy(stories(), dir.file("run/global_step1000"), 0.01, 3);
  set_written(dir.file("run/global_step1000"), 1700000000);
  set_written(dir.file("run/step-0"), 1700000100);
  set_written(dir.file("run/step-500"), 1700000200);
  const auto cks = resolve_checkpoints({dir.file("run/*")}, "cfg.yaml");
  ASSERT_EQ(cks.size(), 3u);
  EXPECT_EQ(cks[0].name, "step-0");
  EXPECT_EQ(cks[1].name, "step-500");
  EXPECT_EQ(cks[2].name, "global_step1000");
  EXPECT_EQ(cks[2].step, 1000);
  testing::perturbed_copy(stories(), dir.file("run/final"), 0.01, 4);
  set_written(dir.file("run/final"), 1700000300);
  const auto mixed = resolve_checkpoints({dir.file("run/*")}, "cfg.yaml");
  ASSERT_EQ(mixed.size(), 4u);
  EXPECT_EQ(mixed[0].name, "global_step1000");
  EXPECT_EQ(mixed[3].name, "final");
}

TEST(Checkpoints, ListsDropDuplicatesAndNameClashesGetTheParent) {
  testing::TempDir dir;
  testing::perturbed_copy(stories(), dir.file("a/final"), 0.01, 1);
  testing::perturbed_copy(stories(), dir.file("b/final"), 0.01, 2);
  testing::perturbed_copy(stories(), dir.file("b/copy-of-a"), 0.0, 0);
  fs::copy(dir.file("a/final"), dir.file("b/copy-of-a"),
           fs::copy_options::overwrite_existing | fs::copy_options::recursive);
  const auto cks = resolve_checkpoints(
      {dir.file("a/final"), dir.file("b/final"), dir.file("a/final/"), dir.file("b/copy-of-a")}, "cfg.yaml");
  ASSERT_EQ(cks.size(), 2u);  // the repeated path and the byte-identical copy are scored once
  std::set<std::string> names{cks[0].name, cks[1].name};
  EXPECT_EQ(names, (std::set<std::string>{"a_final", "b_final"}));
}

TEST(Checkpoints, BadEntriesAreOneLineErrors) {
  testing::TempDir dir;
  fs::create_directories(dir.file("empty"));
  EXPECT_THAT(testing::error_of([&] { resolve_checkpoints({dir.file("nope")}, "cfg.yaml"); }),
              HasSubstr(dir.file("nope") + ": model directory does not exist"));
  EXPECT_THAT(testing::error_of([&] { resolve_checkpoints({dir.file("empty")}, "cfg.yaml"); }),
              HasSubstr(dir.file("empty") + ": not a checkpoint directory: it has no config.json"));
  EXPECT_THAT(testing::error_of([&] { resolve_checkpoints({dir.file("step-*")}, "cfg.yaml"); }),
              HasSubstr("cfg.yaml: model '" + dir.file("step-*") + "' matches no checkpoint directory"));
}

TEST(Checkpoints, NaturalOrder) {
  EXPECT_TRUE(natural_less("step-2", "step-10"));
  EXPECT_FALSE(natural_less("step-10", "step-2"));
  EXPECT_TRUE(natural_less("a", "b"));
  EXPECT_TRUE(natural_less("ckpt", "ckpt-1"));
  EXPECT_TRUE(natural_less("x1", "x01"));
  EXPECT_FALSE(natural_less("x01", "x1"));
  EXPECT_FALSE(natural_less("same9", "same9"));
  EXPECT_TRUE(natural_less("s99999999999999999999999", "s100000000000000000000000"));  // no overflow
}

}  // namespace
}  // namespace gpueval
