#include "common/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include <nlohmann/json.hpp>

#include "common/file_io.h"

namespace gpueval {
namespace {

constexpr const char* kLockName = "gpueval.lock";

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

// flock, retrying EINTR; 0 or the errno.
int flock_retry(int fd, int op) {
  while (::flock(fd, op) != 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

}  // namespace

std::string DirectoryLock::describe_holder(const std::string& dir) {
  const std::string path = dir + "/" + kLockName;
  try {
    const nlohmann::json j = nlohmann::json::parse(io::read_file(path, 1 << 16));
    return fmt::format("pid {} on host {} since {} ({})", j.at("pid").get<int64_t>(), j.at("host").get<std::string>(),
                       j.at("started").get<std::string>(), j.at("what").get<std::string>());
  } catch (const std::exception&) {
    return "an unknown process";  // the holder has not written it yet, or an older gpueval holds it
  }
}

DirectoryLock DirectoryLock::acquire(const std::string& dir, const std::string& what, bool wait,
                                     const std::function<void(const std::string&)>& on_wait) {
  const std::string path = dir + "/" + kLockName;
  io::UniqueFd fd = io::open_file(path, O_RDWR | O_CREAT, 0644);
  if (int err = flock_retry(fd.get(), LOCK_EX | LOCK_NB); err != 0) {
    if (err != EWOULDBLOCK) throw Error(fmt::format("{}: flock failed: {}", path, std::strerror(err)));
    const std::string holder = describe_holder(dir);
    if (!wait)
      throw DirectoryBusy(
          fmt::format("{} is in use by {}; wait for it with --wait, or write elsewhere with --output", dir, holder));
    if (on_wait) on_wait(holder);
    if (int err2 = flock_retry(fd.get(), LOCK_EX); err2 != 0)
      throw Error(fmt::format("{}: flock failed: {}", path, std::strerror(err2)));
  }
  // Ours now: say who holds it. Written in place (a rename would give the next process another
  // inode to lock); a reader that races with these few microseconds may still read the previous
  // holder's line, or none ("an unknown process").
  const std::string info =
      nlohmann::json{
          {"pid", static_cast<int64_t>(::getpid())}, {"host", host_name()}, {"started", now_utc()}, {"what", what}}
          .dump() +
      "\n";
  if (::ftruncate(fd.get(), 0) != 0 || io::write_all(fd.get(), info.data(), info.size()) != 0)
    throw Error(fmt::format("{}: write failed: {}", path, std::strerror(errno)));
  return DirectoryLock(fd.release(), path);
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace gpueval
