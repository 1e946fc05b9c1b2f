#include "run/wire.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <random>
#include <thread>
#include <utility>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/file_io.h"
#include "run/worker_hello.h"

namespace gpueval {
namespace {

using ::testing::HasSubstr;

const FrameType kAllTypes[] = {FrameType::kHello,  FrameType::kWork,     FrameType::kResult, FrameType::kHeartbeat,
                               FrameType::kError,  FrameType::kShutdown, FrameType::kProbe,  FrameType::kBroadcast,
                               FrameType::kLaunch, FrameType::kItems};

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

// Feeds all of `bytes` at once and returns every frame the decoder yields.
std::vector<Frame> decode_all(const std::string& bytes, FrameDecoder* decoder = nullptr) {
  FrameDecoder local;
  FrameDecoder& d = decoder ? *decoder : local;
  d.feed(bytes.data(), bytes.size());
  std::vector<Frame> frames;
  while (auto frame = d.next()) frames.push_back(std::move(*frame));
  return frames;
}

struct Pipe {
  io::UniqueFd read;
  io::UniqueFd write;
};

Pipe make_pipe(int extra_flags = 0) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | extra_flags) != 0) throw std::runtime_error("pipe2 failed");
  return {io::UniqueFd(fds[0]), io::UniqueFd(fds[1])};
}

// A pipe holding exactly `bytes`, with the write end closed: the reader sees them, then EOF.
io::UniqueFd pipe_holding(const std::string& bytes) {
  Pipe p = make_pipe();
  EXPECT_EQ(io::write_all(p.write.get(), bytes.data(), bytes.size()), 0);
  return std::move(p.read);
}

void expect_same(const Frame& actual, const Frame& expected) {
  EXPECT_EQ(actual.type, expected.type);
  EXPECT_EQ(actual.payload.size(), expected.payload.size());
  EXPECT_TRUE(actual.payload == expected.payload);
}

TEST(WireTest, FrameTypeNames) {
  EXPECT_STREQ(frame_type_name(FrameType::kHello), "hello");
  EXPECT_STREQ(frame_type_name(FrameType::kWork), "work");
  EXPECT_STREQ(frame_type_name(FrameType::kResult), "result");
  EXPECT_STREQ(frame_type_name(FrameType::kHeartbeat), "heartbeat");
  EXPECT_STREQ(frame_type_name(FrameType::kError), "error");
  EXPECT_STREQ(frame_type_name(FrameType::kShutdown), "shutdown");
  EXPECT_STREQ(frame_type_name(FrameType::kProbe), "probe");
  EXPECT_STREQ(frame_type_name(FrameType::kBroadcast), "broadcast");
  EXPECT_STREQ(frame_type_name(FrameType::kLaunch), "launch");
  EXPECT_STREQ(frame_type_name(FrameType::kItems), "items");
  EXPECT_STREQ(frame_type_name(static_cast<FrameType>(0)), "unknown");
}

TEST(WireTest, LayoutIsMagicLengthTypeCrcPayload) {
  const std::string bytes = encode_frame({FrameType::kResult, "abc"});
  ASSERT_EQ(bytes.size(), kFrameHeaderSize + 3);
  EXPECT_EQ(bytes.substr(0, 4), "GEV1");
  EXPECT_EQ(bytes.substr(4, 4), std::string("\x03\x00\x00\x00", 4));
  EXPECT_EQ(bytes[8], 3);
  // zlib crc32 of the bytes 03 'a' 'b' 'c', little-endian.
  const std::string crc = bytes.substr(9, 4);
  const uint32_t stored = static_cast<uint8_t>(crc[0]) | static_cast<uint8_t>(crc[1]) << 8 |
                          static_cast<uint8_t>(crc[2]) << 16 |
                          static_cast<uint32_t>(static_cast<uint8_t>(crc[3])) << 24;
  EXPECT_EQ(stored, 0xf994e822u);
  EXPECT_EQ(bytes.substr(13), "abc");
}

TEST(WireTest, RoundTripsEveryTypeAndPayloadSize) {
  const std::string payloads[] = {"", "x", std::string("\0\xff\0", 3), random_bytes(1 << 20, 7)};
  for (FrameType type : kAllTypes) {
    for (const std::string& payload : payloads) {
      SCOPED_TRACE(std::string(frame_type_name(type)) + " frame of " + std::to_string(payload.size()) + " bytes");
      const Frame frame{type, payload};
      FrameDecoder decoder;
      const std::vector<Frame> frames = decode_all(encode_frame(frame), &decoder);
      ASSERT_EQ(frames.size(), 1u);
      expect_same(frames[0], frame);
      EXPECT_EQ(decoder.buffered(), 0u);
    }
  }
}

