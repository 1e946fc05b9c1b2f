#include "report/tensorboard.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <limits>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/dir_lock.h"
#include "common/file_io.h"
#include "gpueval/error.h"
#include "report/trend.h"

namespace gpueval::tensorboard {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCheckpointTag = "gpueval/checkpoint";
constexpr const char* kFilePrefix = "events.out.tfevents.";
// An event file of one night is a few kilobytes; one past this is not ours to read whole.
constexpr uint64_t kMaxEventFile = uint64_t{1} << 30;

// ---- CRC-32C ------------------------------------------------------------------------------------

std::array<uint32_t, 256> crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

// ---- protocol buffer wire format (the subset Event needs) ---------------------------------------

enum Wire : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void put_key(std::string& out, uint32_t field, Wire wire) { put_varint(out, (uint64_t{field} << 3) | wire); }
void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kBytes);
  put_varint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}
template <typename T>
void put_fixed(std::string& out, uint32_t field, T v) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  put_key(out, field, sizeof(T) == 8 ? kFixed64 : kFixed32);
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64), as protobuf's own wire
  out.append(b, sizeof(T));
}

// Reads one message's fields in order; each field's bytes are handed to the caller, unknown
// ones skipped by their wire type.
class Reader {
 public:
  Reader(std::string_view bytes, const std::string& where) : p_(bytes), where_(where) {}
  bool done() const { return p_.empty(); }
  // The next field's number and wire type.
  std::pair<uint32_t, Wire> key() {
    const uint64_t k = varint();
    const uint32_t wire = static_cast<uint32_t>(k & 7);
    if (wire != kVarint && wire != kFixed64 && wire != kBytes && wire != kFixed32)
      fail(where_, "protocol buffer wire type {} is not one an Event uses", wire);
    if ((k >> 3) == 0 || (k >> 3) > 0x1fffffff) fail(where_, "protocol buffer field number {} is out of range", k >> 3);
    return {static_cast<uint32_t>(k >> 3), static_cast<Wire>(wire)};
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_.empty()) fail(where_, "a protocol buffer varint runs past the end");
      const auto b = static_cast<uint8_t>(p_[0]);
      p_.remove_prefix(1);
      v |= uint64_t{b & 0x7fu} << shift;
      if (!(b & 0x80)) return v;
    }
    fail(where_, "a protocol buffer varint is longer than 10 bytes");
  }
  std::string_view take(size_t n) {
    if (n > p_.size()) fail(where_, "a protocol buffer field of {} bytes runs past the end ({} left)", n, p_.size());
    const std::string_view out = p_.substr(0, n);
    p_.remove_prefix(n);
    return out;
  }
  std::string_view bytes(Wire w) {
    expect(w, kBytes);
    return take(varint());
  }
  template <typename T>
  T fixed(Wire w) {
    expect(w, sizeof(T) == 8 ? kFixed64 : kFixed32);
    T v;
    std::memcpy(&v, take(sizeof(T)).data(), sizeof(T));
    return v;
  }
  void skip(Wire w) {
    switch (w) {
      case kVarint: (void)varint(); break;
      case kFixed64: (void)take(8); break;
      case kBytes: (void)take(varint()); break;
      case kFixed32: (void)take(4); break;
    }
  }
  void expect(Wire got, Wire want) {
    if (got != want) fail(where_, "a protocol buffer field has wire type {} where {} was expected", +got, +want);
  }

 private:
  std::string_view p_;
  const std::string& where_;
};

// Summary.Value fields (tensorflow/core/framework/summary.proto), TensorProto's and
// SummaryMetadata's.
constexpr uint32_t kValueTag = 1, kValueSimple = 2, kValueTensor = 8, kValueMetadata = 9;
constexpr uint32_t kTensorDtype = 1, kTensorShape = 2, kTensorStringVal = 8;
constexpr uint32_t kDtString = 7;
constexpr uint32_t kMetadataPluginData = 1, kPluginName = 1;
// Event fields (tensorflow/core/util/event.proto).
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
constexpr uint32_t kSummaryValue = 1;

std::string encode_value(const Value& v) {
  std::string out;
  put_bytes(out, kValueTag, v.tag);
  if (v.scalar) put_fixed<float>(out, kValueSimple, *v.scalar);
  if (v.text) {
    std::string tensor;
    put_key(tensor, kTensorDtype, kVarint);
    put_varint(tensor, kDtString);
    put_bytes(tensor, kTensorShape, "");  // rank 0
    put_bytes(tensor, kTensorStringVal, *v.text);
    put_bytes(out, kValueTensor, tensor);
    std::string plugin, metadata;
    put_bytes(plugin, kPluginName, "text");
    put_bytes(metadata, kMetadataPluginData, plugin);
    put_bytes(out, kValueMetadata, metadata);
  }
  return out;
}

