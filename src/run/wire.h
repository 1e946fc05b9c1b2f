// The wire between the scheduler and its worker processes: self-checking frames carried over
// pipes. A frame is one message (hello, work, result, items, heartbeat, error, shutdown, probe, broadcast, launch)
// whose payload is opaque bytes, by convention CBOR (pack_payload / unpack_payload). Frames are encoded into plain
// std::string values the caller owns; a FrameDecoder owns the bytes it has been fed and nothing else. Nothing here is
// shared: a FrameDecoder belongs to one reader, and write_frame / read_frame on one descriptor must not run
// concurrently with each other.
//
// A reader never trusts a frame it cannot verify: bad magic, a length over kMaxFramePayload, an
// unknown type or a checksum mismatch throws FrameError, and the stream is dead from then on,
// because after one bad byte there is no way to find where the next frame starts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "gpueval/error.h"

namespace gpueval {

// kProbe asks a worker to measure batch budgets (batch_probe.h): payload ProbeOptions, answered by
// a kResult holding a ProbeResult, or a kError. kBroadcast carries {"nccl_id": hex} for
// `load: broadcast` (weight_broadcast.h): from rank 0 to the scheduler, then to the other ranks.
// kLaunch turns a process forked ahead into a worker, before its Hello (worker_prefork.h). kItems
// carries results of the batch in flight that are final before the batch is (a generation batch's
// sequences as they end: executor.h's on_item_done), {"batch_id", "items"}; its kResult still
// holds every item.
enum class FrameType : uint8_t {
  kHello = 1,
  kWork = 2,
  kResult = 3,
  kHeartbeat = 4,
  kError = 5,
  kShutdown = 6,
  kProbe = 7,
  kBroadcast = 8,
  kLaunch = 9,
  kItems = 10
};

// "hello", "work", ...; "unknown" for a value outside the enum.
const char* frame_type_name(FrameType type);

struct Frame {
  FrameType type;
  std::string payload;
};

// The largest payload a frame may carry. A reader checks a frame's length against this before it
// buffers or allocates anything for it, so a corrupt length cannot make it reserve gigabytes.
constexpr uint32_t kMaxFramePayload = 256u << 20;

// Header is magic (4 bytes "GEV1"), payload length (4 bytes, u32 LE), type (1 byte),
// CRC-32 (4 bytes, zlib crc32 over the type byte then the payload, u32 LE); the payload follows.
constexpr size_t kFrameHeaderSize = 13;

// A frame that must not be trusted: corrupt, truncated, or not the format it claims.
class FrameError : public Error {
 public:
  using Error::Error;
};

// The bytes of one frame. Throws Error for a type outside the enum or a payload over
// kMaxFramePayload: such a frame would be refused by every reader.
std::string encode_frame(const Frame& frame);

// Incremental decoder for bytes arriving from a non-blocking pipe: feed() whatever read()
// returned, then call next() until it returns nullopt. Each header field is checked as soon as
// its bytes have arrived, so a corrupt header is reported without waiting for a payload that may
// never come. After next() has thrown, every later call throws the same error again.
class FrameDecoder {
 public:
  void feed(const char* data, size_t size);
  // A complete, verified frame, or nullopt if more bytes are needed. Throws FrameError on bad
  // magic, a length over kMaxFramePayload, an unknown type or a checksum mismatch.
  std::optional<Frame> next();
  // Bytes held of an incomplete frame; end of stream while this is > 0 means a truncated frame.
  size_t buffered() const { return buffer_.size() - start_; }

 private:
  std::string buffer_;
  size_t start_ = 0;  // where the first unconsumed frame begins in buffer_
  uint64_t consumed_ = 0;  // stream offset of buffer_[start_], for error messages
  std::string error_;  // set once a FrameError has been thrown
};

// Writes one whole frame. Blocking: an O_NONBLOCK descriptor is waited on with poll(). EINTR and
// short writes are retried. A closed reader (EPIPE) and other failures throw Error naming the
// call and the descriptor; SIGPIPE is kept from killing the process while it writes.
void write_frame(int fd, const Frame& frame);

// Reads one whole frame, and not a byte past it, checked by a FrameDecoder. Blocking, like
// write_frame. nullopt on end of stream at a frame boundary; FrameError on end of stream inside a
// frame or on a frame that fails verification.
std::optional<Frame> read_frame(int fd);

// CBOR (nlohmann::json::to_cbor) of `j`.
std::string pack_payload(const nlohmann::json& j);
// The payload of `frame` parsed as CBOR; FrameError, naming the frame type, if it is not valid
// CBOR or has bytes after the value.
nlohmann::json unpack_payload(const Frame& frame);

}  // namespace gpueval
