#include "common/console.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <iostream>

namespace gpueval {
namespace {

Console* g_installed = nullptr;

constexpr const char* kErase = "\r\033[K";  // to column 0, then clear to the end of the line

// Writes all of `text`, retrying on EINTR; a console that cannot write has nowhere to say so.
void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

Console::Console(int fd, ConsoleOptions options) : fd_(fd), options_(options) {
  std::cerr.flush();
  previous_ = std::cerr.rdbuf(this);
  g_installed = this;
}

Console::~Console() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!pending_.empty() && !options_.quiet) {
      pending_ += '\n';
      write_out(pending_, false);
    } else if (drawn_) {
      write_out("", false);
    }
    pending_.clear();
  }
  g_installed = nullptr;
  std::cerr.rdbuf(previous_);
}

bool Console::set_status(const std::string& line) {
  Console* c = g_installed;
  if (!c || !c->options_.terminal || c->options_.quiet) return false;
  std::lock_guard<std::mutex> lock(c->mu_);
  c->status_ = c->fit(line);
  c->write_out("", true);
  return true;
}

void Console::clear_status() {
  Console* c = g_installed;
  if (!c) return;
  std::lock_guard<std::mutex> lock(c->mu_);
  c->status_.clear();
  if (c->drawn_) c->write_out("", false);
}

void Console::error(const std::string& line) {
  Console* c = g_installed;
  const std::string text = line.empty() || line.back() != '\n' ? line + "\n" : line;
  if (!c) {
    std::cerr << text << std::flush;
    return;
  }
  std::lock_guard<std::mutex> lock(c->mu_);
  // A log line still unfinished goes first (or not at all, when quiet), so the error is whole.
  if (!c->pending_.empty() && !c->options_.quiet) c->pending_ += '\n';
  c->write_out((c->options_.quiet ? std::string() : c->pending_) + text, true);
  c->pending_.clear();
}

std::streamsize Console::xsputn(const char* s, std::streamsize n) {
  write_log(s, static_cast<size_t>(n));
  return n;
}

int Console::overflow(int c) {
  if (c == traits_type::eof()) return traits_type::not_eof(c);
  const char ch = traits_type::to_char_type(c);
  write_log(&ch, 1);
  return c;
}

void Console::write_log(const char* s, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.append(s, n);
  const size_t end = pending_.rfind('\n');
  if (end == std::string::npos) return;
  if (!options_.quiet) write_out(pending_.substr(0, end + 1), true);
  pending_.erase(0, end + 1);
}

void Console::write_out(const std::string& text, bool keep_status) {
  std::string out = drawn_ ? kErase : "";
  out += text;
  drawn_ = false;
  if (keep_status && !status_.empty() && options_.terminal && !options_.quiet) {
    out += status_;
    drawn_ = true;
  }
  write_all(fd_, out);
}

std::string Console::fit(const std::string& line) const {
  winsize ws{};
  if (::ioctl(fd_, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0) return line;
  // One column short of the width: a line that fills the last column wraps on some terminals.
  const size_t columns = ws.ws_col - 1u;
  size_t count = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    const bool starts_character = (static_cast<unsigned char>(line[i]) & 0xC0) != 0x80;  // UTF-8
    if (starts_character && count++ == columns) return line.substr(0, i);
  }
  return line;
}

}  // namespace gpueval
