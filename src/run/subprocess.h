// Worker processes: fork+exec of a child that talks to its parent over two pipes, and the
// child-side lookup of those pipes. A Child owns its process and the parent's ends of both pipes;
// it is movable, not copyable, and whoever holds it is responsible for the process: destroying a
// Child that is still running SIGKILLs and reaps it, so no Child leaves an orphan or a zombie.
//
// The fork, the pipes and the reaping are common/process.h's: every descriptor is O_CLOEXEC, so
// children spawned at the same time from different threads never inherit each other's pipes, and
// the child closes (at exec) every descriptor above 4 that it inherited. A Child is not
// thread-safe: one thread at a time may call its methods. Child::spawn itself may be called from
// several threads at once.
//
// Reaping is by pid (waitpid), so the process must not reap children behind the Child's back
// (no SIGCHLD set to SIG_IGN, no waitpid(-1, ...) loops).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/file_io.h"
#include "common/process.h"

namespace gpueval {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0]: path of the executable (no PATH search)
  std::vector<std::pair<std::string, std::string>> env;  // added to / overriding the parent's environment
  // If set, the child's stdout and stderr are appended here (O_APPEND|O_CREAT, 0644); otherwise
  // the child shares the parent's stdout and stderr.
  std::string log_path;
  // setpgid(0, 0): a terminal's Ctrl-C reaches the parent only, which then shuts workers down.
  bool new_process_group = true;
  // prctl(PR_SET_PDEATHSIG, SIGKILL), and exit at once if the parent already died before that
  // took effect. Linux sends the signal when the *thread* that spawned the child exits, so spawn
  // from a thread that lives as long as the children should.
  bool die_with_parent = true;
};

// A child process with two pipes: the child reads commands on fd 3 and writes results on fd 4;
// its stdin is /dev/null.
class Child {
 public:
  // fork+exec. Failures before exec and the exec itself are reported to the parent through a
  // CLOEXEC status pipe and thrown as Error naming argv[0], the call and strerror, e.g.
  // "/opt/gpueval/bin/worker: execve failed: No such file or directory".
  static Child spawn(const SpawnOptions& options);
  // Takes over a child this process forked itself, already set up as spawn sets one up (fds 3 and
  // 4 its pipes' ends; worker_prefork.h): the parent's write end of its command pipe and read end
  // of its result pipe (O_NONBLOCK, O_CLOEXEC), both owned from now on. `name` is for messages.
  static Child adopt(pid_t pid, std::string name, io::UniqueFd command_fd, io::UniqueFd result_fd);

  Child(Child&& other) noexcept;
  Child& operator=(Child&& other) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();

  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }  // argv[0], for messages
  bool forked_ahead() const { return forked_ahead_; }  // made by adopt(), not spawn()
  int command_fd() const { return command_fd_.get(); }  // parent's write end (child's fd 3); -1 after close_command()
  int result_fd() const { return result_fd_.get(); }  // parent's read end (child's fd 4), O_NONBLOCK, O_CLOEXEC
  // Closes the command pipe; the child then reads end of stream on fd 3.
  void close_command();

  // kill(pid, sig); a no-op once the child has been reaped.
  void signal(int sig);
  // waitpid(WNOHANG), EINTR retried; the status once the child has exited, cached from then on.
  std::optional<ExitStatus> poll();
  // Blocks until the child exits; EINTR retried.
  ExitStatus wait();
  // SIGTERM, wait up to `grace` for the child to exit, then SIGKILL and wait.
  ExitStatus kill_and_wait(std::chrono::milliseconds grace);

 private:
  Child() = default;
  void release() noexcept;  // kill and reap a running child and close the pipes, never throwing

  pid_t pid_ = -1;
  std::string name_;
  io::UniqueFd command_fd_;
  io::UniqueFd result_fd_;
  std::optional<ExitStatus> status_;  // set once reaped
  bool forked_ahead_ = false;
};

// In the child (worker side): the two descriptors handed over by Child::spawn, checked with fcntl
// to be open in the right direction (Error otherwise, e.g. when the worker binary is run by hand)
// and marked close-on-exec so that anything the worker runs does not inherit them.
int inherited_command_fd();  // 3, readable
int inherited_result_fd();  // 4, writable

}  // namespace gpueval
