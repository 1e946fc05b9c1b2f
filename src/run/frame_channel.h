// A FrameChannel carries frames (wire.h) both ways over a pair of non-blocking pipe ends, for an
// event loop that must never block on one peer: send() queues a frame and writes what the pipe
// takes now, flush() writes more once poll() says POLLOUT, and receive() reads what the pipe
// holds, feeds it to one FrameDecoder and hands each verified frame to the caller.
//
// It owns its outgoing bytes and its decoder, never the descriptors: whoever owns those (a Child)
// closes them, and replaces the channel with a new one when it does. The caller keeps SIGPIPE
// from killing the process (SignalScope ignores it), so a reader that is gone gives EPIPE.
// Not thread-safe: one event loop owns a channel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "run/wire.h"

namespace gpueval {

class FrameChannel {
 public:
  enum class Receive {
    kDrained,  // the pipe is empty for now
    kStopped,  // the handler asked to stop; later frames stay buffered for the next receive()
    kEnd,  // end of stream; buffered() > 0 means it ended inside a frame
    kFailed,  // read() failed with read_errno()
  };
  // Returns false to stop receiving (e.g. the peer was just found broken and its pipes closed).
  using FrameHandler = std::function<bool(const Frame& frame)>;

  FrameChannel() = default;  // no descriptors: frames may be queued, nothing is read or written
  // Sets O_NONBLOCK on both; either may be -1 for a channel that only reads or only writes.
  FrameChannel(int read_fd, int write_fd);

  // Queues `frame` and writes what the pipe takes now: 0, or the errno of a failed write.
  int send(const Frame& frame);
  // Writes queued bytes until the pipe is full or they are all gone: 0, or the errno of a failed
  // write (EPIPE once the reader is gone).
  int flush();
  // Queued bytes wait for the pipe to take them: poll for POLLOUT and flush().
  bool has_output() const { return write_fd_ >= 0 && sent_ < outbox_.size(); }

  // Hands every complete frame to `on_frame`, first those already buffered, then those read now.
  // EINTR is retried. Throws FrameError for a frame that fails verification; the stream is dead
  // from then on, and every later call throws again.
  Receive receive(const FrameHandler& on_frame);
  int read_errno() const { return read_errno_; }
  size_t buffered() const { return decoder_.buffered(); }
  uint64_t bytes_received() const { return received_; }  // grows with every read that returned data

 private:
  Receive deliver(const FrameHandler& on_frame);

  int read_fd_ = -1;
  int write_fd_ = -1;
  std::string outbox_;  // frames not yet written
  size_t sent_ = 0;  // bytes of outbox_ already written
  FrameDecoder decoder_;
  int read_errno_ = 0;
  uint64_t received_ = 0;
};

}  // namespace gpueval