Value decode_value(std::string_view bytes, const std::string& where) {
  Value v;
  std::optional<std::string> plugin, string_val;
  Reader r(bytes, where);
  while (!r.done()) {
    const auto [field, wire] = r.key();
    if (field == kValueTag) {
      v.tag = std::string(r.bytes(wire));
    } else if (field == kValueSimple) {
      v.scalar = r.fixed<float>(wire);
    } else if (field == kValueTensor) {
      Reader t(r.bytes(wire), where);
      while (!t.done()) {
        const auto [tf, tw] = t.key();
        if (tf == kTensorStringVal)
          string_val = std::string(t.bytes(tw));
        else
          t.skip(tw);
      }
    } else if (field == kValueMetadata) {
      Reader m(r.bytes(wire), where);
      while (!m.done()) {
        const auto [mf, mw] = m.key();
        if (mf != kMetadataPluginData) {
          m.skip(mw);
          continue;
        }
        Reader p(m.bytes(mw), where);
        while (!p.done()) {
          const auto [pf, pw] = p.key();
          if (pf == kPluginName)
            plugin = std::string(p.bytes(pw));
          else
            p.skip(pw);
        }
      }
    } else {
      r.skip(wire);
    }
  }
  if (plugin == "text" && string_val) v.text = string_val;
  return v;
}

uint64_t read_le64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint32_t read_le32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

std::string tag_of(const ScoreRow& row) {
  std::string tag = row.task + "/" + row.metric;
  if (!row.filter.empty() && row.filter != "none") tag += "/" + row.filter;
  return tag;
}

bool is_density_metric(const std::string& metric) {
  return metric == "bpb" || metric == "bits_per_byte" || metric == "byte_perplexity" || metric == "word_perplexity" ||
         metric == "perplexity";
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  std::string h;
  for (const char* c = buf; *c; ++c)
    h += (std::isalnum(static_cast<unsigned char>(*c)) || *c == '-' || *c == '_') ? *c : '_';
  return h.empty() ? "localhost" : h;
}

