#include "run/frame_channel.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace gpueval {
namespace {

void set_nonblocking(int fd) {
  if (fd < 0) return;
  const int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

}  // namespace

FrameChannel::FrameChannel(int read_fd, int write_fd) : read_fd_(read_fd), write_fd_(write_fd) {
  set_nonblocking(read_fd_);
  set_nonblocking(write_fd_);
}

int FrameChannel::send(const Frame& frame) {
  outbox_.append(encode_frame(frame));
  return flush();
}

int FrameChannel::flush() {
  if (write_fd_ < 0) return 0;
  while (sent_ < outbox_.size()) {
    const ssize_t n = ::write(write_fd_, outbox_.data() + sent_, outbox_.size() - sent_);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (n < 0) return errno;
    sent_ += static_cast<size_t>(n);
  }
  outbox_.clear();
  sent_ = 0;
  return 0;
}

FrameChannel::Receive FrameChannel::deliver(const FrameHandler& on_frame) {
  while (std::optional<Frame> frame = decoder_.next())
    if (!on_frame(*frame)) return Receive::kStopped;
  return Receive::kDrained;
}

FrameChannel::Receive FrameChannel::receive(const FrameHandler& on_frame) {
  if (deliver(on_frame) == Receive::kStopped) return Receive::kStopped;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(read_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Receive::kDrained;
    if (n < 0) {
      read_errno_ = errno;
      return Receive::kFailed;
    }
    if (n == 0) return Receive::kEnd;
    received_ += static_cast<uint64_t>(n);
    decoder_.feed(buf, static_cast<size_t>(n));
    if (deliver(on_frame) == Receive::kStopped) return Receive::kStopped;
  }
}

}  // namespace gpueval
