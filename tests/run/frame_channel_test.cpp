#include "run/frame_channel.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <random>
#include <stdexcept>

#include <gtest/gtest.h>

#include "common/file_io.h"

namespace gpueval {
namespace {

using Receive = FrameChannel::Receive;

struct Pipe {
  io::UniqueFd read;
  io::UniqueFd write;
};

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  return {io::UniqueFd(fds[0]), io::UniqueFd(fds[1])};
}

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

void write_bytes(int fd, const std::string& bytes) { ASSERT_EQ(io::write_all(fd, bytes.data(), bytes.size()), 0); }

// Receives into `got` until the channel stops reading; returns why it stopped.
Receive receive_all(FrameChannel& channel, std::vector<Frame>& got) {
  return channel.receive([&](const Frame& f) {
    got.push_back(f);
    return true;
  });
}

TEST(FrameChannelTest, WritesWhatAFullPipeTakesAndTheRestOnFlush) {
  Pipe p = make_pipe();
  ASSERT_GT(::fcntl(p.write.get(), F_SETPIPE_SZ, 4096), 0);
  FrameChannel writer(-1, p.write.get());
  FrameChannel reader(p.read.get(), -1);
  const Frame big{FrameType::kWork, random_bytes(1 << 20, 7)};
  const Frame small{FrameType::kHeartbeat, ""};
  ASSERT_EQ(writer.send(big), 0);
  ASSERT_EQ(writer.send(small), 0);
  EXPECT_TRUE(writer.has_output()) << "a 1 MiB frame cannot fit a 4 KiB pipe";
  std::vector<Frame> got;
  int rounds = 0;
  while (writer.has_output()) {
    ASSERT_EQ(receive_all(reader, got), Receive::kDrained);
    ASSERT_EQ(writer.flush(), 0);
    ++rounds;
  }
  ASSERT_EQ(receive_all(reader, got), Receive::kDrained);
  EXPECT_GT(rounds, 100);  // the pipe took it a few KiB at a time
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].type, big.type);
  EXPECT_EQ(got[0].payload, big.payload);
  EXPECT_EQ(got[1].type, small.type);
  EXPECT_EQ(reader.bytes_received(), encode_frame(big).size() + encode_frame(small).size());
}

TEST(FrameChannelTest, AFrameSplitAcrossReadsComesOutWhole) {
  Pipe p = make_pipe();
  FrameChannel reader(p.read.get(), -1);
  const std::string bytes = encode_frame({FrameType::kResult, "the answer is 42"});
  std::vector<Frame> got;
  write_bytes(p.write.get(), bytes.substr(0, 5));
  EXPECT_EQ(receive_all(reader, got), Receive::kDrained);
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(reader.buffered(), 5u);
  write_bytes(p.write.get(), bytes.substr(5, 10));
  EXPECT_EQ(receive_all(reader, got), Receive::kDrained);
  EXPECT_TRUE(got.empty());
  write_bytes(p.write.get(), bytes.substr(15));
  EXPECT_EQ(receive_all(reader, got), Receive::kDrained);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, "the answer is 42");
  EXPECT_EQ(reader.buffered(), 0u);
}

TEST(FrameChannelTest, EndOfStreamMidFrameLeavesTheBytesBuffered) {
  Pipe p = make_pipe();
  FrameChannel reader(p.read.get(), -1);
  const std::string whole = encode_frame({FrameType::kHeartbeat, ""});
  const std::string cut = encode_frame({FrameType::kResult, "cut short"});
  write_bytes(p.write.get(), whole + cut.substr(0, cut.size() - 3));
  p.write = io::UniqueFd();
  std::vector<Frame> got;
  EXPECT_EQ(receive_all(reader, got), Receive::kEnd);
  ASSERT_EQ(got.size(), 1u) << "the frame before the cut is delivered";
  EXPECT_EQ(got[0].type, FrameType::kHeartbeat);
  EXPECT_EQ(reader.buffered(), cut.size() - 3);
}

TEST(FrameChannelTest, EndOfStreamAtAFrameBoundaryBuffersNothing) {
  Pipe p = make_pipe();
  FrameChannel reader(p.read.get(), -1);
  write_bytes(p.write.get(), encode_frame({FrameType::kShutdown, ""}));
  p.write = io::UniqueFd();
  std::vector<Frame> got;
  EXPECT_EQ(receive_all(reader, got), Receive::kEnd);
  EXPECT_EQ(got.size(), 1u);
  EXPECT_EQ(reader.buffered(), 0u);
}

TEST(FrameChannelTest, ACorruptFrameIsAnErrorAndStaysOne) {
  Pipe p = make_pipe();
  FrameChannel reader(p.read.get(), -1);
  std::string bad = encode_frame({FrameType::kResult, "payload"});
  bad.back() ^= 0x5a;
  write_bytes(p.write.get(),
              encode_frame({FrameType::kHeartbeat, ""}) + bad + encode_frame({FrameType::kHeartbeat, ""}));
  std::vector<Frame> got;
  EXPECT_THROW(receive_all(reader, got), FrameError);
  EXPECT_EQ(got.size(), 1u) << "only the frame before the corrupt one";
  EXPECT_THROW(receive_all(reader, got), FrameError) << "the stream is dead after a bad frame";
  EXPECT_EQ(got.size(), 1u);
}

TEST(FrameChannelTest, AStoppedReceiveKeepsTheRestForTheNextOne) {
  Pipe p = make_pipe();
  FrameChannel reader(p.read.get(), -1);
  write_bytes(p.write.get(), encode_frame({FrameType::kHello, "1"}) + encode_frame({FrameType::kResult, "2"}));
  std::vector<Frame> got;
  const auto take_one = [&](const Frame& f) {
    got.push_back(f);
    return false;
  };
  EXPECT_EQ(reader.receive(take_one), Receive::kStopped);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, "1");
  EXPECT_EQ(reader.receive(take_one), Receive::kStopped);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].payload, "2");
  EXPECT_EQ(receive_all(reader, got), Receive::kDrained);
}

TEST(FrameChannelTest, AWriteToAGoneReaderReportsEpipe) {
  Pipe p = make_pipe();
  p.read = io::UniqueFd();
  struct sigaction ign {
  }, old{};
  ign.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGPIPE, &ign, &old), 0);  // as SignalScope has it in the scheduler
  FrameChannel writer(-1, p.write.get());
  EXPECT_EQ(writer.send({FrameType::kWork, "lost"}), EPIPE);
  ::sigaction(SIGPIPE, &old, nullptr);
}

}  // namespace
}  // namespace gpueval
