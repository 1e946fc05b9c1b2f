#include "run/wire.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace gpueval {
namespace {

constexpr char kMagic[4] = {'G', 'E', 'V', '1'};
constexpr size_t kLengthOffset = 4;
constexpr size_t kTypeOffset = 8;
constexpr size_t kCrcOffset = 9;

template <typename... Args>
[[noreturn]] void fail_frame(const std::string& where, fmt::format_string<Args...> format, Args&&... args) {
  throw FrameError(where + ": " + fmt::format(format, std::forward<Args>(args)...));
}

void put_u32(char* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint32_t get_u32(const char* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return v;
}

bool known_type(uint8_t t) {
  return t >= static_cast<uint8_t>(FrameType::kHello) && t <= static_cast<uint8_t>(FrameType::kItems);
}

uint32_t frame_crc(uint8_t type, const char* payload, size_t size) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  crc = ::crc32(crc, &type, 1);
  // size <= kMaxFramePayload, so it fits zlib's 32-bit uInt.
  crc = ::crc32(crc, reinterpret_cast<const Bytef*>(payload), static_cast<uInt>(size));
  return static_cast<uint32_t>(crc);
}

std::string hex_bytes(const char* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += fmt::format("{}{:02x}", i ? " " : "", static_cast<unsigned char>(p[i]));
  return s;
}

// What is wrong with the header fields that lie within the first `avail` bytes at `p`, or ""; a
// reader checks as bytes arrive, so it learns of a bad magic, length or type without waiting for
// the rest of the frame.
std::string header_problem(const char* p, size_t avail) {
  const size_t magic_bytes = std::min(avail, sizeof kMagic);
  if (std::memcmp(p, kMagic, magic_bytes) != 0) {
    return fmt::format("bad magic {} (expected 47 45 56 31, \"GEV1\")", hex_bytes(p, magic_bytes));
  }
  if (avail >= kTypeOffset) {
    const uint32_t length = get_u32(p + kLengthOffset);
    if (length > kMaxFramePayload) {
      return fmt::format("payload length {} is over the {}-byte limit", length, kMaxFramePayload);
    }
  }
  if (avail > kTypeOffset) {
    const auto type = static_cast<uint8_t>(p[kTypeOffset]);
    if (!known_type(type)) return fmt::format("unknown frame type {}", type);
  }
  return {};
}

// What is wrong with the checksum of a frame whose checked header is at `header`, or "".
std::string crc_problem(const char* header, const char* payload, size_t size) {
  const auto type = static_cast<uint8_t>(header[kTypeOffset]);
  const uint32_t stored = get_u32(header + kCrcOffset);
  const uint32_t computed = frame_crc(type, payload, size);
  if (stored == computed) return {};
  return fmt::format("checksum mismatch in a {} frame of {} bytes (stored {:08x}, computed {:08x})",
                     frame_type_name(static_cast<FrameType>(type)), size, stored, computed);
}

// Keeps SIGPIPE from killing the process while this thread writes to a pipe whose reader may be
// gone: the signal is blocked for the write, and one raised by it is consumed before unblocking,
// so the writer sees EPIPE instead. A SIGPIPE already pending beforehand is left alone.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_set_);
    sigaddset(&pipe_set_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    if (sigpending(&pending) == 0) was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_set_, &old_mask_);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;
  ~SigpipeGuard() {
    if (got_epipe_ && !was_pending_) {
      const timespec zero{};
      while (sigtimedwait(&pipe_set_, nullptr, &zero) < 0 && errno == EINTR) {}
    }
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }
  void saw_epipe() { got_epipe_ = true; }

 private:
  sigset_t pipe_set_;
  sigset_t old_mask_;
  bool was_pending_ = false;
  bool got_epipe_ = false;
};

// Waits until `fd` is ready for `events`; for descriptors opened O_NONBLOCK.
void wait_ready(const std::string& where, int fd, short events) {
  pollfd p{fd, events, 0};
  while (::poll(&p, 1, -1) < 0) {
    if (errno != EINTR) fail(where, "poll failed: {}", std::strerror(errno));
  }
}

// Reads up to `size` bytes, stopping early only at end of stream; returns the count read.
size_t read_full(const std::string& where, int fd, char* out, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, out + done, size - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n == 0) {
      break;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_ready(where, fd, POLLIN);
    } else if (errno != EINTR) {
      fail(where, "read failed: {}", std::strerror(errno));
    }
  }
  return done;
}

}  // namespace

const char* frame_type_name(FrameType type) {
  switch (type) {
    case FrameType::kHello: return "hello";
    case FrameType::kWork: return "work";
    case FrameType::kResult: return "result";
    case FrameType::kHeartbeat: return "heartbeat";
    case FrameType::kError: return "error";
    case FrameType::kShutdown: return "shutdown";
    case FrameType::kProbe: return "probe";
    case FrameType::kBroadcast: return "broadcast";
    case FrameType::kLaunch: return "launch";
    case FrameType::kItems: return "items";
  }
  return "unknown";
}