TEST(WireTest, DecodesByteByByte) {
  std::vector<Frame> sent;
  std::string stream;
  for (int i = 0; i < 20; ++i) {
    sent.push_back({kAllTypes[i % 6], random_bytes(static_cast<size_t>(i * 37), static_cast<uint32_t>(i))});
    stream += encode_frame(sent.back());
  }
  FrameDecoder decoder;
  std::vector<Frame> got;
  size_t frame_end = 0;  // where the frame being received ends in `stream`
  for (size_t i = 0; i < stream.size(); ++i) {
    decoder.feed(&stream[i], 1);
    auto frame = decoder.next();
    if (!frame) continue;
    frame_end += kFrameHeaderSize + sent[got.size()].payload.size();
    EXPECT_EQ(i + 1, frame_end) << "a frame came out before its last byte arrived";
    got.push_back(std::move(*frame));
    EXPECT_FALSE(decoder.next());
    EXPECT_EQ(decoder.buffered(), 0u);
  }
  ASSERT_EQ(got.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) expect_same(got[i], sent[i]);
}

TEST(WireTest, DecodesManyFramesFromOneFeed) {
  std::vector<Frame> sent;
  std::string stream;
  for (int i = 0; i < 1000; ++i) {
    sent.push_back({kAllTypes[i % 6], std::to_string(i)});
    stream += encode_frame(sent.back());
  }
  // Half a frame more: the decoder yields every whole frame and keeps the rest.
  const std::string partial = encode_frame({FrameType::kWork, "pending"});
  stream += partial.substr(0, 15);
  FrameDecoder decoder;
  const std::vector<Frame> got = decode_all(stream, &decoder);
  ASSERT_EQ(got.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) expect_same(got[i], sent[i]);
  EXPECT_EQ(decoder.buffered(), 15u);
  decoder.feed(partial.data() + 15, partial.size() - 15);
  auto last = decoder.next();
  ASSERT_TRUE(last);
  expect_same(*last, {FrameType::kWork, "pending"});
}

TEST(WireTest, EverySingleByteCorruptionIsCaught) {
  const Frame frame{FrameType::kWork, pack_payload({{"prompt", "Once upon a time"}, {"id", 42}})};
  const std::string good = encode_frame(frame);
  const std::string next_frame = encode_frame({FrameType::kHeartbeat, ""});
  int waited = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    const bool length_byte = i >= 4 && i < 8;
    for (int value = 0; value < 256; ++value) {
      if (value == static_cast<uint8_t>(good[i])) continue;
      std::string bad = good;
      bad[i] = static_cast<char>(value);
      SCOPED_TRACE("byte " + std::to_string(i) + " set to " + std::to_string(value));

      // The decoder, even with a valid frame behind the bad one, must never yield a frame.
      FrameDecoder decoder;
      try {
        const std::vector<Frame> frames = decode_all(bad + next_frame, &decoder);
        EXPECT_TRUE(frames.empty()) << "corrupt frame accepted";
        // Only a grown length may leave the decoder waiting for bytes that are not there.
        EXPECT_TRUE(length_byte) << "corruption neither detected nor waited on";
        EXPECT_GT(decoder.buffered(), 0u);
        ++waited;
      } catch (const FrameError&) {
        EXPECT_THROW(decoder.next(), FrameError) << "decoder recovered after an error";
      }

      // read_frame sees end of stream after the bad frame, so every corruption is an error.
      io::UniqueFd fd = pipe_holding(bad);
      EXPECT_THROW(read_frame(fd.get()), FrameError);
    }
  }
  EXPECT_GT(waited, 0);
}

TEST(WireTest, ReadFrameReportsTruncationAtEof) {
  const std::string bytes = encode_frame({FrameType::kResult, "some result bytes"});
  for (size_t cut = 1; cut < bytes.size(); ++cut) {
    SCOPED_TRACE("first " + std::to_string(cut) + " bytes");
    io::UniqueFd fd = pipe_holding(bytes.substr(0, cut));
    try {
      read_frame(fd.get());
      ADD_FAILURE() << "truncated frame accepted";
    } catch (const FrameError& e) {
      EXPECT_THAT(e.what(), HasSubstr("truncated"));
    }
    FrameDecoder decoder;
    EXPECT_TRUE(decode_all(bytes.substr(0, cut), &decoder).empty());
    EXPECT_EQ(decoder.buffered(), cut);
  }
}

TEST(WireTest, ReadFrameStopsCleanlyAtFrameBoundary) {
  const Frame a{FrameType::kHello, "a"};
  const Frame b{FrameType::kShutdown, ""};
  io::UniqueFd fd = pipe_holding(encode_frame(a) + encode_frame(b));
  auto first = read_frame(fd.get());
  auto second = read_frame(fd.get());
  ASSERT_TRUE(first && second);
  expect_same(*first, a);
  expect_same(*second, b);
  EXPECT_FALSE(read_frame(fd.get()));
  EXPECT_FALSE(read_frame(pipe_holding("").get()));
}

