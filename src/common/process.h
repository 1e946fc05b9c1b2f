// Child processes, the one place that forks: pipes, descriptors handed to a child, fork itself,
// the steps a child takes between fork and exec, and reaping (waitpid with EINTR retried, exit
// statuses decoded, a process or its group killed). The workers' launcher (run/subprocess,
// run/worker_prefork) and the code sandbox (sandbox/sandbox) both build on it. It lives in common/
// because it is the one layer both of them may call, and like file_io it is plain POSIX plumbing
// that knows nothing of what the children are for.
//
// Every descriptor made here is O_CLOEXEC and owned by an io::UniqueFd, so children forked at the
// same time from different threads never inherit each other's pipes. The functions under "In the
// child" are async-signal-safe (no allocation, no locks, no exceptions): they are what a child of a
// threaded parent may call between fork and exec; they report failure as false with errno set.
// Everything else is for the parent, stateless and thread-safe. Reaping is by pid, so the process
// must not reap children behind its callers' backs (no SIGCHLD set to SIG_IGN, no waitpid(-1)).
#pragma once

#include <signal.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/file_io.h"

namespace gpueval {

struct ExitStatus {
  enum class Kind { kExited, kSignaled };
  Kind kind = Kind::kExited;
  int code = 0;  // exit code, for kExited
  int signal = 0;  // signal number, for kSignaled
  bool success() const { return kind == Kind::kExited && code == 0; }
  // As a shell's $? gives it: the exit code, or 128 + the signal.
  int shell_code() const { return kind == Kind::kExited ? code : 128 + signal; }
  // "exited with code 3", "killed by signal 9 (Killed)"
  std::string describe() const;
};

// Maps a waitpid() status to an ExitStatus (stopped or continued statuses are not expected).
ExitStatus exit_status_from_wait(int wait_status);

namespace process {

struct Pipe {
  io::UniqueFd read;
  io::UniqueFd write;
};

// pipe2(O_CLOEXEC); throws Error "<who>: pipe2 failed: <strerror>".
Pipe make_pipe(const std::string& who);
// Adds O_NONBLOCK; throws Error "<who>: fcntl(O_NONBLOCK) failed: <strerror>".
void set_nonblocking(int fd, const std::string& who);
// A memfd (MFD_CLOEXEC) holding `data`, read from its start; throws Error "<who>: ...".
io::UniqueFd memfd_with(const char* name, const std::string& data, const std::string& who);

// One past the highest descriptor a child may hold (RLIMIT_NOFILE, at most 2^20), for the sweep
// of close_on_exec_from where close_range is missing. Read it before fork.
int descriptor_limit();

// The parent's environment with `overrides` replacing or adding variables; throws Error "<who>:
// environment variable name '...' is empty or contains '='".
std::vector<std::string> environment_with(const std::string& who,
                                          const std::vector<std::pair<std::string, std::string>>& overrides);
// Null-terminated pointers into `strings`, as execve takes argv and envp.
std::vector<char*> pointers_to(std::vector<std::string>& strings);

// fork() with every signal blocked in the calling thread across it, so that no handler of the
// parent's runs in the child before the child resets them. The child returns with every signal
// still blocked (it sets its own mask before exec: clear_signal_mask); the parent returns with its
// mask restored; both find that mask in `*parent_mask` when given. -1 with errno on failure.
pid_t fork_with_signals_blocked(sigset_t* parent_mask = nullptr);

// In the child. Every signal with a handler, and SIGPIPE, SIGINT and SIGTERM, back to SIG_DFL;
// other ignored signals stay ignored, as nohup expects.
void reset_signals_in_child();
// In the child: no signal blocked, through the raw system call (no sanitizer's interceptor).
void clear_signal_mask();
// In the child: SIGKILL when the thread that forked it exits (prctl(PR_SET_PDEATHSIG)); false
// with errno when prctl fails. `*parent_alive` is false when the parent died before that took
// effect, and then no signal will ever come. A uid change clears the setting: call it after one.
bool die_with_parent(pid_t parent, bool* parent_alive);
// In the child: a close-on-exec copy of `fd` at `lowest` or above (fcntl(F_DUPFD_CLOEXEC)); -1
// with errno on failure.
int lift_descriptor(int fd, int lowest);
// In the child: descriptor i becomes a copy of sources[i] for each i < count, without FD_CLOEXEC
// (-1: i is left as it is). Every source is first copied above `count` (the copies closed at the
// end), so that no dup2 overwrites a source another one still needs, wherever the sources landed.
bool place_descriptors(const int* sources, int count);
// In the child: every descriptor from `first` up marked close-on-exec (close_range, else fcntl up
// to `limit`, descriptor_limit()). Marking rather than closing keeps a status pipe open to exec.
void close_on_exec_from(int first, int limit);

// waitpid(pid, 0), EINTR retried, with the rusage of the process when `usage` is given (wait4).
// The raw status, or -1 with errno.
int wait_for(pid_t pid, rusage* usage = nullptr);
// waitpid(WNOHANG), EINTR retried: the raw status once it has exited, nullopt while it runs.
// Throws Error "<who>: waitpid(pid N) failed: <strerror>".
std::optional<int> poll_exit(pid_t pid, const std::string& who);
// SIGKILL and reap, never throwing: for a child nobody will wait for. -1 if it was not ours.
int kill_and_reap(pid_t pid);
// kill(-group, sig): every process still in the process group (or session leader's group).
void kill_group(pid_t group, int sig);

// pidfds (Linux 5.3+): a descriptor for a process that cannot be confused with a later one that
// reuses its pid. open_pidfd gives an invalid UniqueFd when the kernel refuses.
io::UniqueFd open_pidfd(pid_t pid);
void kill_pidfd(int pidfd, int sig);
// Reaps the process behind `pidfd` (a child, or an orphan this subreaper adopted), its rusage in
// `*usage` unless null; false when it is not ours to reap.
bool reap_pidfd(int pidfd, rusage* usage);

struct Capture {
  bool keep_environment = false;  // the parent's environment, not just PATH=/usr/bin:/bin
  bool with_stderr = false;  // stderr into the same output, as `2>&1`
};
// The output (stdout) of `argv` run with an empty environment but PATH=/usr/bin:/bin (unless
// `how` keeps the parent's) and stdin /dev/null, and its exit status (-1 when it could not start
// or died of a signal). argv[0] is a path; no shell.
std::string run_and_capture(const std::vector<std::string>& argv, int& status, const Capture& how = {});

}  // namespace process
}  // namespace gpueval