std::string encode_frame(const Frame& frame) {
  const auto type = static_cast<uint8_t>(frame.type);
  if (!known_type(type)) fail("encode_frame", "unknown frame type {}", type);
  if (frame.payload.size() > kMaxFramePayload) {
    fail("encode_frame", "{} payload of {} bytes is over the {}-byte limit", frame_type_name(frame.type),
         frame.payload.size(), kMaxFramePayload);
  }
  std::string out(kFrameHeaderSize, '\0');
  std::memcpy(out.data(), kMagic, sizeof kMagic);
  put_u32(out.data() + kLengthOffset, static_cast<uint32_t>(frame.payload.size()));
  out[kTypeOffset] = static_cast<char>(type);
  put_u32(out.data() + kCrcOffset, frame_crc(type, frame.payload.data(), frame.payload.size()));
  out += frame.payload;
  return out;
}

void FrameDecoder::feed(const char* data, size_t size) {
  // Drop consumed frames before growing, so the buffer holds little more than one frame.
  if (start_ > 0 && (start_ == buffer_.size() || start_ >= buffer_.size() / 2)) {
    buffer_.erase(0, start_);
    start_ = 0;
  }
  buffer_.append(data, size);
}

std::optional<Frame> FrameDecoder::next() {
  if (!error_.empty()) throw FrameError(error_);
  const char* p = buffer_.data() + start_;
  const size_t avail = buffered();
  if (avail == 0) return std::nullopt;
  std::string problem = header_problem(p, avail);
  if (problem.empty()) {
    if (avail < kFrameHeaderSize) return std::nullopt;
    const size_t length = get_u32(p + kLengthOffset);
    if (avail - kFrameHeaderSize < length) return std::nullopt;
    problem = crc_problem(p, p + kFrameHeaderSize, length);
    if (problem.empty()) {
      Frame frame{static_cast<FrameType>(p[kTypeOffset]), std::string(p + kFrameHeaderSize, length)};
      start_ += kFrameHeaderSize + length;
      consumed_ += kFrameHeaderSize + length;
      return frame;
    }
  }
  error_ = fmt::format("frame at stream offset {}: {}", consumed_, problem);
  throw FrameError(error_);
}

void write_frame(int fd, const Frame& frame) {
  const std::string bytes = encode_frame(frame);
  const std::string where = fmt::format("write_frame(fd {})", fd);
  SigpipeGuard guard;
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n >= 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    const int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      wait_ready(where, fd, POLLOUT);
      continue;
    }
    if (err == EPIPE) guard.saw_epipe();
    fail(where, "write failed after {} of {} bytes: {}", done, bytes.size(), std::strerror(err));
  }
}

std::optional<Frame> read_frame(int fd) {
  const std::string where = fmt::format("read_frame(fd {})", fd);
  // The one decoder checks every frame; this function only reads exactly one frame's bytes into
  // it, so nothing of the next frame is taken from the descriptor.
  FrameDecoder decoder;
  auto next = [&] {
    try {
      return decoder.next();
    } catch (const FrameError& e) {
      fail_frame(where, "{}", e.what());
    }
  };
  char header[kFrameHeaderSize];
  const size_t got = read_full(where, fd, header, sizeof header);
  if (got == 0) return std::nullopt;
  decoder.feed(header, got);
  std::optional<Frame> frame = next();
  if (got < sizeof header) {
    fail_frame(where, "truncated frame: end of stream after {} of {} header bytes", got, sizeof header);
  }
  // The length is within kMaxFramePayload, but a damaged header can still claim far more than
  // will come; the payload is read in chunks that grow with the bytes that actually arrive
  // instead of being allocated up front.
  const size_t length = get_u32(header + kLengthOffset);
  std::string chunk;
  size_t have = 0;
  while (!frame) {
    chunk.resize(std::min(length - have, std::max<size_t>(have, 64 << 10)));
    const size_t n = read_full(where, fd, chunk.data(), chunk.size());
    decoder.feed(chunk.data(), n);
    if (n < chunk.size()) {
      fail_frame(where, "truncated {} frame: end of stream after {} of {} payload bytes",
                 frame_type_name(static_cast<FrameType>(header[kTypeOffset])), have + n, length);
    }
    have += n;
    frame = next();
  }
  return frame;
}

std::string pack_payload(const nlohmann::json& j) {
  std::string out;
  nlohmann::json::to_cbor(j, out);
  return out;
}

nlohmann::json unpack_payload(const Frame& frame) {
  try {
    return nlohmann::json::from_cbor(frame.payload.begin(), frame.payload.end(), /*strict=*/true);
  } catch (const nlohmann::json::exception& e) {
    fail_frame(fmt::format("{} frame", frame_type_name(frame.type)), "payload is not valid CBOR: {}", e.what());
  }
}

}  // namespace gpueval
