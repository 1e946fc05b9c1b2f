// TensorBoard event files (report/tensorboard.h): CRC-32C against its published check values,
// events and records byte for byte as TensorBoard's own protobuf classes and RecordWriter write
// them (the hex below was produced by tensorboard 2.21.0's event_pb2 and record_writer), every
// record's CRCs checked on reading, and the export of a trend: one point per tag per
// checkpoint at its step, never written twice.
#include "report/tensorboard.h"

#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "test_util.h"

namespace gpueval {
namespace {

using ::testing::ElementsAre;
using testing::error_of;
using ::testing::HasSubstr;
namespace tb = tensorboard;

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

// Event(wall_time=1700000000.5, step=1000) with a scalar "demo_choice/acc" = 0.25 and a text
// value "gpueval/checkpoint" = {"name":"step-1000"}, serialized by tensorboard's event_pb2.
const char* kEventHex =
    "0900002040fc54d94110e8072a540a160a0f64656d6f5f63686f6963652f616363150000803e0a3a0a126770756576616c2f636865636b7"
    "06f696e74421a0807120042147b226e616d65223a22737465702d31303030227d4a080a060a0474657874";
// The same event framed by tensorboard's RecordWriter.
const char* kRecordHex =
    "620000000000000079fd606f0900002040fc54d94110e8072a540a160a0f64656d6f5f63686f6963652f616363150000803e0a3a0a1267"
    "70756576616c2f636865636b706f696e74421a0807120042147b226e616d65223a22737465702d31303030227d4a080a060a04746578"
    "74a2d6e315";

tb::Event oracle_event() {
  return tb::Event{1700000000.5,
                   1000,
                   "",
                   {tb::Value{"demo_choice/acc", 0.25f, std::nullopt},
                    tb::Value{"gpueval/checkpoint", std::nullopt, std::string(R"({"name":"step-1000"})")}}};
}

TEST(TensorBoardTest, Crc32cMatchesItsCheckValues) {
  EXPECT_EQ(tb::crc32c("123456789"), 0xE3069283u);  // the CRC catalogue's check value
  EXPECT_EQ(tb::crc32c(std::string(32, '\0')), 0x8A9136AAu);  // RFC 3720 B.4
  EXPECT_EQ(tb::crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  EXPECT_EQ(tb::crc32c(""), 0u);
}

TEST(TensorBoardTest, EventsAndRecordsAreTheBytesTensorBoardWrites) {
  EXPECT_EQ(tb::encode_event(oracle_event()), from_hex(kEventHex));
  EXPECT_EQ(tb::frame_record(tb::encode_event(oracle_event())), from_hex(kRecordHex));
  // The first event of a file: file_version, as TensorBoard's EventFileWriter writes it.
  EXPECT_EQ(tb::encode_event(tb::Event{1700000000.0, 0, "brain.Event:2", {}}),
            from_hex("0900000040fc54d9411a0d627261696e2e4576656e743a32"));

  const tb::Event e = tb::decode_event(from_hex(kEventHex), "oracle");
  EXPECT_EQ(e.wall_time, 1700000000.5);
  EXPECT_EQ(e.step, 1000);
  ASSERT_EQ(e.values.size(), 2u);
  EXPECT_EQ(e.values[0].tag, "demo_choice/acc");
  EXPECT_EQ(e.values[0].scalar, 0.25f);
  EXPECT_FALSE(e.values[0].text);
  EXPECT_EQ(e.values[1].text, R"({"name":"step-1000"})");
  EXPECT_FALSE(e.values[1].scalar);
}

TEST(TensorBoardTest, FieldsThisWriterDoesNotKnowAreSkipped) {
  // Event.source_metadata (field 10, a message) and a varint field 99 before the step.
  const std::string bytes = from_hex("5203") + "abc" +
                            from_hex(
                                "b806"
                                "05") +
                            tb::encode_event(oracle_event());
  const tb::Event e = tb::decode_event(bytes, "x");
  EXPECT_EQ(e.step, 1000);
  EXPECT_EQ(e.values.size(), 2u);
  EXPECT_THAT(error_of([] { tb::decode_event(from_hex("2a05") + "ab", "f.tfevents: record 3"); }),
              "f.tfevents: record 3: a protocol buffer field of 5 bytes runs past the end (2 left)");
  EXPECT_THAT(error_of([] { tb::decode_event(from_hex("0b"), "f: record 0"); }),
              HasSubstr("f: record 0: protocol buffer wire type 3 is not one an Event uses"));
}

TEST(TensorBoardTest, EveryRecordsCrcIsChecked) {
  testing::TempDir dir;
  const std::string good = tb::frame_record("first") + tb::frame_record(tb::encode_event(oracle_event()));
  const std::string path = dir.write("events.out.tfevents.1", good);
  EXPECT_THAT(tb::read_records(path), ElementsAre("first", from_hex(kEventHex)));

  std::string flipped = good;
  flipped[good.size() - 20] ^= 1;  // inside the second payload
  dir.write("events.out.tfevents.1", flipped);
  EXPECT_EQ(error_of([&] { tb::read_records(path); }),
            path + ": record 1 at byte 21: the record's CRC-32C does not match: the file is damaged");
  std::string bad_length = good;
  bad_length[0] ^= 1;
  dir.write("events.out.tfevents.1", bad_length);
  EXPECT_EQ(error_of([&] { tb::read_records(path); }),
            path + ": record 0 at byte 0: the length's CRC-32C does not match: not a TFRecord file, or a damaged one");
  dir.write("events.out.tfevents.1", good.substr(0, good.size() - 3));
  EXPECT_EQ(error_of([&] { tb::read_records(path); }),
            path + ": record 1 at byte 21: a record of 98 bytes runs past the end of the file");
}

ScoreRow row(const std::string& task, const std::string& metric, double value, const std::string& filter = "none",
             bool group = false) {
  return testing::score_row(task, metric, value, std::nullopt, 0, true, group, filter);
}

ScoredCheckpoint scored(const std::string& name, std::optional<int64_t> step, double acc,
                        const std::string& state = "complete") {
  ScoredCheckpoint c;
  c.checkpoint = CheckpointInfo{"fp-" + name, "/runs/" + name, name, 0, step};
  c.scored_at = 1700000000;
  c.state = state;
  c.scores = {row("quiz", "acc", acc),
              row("quiz", "acc_norm", acc / 2),
              row("math", "exact_match", acc / 3, "strict-match"),
              row("math", "exact_match", acc / 4, "flexible"),
              row("story", "word_perplexity", 40 + acc),
              row("story", "byte_perplexity", 2 + acc),
              row("story", "bits_per_byte", 1 + acc),
              row("all", "acc", acc + 0.01, "none", true)};
  return c;
}

// tag -> (step, value) of every scalar the run folder holds, in reading order.
std::map<std::string, std::vector<std::pair<int64_t, float>>> points(const std::string& run_dir) {
  std::map<std::string, std::vector<std::pair<int64_t, float>>> out;
  for (const tb::Event& e : tb::read_events(run_dir))
    for (const tb::Value& v : e.values)
      if (v.scalar) out[v.tag].emplace_back(e.step, *v.scalar);
  return out;
}

TEST(TensorBoardTest, PrimaryMetricsAndDensitiesAreTheScalars) {
  std::vector<std::string> tags;
  for (const tb::Value& v : tb::checkpoint_scalars(scored("s", 1, 0.5))) tags.push_back(v.tag);
  // quiz's primary is acc (acc_norm is not); math's is its first filter; story's primary is
  // word_perplexity and its densities come too; groups as tasks.
  EXPECT_THAT(tags, ElementsAre("quiz/acc", "math/exact_match/strict-match", "story/word_perplexity",
                                "story/byte_perplexity", "story/bits_per_byte", "all/acc"));
}

TEST(TensorBoardTest, ATrendIsWrittenOncePerCheckpointAtItsStep) {
  testing::TempDir dir;
  const std::string logdir = dir.file("tb");
  const std::string fp = "0123456789abcdef0123";
  std::vector<ScoredCheckpoint> trend = {scored("step-0", 0, 0.25), scored("step-500", 500, 0.5),
                                         scored("step-1000", 1000, 0.75), scored("step-1500", 1500, 0.9, "incomplete")};
  tb::ExportResult r = tb::export_trend(logdir, "pretrain", fp, trend);
  EXPECT_EQ(r.run_dir, logdir + "/pretrain-0123456789ab");
  EXPECT_EQ(r.checkpoints, 3);  // the incomplete record waits until it is complete
  EXPECT_EQ(r.scalars, 18);
  EXPECT_EQ(r.already, 0);
  EXPECT_THAT(io::base_name(r.file), ::testing::StartsWith("events.out.tfevents."));
  auto p = points(r.run_dir);
  EXPECT_EQ(p.size(), 6u);
  EXPECT_THAT(p["quiz/acc"], ElementsAre(std::pair<int64_t, float>{0, 0.25f}, std::pair<int64_t, float>{500, 0.5f},
                                         std::pair<int64_t, float>{1000, 0.75f}));
  EXPECT_THAT(p["story/bits_per_byte"],
              ElementsAre(std::pair<int64_t, float>{0, 1.25f}, std::pair<int64_t, float>{500, 1.5f},
                          std::pair<int64_t, float>{1000, 1.75f}));
  // The first event says the file version, as TensorBoard's own files do.
  EXPECT_EQ(tb::read_events(r.run_dir).front().file_version, "brain.Event:2");

  // Again, under another config name: the same run folder (the fingerprint is the run), nothing new.
  r = tb::export_trend(logdir, "renamed", fp, trend);
  EXPECT_EQ(r.run_dir, logdir + "/pretrain-0123456789ab");
  EXPECT_EQ(r.checkpoints, 0);
  EXPECT_EQ(r.already, 3);
  EXPECT_EQ(r.file, "");
  EXPECT_EQ(tb::event_files(r.run_dir).size(), 1u);

  // The incomplete one completes, and a checkpoint without a step comes: its position (4) would go
  // back in steps, so it comes after the last step written (1501). Both appended in a new file.
  trend[3].state = "complete";
  trend.push_back(scored("final", std::nullopt, 0.95));
  r = tb::export_trend(logdir, "pretrain", fp, trend);
  EXPECT_EQ(r.checkpoints, 2);
  EXPECT_FALSE(r.rewritten);
  const std::vector<std::string> two_files = tb::event_files(r.run_dir);
  ASSERT_EQ(two_files.size(), 2u);
  EXPECT_EQ(two_files[1], r.file);  // read last: TensorBoard reads a run's files in name order
  auto steps_of = [&](const std::string& tag) {
    const auto all = points(r.run_dir);
    std::vector<int64_t> steps;
    if (all.count(tag))
      for (const auto& [step, value] : all.at(tag)) steps.push_back(step);
    return steps;
  };
  EXPECT_THAT(steps_of("quiz/acc"), ElementsAre(0, 500, 1000, 1500, 1501));

  // A checkpoint synced late, step-250: readers take points in file order (TensorBoard would list
  // it after 1501, W&B's sync would drop it), so the run is written again as one file in step
  // order and the old files go.
  trend.push_back(scored("step-250", 250, 0.3));
  r = tb::export_trend(logdir, "pretrain", fp, trend);
  EXPECT_EQ(r.checkpoints, 1);
  EXPECT_TRUE(r.rewritten);
  EXPECT_EQ(tb::event_files(r.run_dir), std::vector<std::string>{r.file});
  EXPECT_GT(r.file, two_files[1]);
  EXPECT_THAT(steps_of("quiz/acc"), ElementsAre(0, 250, 500, 1000, 1500, 1501));
  EXPECT_THAT(steps_of("story/bits_per_byte"), ElementsAre(0, 250, 500, 1000, 1500, 1501));
  // Each checkpoint's marker names it, in step order.
  std::vector<std::string> names;
  for (const tb::Event& e : tb::read_events(r.run_dir))
    for (const tb::Value& v : e.values)
      if (v.text) names.push_back(nlohmann::json::parse(*v.text).at("name").get<std::string>());
  EXPECT_THAT(names, ElementsAre("step-0", "step-250", "step-500", "step-1000", "step-1500", "final"));

  // An export stopped after writing the merged file and before removing the old ones leaves every
  // point twice: the next export keeps each checkpoint once.
  const std::string copy = r.run_dir + "/events.out.tfevents.0000000001.other.1.0.gpueval";
  io::write_file_atomic(copy, io::read_file(r.file));
  r = tb::export_trend(logdir, "pretrain", fp, trend);
  EXPECT_EQ(r.checkpoints, 0);
  EXPECT_TRUE(r.rewritten);
  EXPECT_EQ(tb::event_files(r.run_dir).size(), 1u);
  EXPECT_THAT(steps_of("quiz/acc"), ElementsAre(0, 250, 500, 1000, 1500, 1501));

  // Another config fingerprint is another run.
  EXPECT_EQ(tb::export_trend(logdir, "pretrain", "fedcba9876543210", trend).run_dir, logdir + "/pretrain-fedcba987654");
}

TEST(TensorBoardTest, ADamagedEventFileIsAnErrorNamingIt) {
  testing::TempDir dir;
  const std::string run = dir.file("tb/x-0123456789ab");
  io::make_directories(run);
  const std::string file = run + "/events.out.tfevents.1700000000.host.1.gpueval";
  io::write_file_atomic(file, tb::frame_record("x").substr(0, 10));
  EXPECT_THAT(error_of([&] { tb::export_trend(dir.file("tb"), "x", "0123456789abcdef", {scored("a", 1, 0.5)}); }),
              HasSubstr(file + ": record 0 at byte 0: the file ends inside a record's length (10 bytes left)"));
}

}  // namespace
}  // namespace gpueval