// read_frame checks with the decoder, so both name the same problem.
TEST(WireTest, ReadFrameReportsWhatTheDecoderReports) {
  const std::string good = encode_frame({FrameType::kResult, "some result bytes"});
  std::string bad_magic = good, bad_type = good, bad_crc = good;
  bad_magic[1] = 'X';
  bad_type[8] = 42;
  bad_crc.back() ^= 1;
  for (const auto& [bytes, problem] : {std::pair{bad_magic, "bad magic"}, std::pair{bad_type, "unknown frame type 42"},
                                       std::pair{bad_crc, "checksum mismatch in a result frame"}}) {
    SCOPED_TRACE(problem);
    FrameDecoder decoder;
    std::string decoder_message;
    try {
      decode_all(bytes, &decoder);
    } catch (const FrameError& e) {
      decoder_message = e.what();
    }
    EXPECT_THAT(decoder_message, HasSubstr(problem));
    io::UniqueFd fd = pipe_holding(bytes + good);
    try {
      read_frame(fd.get());
      ADD_FAILURE() << "corrupt frame accepted";
    } catch (const FrameError& e) {
      EXPECT_THAT(e.what(), HasSubstr("read_frame(fd "));
      EXPECT_THAT(e.what(), HasSubstr(decoder_message));
    }
  }
}

TEST(WireTest, HelloKeepsItsKeysAndASwitchOnlyMovesTheCheckpoint) {
  WorkerHello h;
  h.worker = "cuda:1";
  h.model = "/models/a";
  h.dtype = "bfloat16";
  h.device = "cuda:0";
  h.threads = 2;
  h.heartbeat_s = 0.25;
  nlohmann::json j = to_json(h);
  EXPECT_EQ(j, nlohmann::json({{"worker", "cuda:1"},
                               {"model", "/models/a"},
                               {"dtype", "bfloat16"},
                               {"device", "cuda:0"},
                               {"threads", 2},
                               {"heartbeat_s", 0.25}}));
  h.broadcast = WorkerHello::Broadcast{1, 4};
  j = nlohmann::json::from_cbor(pack_payload(to_json(h)));
  EXPECT_EQ(j.at("broadcast"), nlohmann::json({{"rank", 1}, {"world", 4}}));
  const WorkerHello back = worker_hello_from_json(j);
  EXPECT_EQ(back.worker, "cuda:1");
  EXPECT_EQ(back.device, "cuda:0");
  EXPECT_EQ(back.threads, 2);
  EXPECT_EQ(back.heartbeat_s, 0.25);
  ASSERT_TRUE(back.broadcast);
  EXPECT_EQ(back.broadcast->rank, 1);
  EXPECT_EQ(back.broadcast->world, 4);

  const nlohmann::json next = switch_hello_json("/models/b", "auto");
  EXPECT_EQ(next, nlohmann::json({{"model", "/models/b"}, {"dtype", "auto"}}));
  const WorkerHello switched = worker_hello_from_json(next, &back);
  EXPECT_EQ(switched.model, "/models/b");
  EXPECT_EQ(switched.dtype, "auto");
  EXPECT_EQ(switched.worker, "cuda:1");
  EXPECT_EQ(switched.threads, 2);
  EXPECT_FALSE(switched.broadcast) << "a broadcast is for the first load only";
}

TEST(WireTest, AMalformedHelloNamesTheField) {
  nlohmann::json j = {{"worker", "cpu:0"}, {"model", "/m"}, {"dtype", "auto"}, {"device", "cpu"}, {"threads", 2.5}};
  try {
    worker_hello_from_json(j);
    ADD_FAILURE() << "a fractional thread count accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("hello.threads"));
  }
  j["threads"] = 1;
  j.erase("model");
  try {
    worker_hello_from_json(j);
    ADD_FAILURE() << "a Hello without a model accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("missing field 'model'"));
  }
  // A switch is no first Hello: it does not say which worker or device.
  EXPECT_THROW(worker_hello_from_json(switch_hello_json("/m", "auto")), Error);
}

