// One process at a time in a directory: an advisory lock on <dir>/gpueval.lock, taken with
// flock(LOCK_EX). The kernel drops the lock when the holder's descriptor closes, which includes any
// death (kill -9, OOM killer, a crashed node's NFS lease), so a lock is never left stale. The file
// itself stays; what it holds (pid, host, start time, command) only names the holder for the
// message of a process that could not take the lock. The descriptor is O_CLOEXEC, so worker
// processes exec'd by the holder do not keep the lock after it dies.
//
// Private to src/; used by the flows that own an output folder (a run, a nightly run, a shard, a
// plan, a merge). A DirectoryLock belongs to one owner and is not thread-safe; it may call nothing
// outside common/.
#pragma once

#include <functional>
#include <string>

#include "gpueval/error.h"

namespace gpueval {

// The lock is held by someone else (and the caller did not ask to wait).
class DirectoryBusy : public Error {
 public:
  using Error::Error;
};

class DirectoryLock {
 public:
  // Takes the lock on `dir` (which must exist). If another process holds it: without `wait`,
  // throws DirectoryBusy "<dir> is in use by pid P on host H since T (COMMAND); ..."; with `wait`,
  // calls on_wait(holder) once with the holder's description and blocks until the lock is free.
  // `what` says who takes it ("gpueval run configs/x.yaml"), for the next process's message.
  static DirectoryLock acquire(const std::string& dir, const std::string& what, bool wait,
                               const std::function<void(const std::string& holder)>& on_wait = nullptr);

  DirectoryLock(DirectoryLock&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) { other.fd_ = -1; }
  DirectoryLock& operator=(DirectoryLock&&) = delete;
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  ~DirectoryLock();  // releases the lock

  const std::string& path() const { return path_; }  // <dir>/gpueval.lock

  // The holder recorded in <dir>/gpueval.lock, as one phrase ("pid 12 on host n1 since
  // 2026-12-01 19:30:02 UTC (gpueval run x.yaml)"); "an unknown process" when it cannot be read.
  static std::string describe_holder(const std::string& dir);

 private:
  DirectoryLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

}  // namespace gpueval
