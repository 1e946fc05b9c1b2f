// Eval curves where a training team already looks: TensorBoard event files written by gpueval
// itself, one TensorBoard run per config fingerprint, so `tensorboard --logdir DIR` (or W&B's
// TensorBoard sync) shows every task's score beside the training loss.
//
// Owns the file format (TFRecord framing with masked CRC32C around serialized `Event` protocol
// buffers: the few fields of tensorflow/core/util/event.proto and summary.proto that scalars
// and one text marker need, encoded and decoded here rather than through libprotobuf and
// generated code) and the export of a history trend into it. May call common/ and report/'s
// trend (primary_scores); reads the trend it is given, never the history file itself.
//
// What a checkpoint writes: one Event at its step holding, as scalars, every task's and group's
// primary metric (trend.h) and any bpb (extra_metrics), bits_per_byte, byte_perplexity,
// word_perplexity or perplexity row of the same filter, tagged "<task>/<metric>" (plus "/<filter>" when the filter is
// not "none"); and a text value "gpueval/checkpoint" naming it ({"name", "fingerprint", "path", "step"}), by which a
// later export knows it is written. Only complete records are written.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpueval/history.h"

namespace gpueval {
namespace tensorboard {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord uses: "123456789" ->
// 0xE3069283.
uint32_t crc32c(std::string_view data);
// TFRecord's masked form: rotate right by 15, add 0xa282ead8.
uint32_t masked_crc32c(std::string_view data);

// One TFRecord: little-endian uint64 length, masked CRC of those 8 bytes, the payload, masked
// CRC of the payload.
std::string frame_record(std::string_view payload);
// Every record payload of an event file, in order. A short read, a length past the file or a
// CRC that does not match is an Error "<path>: record K at byte B: <problem>".
std::vector<std::string> read_records(const std::string& path);

struct Value {
  std::string tag;
  std::optional<float> scalar;  // Summary.Value.simple_value
  std::optional<std::string> text;  // a rank-0 DT_STRING tensor under the "text" plugin
};

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;  // the first event of a file: "brain.Event:2"
  std::vector<Value> values;  // Event.summary.value
};

// The Event protocol buffer of `e` (fields left at their defaults are omitted, as protobuf does).
std::string encode_event(const Event& e);
// Reads an Event; fields this writer does not know are skipped. Malformed bytes are an Error
// naming `where` ("<file>: record K").
Event decode_event(std::string_view bytes, const std::string& where);

// The event files of one run folder (basename "events.out.tfevents.*", temporary files left out),
// in name order, which is the order TensorBoard reads them.
std::vector<std::string> event_files(const std::string& run_dir);
// Every event of every event file of a run folder, in the order TensorBoard reads them; Errors
// as read_records and decode_event give them.
std::vector<Event> read_events(const std::string& run_dir);

struct ExportResult {
  std::string run_dir;  // <logdir>/<run name>
  std::string file;  // the event file written; "" when nothing was new
  int64_t checkpoints = 0;  // checkpoints written by this export
  int64_t scalars = 0;  // scalar points written by this export
  int64_t already = 0;  // checkpoints the run folder held already
  // The run's points were written again as one file in step order and the older files removed (a
  // checkpoint came with a step at or below one already written, or a checkpoint was in two files).
  bool rewritten = false;
};

// Writes into <logdir>/<run> the complete checkpoints of `trend` (History::trend order) that the
// run's event files do not hold yet, as one new event file written atomically, in step order. When a
// new step is not past every step written (readers take a tag's points in file order), the new file
// holds the run's every point instead, in step order, and the older files are removed. `run` is
// "<config_name>-<first 12 of config_fp>", or an existing folder of logdir ending in
// "-<first 12>" (one run per config fingerprint, whatever the config file was called). A
// checkpoint's step is its training step (CheckpointInfo::step), else its position among the
// run's checkpoints (those already written count first, then the new ones in trend order), moved
// past the largest step written so far.
// Holds <run>/gpueval.lock while it reads and writes, so two processes never both write one
// checkpoint. A folder or file that cannot be read or written is an Error naming it.
ExportResult export_trend(const std::string& logdir, const std::string& config_name, const std::string& config_fp,
                          const std::vector<ScoredCheckpoint>& trend);

// The scalars export_trend writes for one checkpoint, in its score order.
std::vector<Value> checkpoint_scalars(const ScoredCheckpoint& checkpoint);

}  // namespace tensorboard
}  // namespace gpueval