std::string header_with_length(uint32_t length) {
  std::string bytes = encode_frame({FrameType::kWork, ""});
  for (int i = 0; i < 4; ++i) bytes[4 + i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return bytes;
}

TEST(WireTest, OversizeLengthIsRejectedBeforeThePayload) {
  for (uint32_t length : {kMaxFramePayload + 1, 0xffffffffu}) {
    SCOPED_TRACE(length);
    const std::string header = header_with_length(length);
    // Eight bytes (magic and length) are enough for the decoder to refuse the frame.
    FrameDecoder decoder;
    decoder.feed(header.data(), 8);
    try {
      decoder.next();
      ADD_FAILURE() << "oversize length accepted";
    } catch (const FrameError& e) {
      EXPECT_THAT(e.what(), HasSubstr("over the 268435456-byte limit"));
    }
    // read_frame must refuse the header itself, not report the payload missing after it.
    io::UniqueFd fd = pipe_holding(header);
    try {
      read_frame(fd.get());
      ADD_FAILURE() << "oversize length accepted";
    } catch (const FrameError& e) {
      EXPECT_THAT(e.what(), HasSubstr("over the 268435456-byte limit"));
    }
  }
  // The limit itself is allowed: the decoder waits for the payload.
  const std::string header = header_with_length(kMaxFramePayload);
  FrameDecoder decoder;
  EXPECT_TRUE(decode_all(header, &decoder).empty());
  EXPECT_EQ(decoder.buffered(), header.size());
}

TEST(WireTest, EncodeRefusesAnUnknownType) {
  EXPECT_THROW(encode_frame({static_cast<FrameType>(0), ""}), Error);
  EXPECT_THROW(encode_frame({static_cast<FrameType>(11), ""}), Error);
}

TEST(WireTest, WriteAndReadLargeFramesThroughNonBlockingPipe) {
  // O_NONBLOCK on both ends, as the scheduler has them; 1 MiB is far more than a pipe holds.
  Pipe p = make_pipe(O_NONBLOCK);
  const std::vector<Frame> sent = {{FrameType::kWork, random_bytes(1 << 20, 1)},
                                   {FrameType::kHeartbeat, ""},
                                   {FrameType::kResult, random_bytes(300000, 2)}};
  std::thread writer([&] {
    for (const Frame& f : sent) write_frame(p.write.get(), f);
    p.write = io::UniqueFd();
  });
  std::vector<Frame> got;
  while (auto frame = read_frame(p.read.get())) got.push_back(std::move(*frame));
  writer.join();
  ASSERT_EQ(got.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) expect_same(got[i], sent[i]);
}

TEST(WireTest, WriteToClosedReaderThrowsInsteadOfDying) {
  Pipe p = make_pipe();
  p.read = io::UniqueFd();
  // SIGPIPE has its default action (kill the process) for this test.
  struct sigaction dfl {
  }, old{};
  dfl.sa_handler = SIG_DFL;
  ASSERT_EQ(::sigaction(SIGPIPE, &dfl, &old), 0);
  try {
    write_frame(p.write.get(), {FrameType::kResult, "lost"});
    ADD_FAILURE() << "write to a closed pipe succeeded";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("write_frame(fd "));
    EXPECT_THAT(e.what(), HasSubstr(std::strerror(EPIPE)));
  }
  sigset_t pending;
  sigemptyset(&pending);
  ASSERT_EQ(sigpending(&pending), 0);
  EXPECT_FALSE(sigismember(&pending, SIGPIPE)) << "SIGPIPE left pending";
  ::sigaction(SIGPIPE, &old, nullptr);
}

TEST(WireTest, CborPayloadRoundTrips) {
  const nlohmann::json j = {{"id", 17},
                            {"prompt", "Once upon a time \xe2\x9c\x93"},
                            {"choices", {" yes", " no", ""}},
                            {"temperature", 0.25},
                            {"greedy", true},
                            {"stop", nullptr},
                            {"nested", {{"logprobs", {-1.5, -0.125}}, {"big", 1ull << 40}}}};
  const Frame frame{FrameType::kWork, pack_payload(j)};
  const std::vector<Frame> frames = decode_all(encode_frame(frame));
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(unpack_payload(frames[0]), j);
  EXPECT_EQ(unpack_payload({FrameType::kHello, pack_payload(nlohmann::json::object())}), nlohmann::json::object());
}

TEST(WireTest, InvalidCborIsRejected) {
  const std::string good = pack_payload({{"id", 1}, {"text", "abc"}});
  const std::string bad_payloads[] = {
      "",  // nothing at all
      good.substr(0, good.size() - 1),  // cut short
      good + "\x01",  // a second value after the first
      "\xff",  // a break byte with nothing to break
      "\x7a\xff\xff\xff\xff",  // a 4 GiB string that is not there
  };
  for (const std::string& payload : bad_payloads) {
    try {
      unpack_payload({FrameType::kResult, payload});
      ADD_FAILURE() << "accepted " << payload.size() << " bytes of invalid CBOR";
    } catch (const FrameError& e) {
      EXPECT_THAT(e.what(), HasSubstr("result frame: payload is not valid CBOR"));
    }
  }
}

}  // namespace
}  // namespace gpueval