// "<config>-<fp12>", or the folder of logdir that already holds this fingerprint's run.
std::string run_name(const std::string& logdir, const std::string& config_name, const std::string& config_fp) {
  const std::string suffix = "-" + config_fp.substr(0, 12);
  std::vector<std::string> existing;
  std::error_code ec;
  for (fs::directory_iterator it(logdir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
        it->is_directory())
      existing.push_back(name);
  }
  if (ec) fail(logdir, "cannot list the TensorBoard folder: {}", ec.message());
  if (!existing.empty()) return *std::min_element(existing.begin(), existing.end());
  std::string stem;
  for (char c : config_name)
    stem += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  return (stem.empty() ? std::string("gpueval") : stem) + suffix;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  static const std::array<uint32_t, 256> table = crc_table();
  uint32_t c = 0xffffffffu;
  for (char ch : data) c = table[(c ^ static_cast<uint8_t>(ch)) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string frame_record(std::string_view payload) {
  std::string out;
  char len[8];
  const uint64_t n = payload.size();
  std::memcpy(len, &n, 8);
  out.append(len, 8);
  const uint32_t len_crc = masked_crc32c(std::string_view(len, 8));
  out.append(reinterpret_cast<const char*>(&len_crc), 4);
  out.append(payload.data(), payload.size());
  const uint32_t data_crc = masked_crc32c(payload);
  out.append(reinterpret_cast<const char*>(&data_crc), 4);
  return out;
}

std::vector<std::string> read_records(const std::string& path) {
  const std::string bytes = io::read_file(path, kMaxEventFile);
  std::vector<std::string> out;
  size_t at = 0;
  while (at < bytes.size()) {
    const std::string where = fmt::format("{}: record {} at byte {}", path, out.size(), at);
    if (bytes.size() - at < 12)
      fail(where, "the file ends inside a record's length ({} bytes left)", bytes.size() - at);
    const uint64_t n = read_le64(bytes.data() + at);
    if (read_le32(bytes.data() + at + 8) != masked_crc32c(std::string_view(bytes.data() + at, 8)))
      fail(where, "the length's CRC-32C does not match: not a TFRecord file, or a damaged one");
    if (n > bytes.size() - at - 12 || bytes.size() - at - 12 - n < 4)
      fail(where, "a record of {} bytes runs past the end of the file", n);
    const std::string_view payload(bytes.data() + at + 12, n);
    if (read_le32(bytes.data() + at + 12 + n) != masked_crc32c(payload))
      fail(where, "the record's CRC-32C does not match: the file is damaged");
    out.emplace_back(payload);
    at += 16 + n;
  }
  return out;
}

std::string encode_event(const Event& e) {
  std::string out;
  if (e.wall_time != 0) put_fixed<double>(out, kEventWallTime, e.wall_time);
  if (e.step != 0) {
    put_key(out, kEventStep, kVarint);
    put_varint(out, static_cast<uint64_t>(e.step));
  }
  if (!e.file_version.empty()) put_bytes(out, kEventFileVersion, e.file_version);
  if (!e.values.empty()) {
    std::string summary;
    for (const Value& v : e.values) put_bytes(summary, kSummaryValue, encode_value(v));
    put_bytes(out, kEventSummary, summary);
  }
  return out;
}

Event decode_event(std::string_view bytes, const std::string& where) {
  Event e;
  Reader r(bytes, where);
  while (!r.done()) {
    const auto [field, wire] = r.key();
    if (field == kEventWallTime) {
      e.wall_time = r.fixed<double>(wire);
    } else if (field == kEventStep) {
      r.expect(wire, kVarint);
      e.step = static_cast<int64_t>(r.varint());
    } else if (field == kEventFileVersion) {
      e.file_version = std::string(r.bytes(wire));
    } else if (field == kEventSummary) {
      Reader s(r.bytes(wire), where);
      while (!s.done()) {
        const auto [sf, sw] = s.key();
        if (sf == kSummaryValue)
          e.values.push_back(decode_value(s.bytes(sw), where));
        else
          s.skip(sw);
      }
    } else {
      r.skip(wire);
    }
  }
  return e;
}

std::vector<std::string> event_files(const std::string& run_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(run_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    // AtomicFile's temporary files are ".<name>.tmp.*": not ours to read.
    if (name.rfind(kFilePrefix, 0) == 0 && name.find(".tmp.") == std::string::npos && it->is_regular_file())
      out.push_back(it->path().string());
  }
  if (ec) fail(run_dir, "cannot list the TensorBoard run folder: {}", ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<Event> read_events(const std::string& run_dir) {
  std::vector<Event> out;
  for (const std::string& file : event_files(run_dir)) {
    const std::vector<std::string> records = read_records(file);
    for (size_t k = 0; k < records.size(); ++k)
      out.push_back(decode_event(records[k], fmt::format("{}: record {}", file, k)));
  }
  return out;
}

std::vector<Value> checkpoint_scalars(const ScoredCheckpoint& checkpoint) {
  std::vector<Value> out;
  std::set<std::string> tags;
  auto add = [&](const ScoreRow& row) {
    const std::string tag = tag_of(row);
    if (tags.insert(tag).second) out.push_back(Value{tag, static_cast<float>(row.value), std::nullopt});
  };
  const std::vector<ScoreRow> primary = primary_scores(checkpoint);
  std::map<std::string, std::string> filter_of;  // task -> its primary filter, for the density rows
  for (const ScoreRow& row : primary) filter_of[row.task] = row.filter;
  for (const ScoreRow& row : checkpoint.scores) {
    const bool primary_row = std::any_of(primary.begin(), primary.end(), [&](const ScoreRow& p) {
      return p.task == row.task && p.metric == row.metric && p.filter == row.filter;
    });
    if (primary_row || (is_density_metric(row.metric) && filter_of[row.task] == row.filter)) add(row);
  }
  return out;
}

ExportResult export_trend(const std::string& logdir, const std::string& config_name, const std::string& config_fp,
                          const std::vector<ScoredCheckpoint>& trend) {
  if (config_fp.size() < 12) fail(logdir, "a config fingerprint of {} characters", config_fp.size());
  io::make_directories(logdir);
  ExportResult result;
  result.run_dir = logdir + "/" + run_name(logdir, config_name, config_fp);
  io::make_directories(result.run_dir);
  const DirectoryLock lock = DirectoryLock::acquire(result.run_dir, "gpueval tensorboard export", /*wait=*/true);

  // What the run folder holds: its events, each written checkpoint's fingerprint, the largest step.
  const std::vector<std::string> old_files = event_files(result.run_dir);
  std::vector<Event> kept;  // every event but the files' version headers, each checkpoint once
  std::set<std::string> written;
  bool duplicated = false;
  std::optional<int64_t> max_step;
  for (Event& e : read_events(result.run_dir)) {
    if (!e.file_version.empty() && e.values.empty()) continue;
    std::optional<std::string> fingerprint;
    for (const Value& v : e.values) {
      if (v.tag != kCheckpointTag || !v.text) continue;
      const nlohmann::json j = nlohmann::json::parse(*v.text, nullptr, false);
      if (!j.is_object() || !j.contains("fingerprint") || !j["fingerprint"].is_string())
        fail(result.run_dir, "a {} value at step {} that is not gpueval's ({{\"fingerprint\": ...}})", kCheckpointTag,
             e.step);
      fingerprint = j["fingerprint"].get<std::string>();
    }
    if (fingerprint && !written.insert(*fingerprint).second) {
      duplicated = true;  // an export stopped between writing a merged file and removing the old ones
      continue;
    }
    max_step = std::max(max_step.value_or(e.step), e.step);
    kept.push_back(std::move(e));
  }
  result.already = static_cast<int64_t>(written.size());

  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::vector<Event> added;
  int64_t position = result.already;
  for (const ScoredCheckpoint& c : trend) {
    if (c.state != "complete" || written.count(c.checkpoint.fingerprint)) continue;
    Event e;
    e.wall_time = c.scored_at > 0 ? c.scored_at : now;
    // Without a training step: its position among the run's checkpoints, and never before a point
    // already written (a tag's points are read in the order written; see below).
    const int64_t after = std::max(max_step ? *max_step + 1 : 0, position);
    e.step = c.checkpoint.step.value_or(after);
    e.values = checkpoint_scalars(c);
    result.scalars += static_cast<int64_t>(e.values.size());
    const nlohmann::json marker = {{"name", c.checkpoint.name},
                                   {"fingerprint", c.checkpoint.fingerprint},
                                   {"path", c.checkpoint.path},
                                   {"step", e.step},
                                   {"step_from", c.checkpoint.step ? "training step" : "order"}};
    e.values.push_back(Value{kCheckpointTag, std::nullopt, marker.dump()});
    max_step = std::max(max_step.value_or(e.step), e.step);
    added.push_back(std::move(e));
    written.insert(c.checkpoint.fingerprint);
    ++result.checkpoints;
    ++position;
  }
  if (added.empty() && !duplicated) return result;

  // Readers take a tag's points in the order the files hold them: TensorBoard's EventAccumulator
  // returns step-500 after step-1000 if it was written later (and readers of files without a
  // version purge the points after a step that goes back), and W&B's TensorBoard sync drops a step
  // that is not past the last. So the new points are appended in a new file only when every one
  // comes after those written; a checkpoint synced late (step-500 after step-1000) makes the export
  // write the run's every point again, in step order, as one file, and remove the older files once
  // it is in place.
  std::stable_sort(added.begin(), added.end(), [](const Event& a, const Event& b) { return a.step < b.step; });
  int64_t old_max = std::numeric_limits<int64_t>::min();
  for (const Event& e : kept) old_max = std::max(old_max, e.step);
  result.rewritten = duplicated || (!added.empty() && !kept.empty() && added.front().step <= old_max);
  std::vector<Event> events = std::move(added);
  if (result.rewritten) {
    events.insert(events.end(), std::make_move_iterator(kept.begin()), std::make_move_iterator(kept.end()));
    std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.step < b.step; });
  }
  std::string bytes = frame_record(encode_event(Event{now, 0, "brain.Event:2", {}}));
  for (const Event& e : events) bytes += frame_record(encode_event(e));
  // TensorBoard reads a run's files in name order: the time first (zero-padded seconds, past every
  // file already there, so the new one is read last), then this host and process, and a counter.
  int64_t secs = static_cast<int64_t>(now);
  for (const std::string& f : old_files) {
    const std::string name = io::base_name(f).substr(std::strlen(kFilePrefix));
    int64_t t = 0;
    if (name.size() >= 10 && std::all_of(name.begin(), name.begin() + 10, [](char c) { return c >= '0' && c <= '9'; }))
      t = std::stoll(name.substr(0, 10));
    secs = std::max(secs, t + 1);
  }
  for (int n = 0;; ++n) {
    result.file =
        fmt::format("{}/{}{:010d}.{}.{}.{}.gpueval", result.run_dir, kFilePrefix, secs, host_name(), ::getpid(), n);
    if (!io::path_exists(result.file)) break;
  }
  io::write_file_atomic(result.file, bytes);
  if (result.rewritten) {
    for (const std::string& f : old_files)
      if (::unlink(f.c_str()) != 0 && errno != ENOENT)
        fail(f, "cannot remove an event file merged into {}: {}", result.file, std::strerror(errno));
  }
  return result;
}

}  // namespace gpueval::tensorboard
