// The console under std::cerr (common/console.h), writing into a pipe: log lines come out whole,
// the status line is erased before them and drawn again after, --quiet keeps only errors.
#include "common/console.h"

#include <fcntl.h>
#include <unistd.h>

#include <iostream>

#include <gtest/gtest.h>

namespace gpueval {
namespace {

// A pipe the console writes into; read() returns what it holds once the console is gone.
class Pipe {
 public:
  Pipe() {
    if (::pipe2(fds_, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  }
  ~Pipe() {
    ::close(fds_[0]);
    if (fds_[1] >= 0) ::close(fds_[1]);
  }
  int writer() const { return fds_[1]; }
  std::string read() {
    ::close(fds_[1]);
    fds_[1] = -1;
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::read(fds_[0], buf, sizeof buf)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

 private:
  int fds_[2];
};

constexpr const char* kErase = "\r\033[K";

TEST(Console, ErasesTheStatusLineBeforeLogTextAndDrawsItAgainAfter) {
  Pipe pipe;
  {
    Console console(pipe.writer(), ConsoleOptions{true, false});
    EXPECT_TRUE(Console::set_status("bar 1"));
    std::cerr << "[x] one";  // held until its line ends
    std::cerr << " piece\n";
    EXPECT_TRUE(Console::set_status("bar 2"));
    Console::error("gpueval: bad");
  }
  const std::string e = kErase;
  EXPECT_EQ(pipe.read(), "bar 1" + e + "[x] one piece\nbar 1" + e + "bar 2" + e + "gpueval: bad\nbar 2" + e);
}

TEST(Console, ClearStatusLeavesAClearedLineAndNothingIsRedrawn) {
  Pipe pipe;
  {
    Console console(pipe.writer(), ConsoleOptions{true, false});
    Console::set_status("bar");
    Console::clear_status();
    std::cerr << "[x] after\n";
  }
  EXPECT_EQ(pipe.read(), std::string("bar") + kErase + "[x] after\n");
}

TEST(Console, QuietKeepsOnlyErrors) {
  Pipe pipe;
  {
    Console console(pipe.writer(), ConsoleOptions{true, true});
    EXPECT_FALSE(Console::set_status("bar"));
    std::cerr << "[x] a log line\n"
              << "[x] unfinished";
    Console::error("gpueval: it failed");
  }
  EXPECT_EQ(pipe.read(), "gpueval: it failed\n");
}

TEST(Console, NotATerminalPassesWholeLinesAndDrawsNoStatus) {
  Pipe pipe;
  {
    Console console(pipe.writer(), ConsoleOptions{false, false});
    EXPECT_FALSE(Console::set_status("bar"));
    std::cerr << "a";
    std::cerr << "b\nc";  // "c" has no newline: the console ends it when it goes
  }
  EXPECT_EQ(pipe.read(), "ab\nc\n");
}

}  // namespace
}  // namespace gpueval
