// The scheduler's signal discipline, as ninja's subprocess layer has it: SIGINT, SIGTERM and
// SIGCHLD are blocked for a SignalScope's lifetime and taken only inside ppoll() with
// wait_mask(), so a signal can never land between a check and the wait; SIGPIPE is ignored,
// because a dead worker's pipe must give EPIPE, not kill the scheduler. Everything is restored on
// destruction.
//
// Process-wide state: one SignalScope at a time, on the thread that calls ppoll().
#pragma once

#include <signal.h>

namespace gpueval {

class SignalScope {
 public:
  SignalScope();  // clears any stop signal seen by an earlier scope
  ~SignalScope();
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

  // The mask to pass to ppoll(): the caller's mask with SIGINT, SIGTERM and SIGCHLD let through.
  const sigset_t* wait_mask() const { return &wait_mask_; }
  // SIGINT or SIGTERM once one has arrived (inside ppoll), else 0. SIGCHLD only wakes ppoll.
  int stop_signal() const;

 private:
  struct sigaction old_int_, old_term_, old_chld_, old_pipe_;
  sigset_t old_mask_, wait_mask_;
};

}  // namespace gpueval
