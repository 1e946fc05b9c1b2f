// The seccomp filter every sandboxed program runs under (sandbox.h passes it to bubblewrap, which
// installs it just before the program's interpreter starts): default allow, and EPERM for what a
// test program never needs and an escape would: tracing other processes, mounts, keyrings, BPF,
// perf, io_uring, new namespaces (unshare, setns, clone with a CLONE_NEW* flag), kexec, reboot,
// personality, modules, clocks, host names, TIOCSTI. clone3 gets ENOSYS (its flags sit behind a
// pointer the filter cannot read; glibc then falls back to clone, whose flags it can). Built with
// libseccomp; may call common only.
#pragma once

#include <string>
#include <vector>

namespace gpueval {

// The filter as a classic BPF program, the bytes bwrap's --seccomp reads. Throws Error when
// libseccomp refuses (one line).
std::string seccomp_filter_bpf();

// What the filter refuses, one entry per rule: system call names, then "clone(CLONE_NEW*)",
// "clone3 (ENOSYS)" and "ioctl(TIOCSTI)". Calls this machine's headers do not know are left out.
std::vector<std::string> seccomp_refused_calls();

}  // namespace gpueval
