// The console: what a gpueval process writes to stderr, once a Console is installed under
// std::cerr (main installs one for `run` and `merge`). Every log line comes out whole, never
// mixed with the status line: on a terminal one status line (a run's progress bar, or the step
// it is in) stays at the bottom; before any other text is written it is erased ("\r\033[K"),
// and once that text's line has ended it is drawn again. Text is held until its line ends, so a
// line written in pieces is never torn. Quiet (--quiet) drops the log lines and draws no status
// line; an error (Console::error) is written all the same. On anything but a terminal there is
// no status line: set_status draws nothing and says so, and the caller logs plain lines instead.
// Installed, it is process-wide as stderr is; one lock guards it, so threads may log at once.
#pragma once

#include <mutex>
#include <streambuf>
#include <string>

namespace gpueval {

struct ConsoleOptions {
  bool terminal = false;  // the file descriptor is a terminal: a status line is drawn in place
  bool quiet = false;  // log lines are dropped; errors are not
};

class Console : private std::streambuf {
 public:
  // Writes to `fd` and installs itself under std::cerr until destroyed; one at a time.
  Console(int fd, ConsoleOptions options);
  ~Console() override;  // writes a line left unfinished, erases the status line, restores std::cerr
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  // What the installed console does (nothing installed: std::cerr's plain behaviour).
  // set_status: draws `line` as the status line, in place of the one drawn; false when none is
  // drawn (no console, not a terminal, or quiet), for the caller to log a plain line instead.
  static bool set_status(const std::string& line);
  static void clear_status();  // erases the status line, e.g. before text goes to stdout
  // A line that says why a command failed or did not finish: written even when quiet.
  static void error(const std::string& line);

 private:
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int overflow(int c) override;

  void write_log(const char* s, size_t n);  // holds text until its line ends
  void write_out(const std::string& text, bool keep_status);  // erases, writes, redraws; under mu_
  std::string fit(const std::string& line) const;  // cut to the terminal's width: a wrapped line cannot be erased

  int fd_;
  ConsoleOptions options_;
  std::streambuf* previous_;  // std::cerr's own buffer, restored by the destructor
  std::mutex mu_;
  std::string pending_;  // log text whose line has not ended
  std::string status_;  // the status line to keep drawn; empty: none
  bool drawn_ = false;  // status_ is on the screen now
};

}  // namespace gpueval
