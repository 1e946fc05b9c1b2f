#include "run/signals.h"

#include <cstring>

namespace gpueval {
namespace {

volatile sig_atomic_t g_stop_signal = 0;

void on_stop_signal(int sig) { g_stop_signal = sig; }
void on_child_signal(int) {}  // only wakes ppoll

}  // namespace

SignalScope::SignalScope() {
  g_stop_signal = 0;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &old_int_);
  ::sigaction(SIGTERM, &sa, &old_term_);
  sa.sa_handler = on_child_signal;
  ::sigaction(SIGCHLD, &sa, &old_chld_);
  sa.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &sa, &old_pipe_);
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &block, &old_mask_);
  wait_mask_ = old_mask_;
  sigdelset(&wait_mask_, SIGINT);
  sigdelset(&wait_mask_, SIGTERM);
  sigdelset(&wait_mask_, SIGCHLD);
}

SignalScope::~SignalScope() {
  ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
  ::sigaction(SIGCHLD, &old_chld_, nullptr);
  ::sigaction(SIGPIPE, &old_pipe_, nullptr);
}

int SignalScope::stop_signal() const { return g_stop_signal; }

}  // namespace gpueval
