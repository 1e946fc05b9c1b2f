#include "sandbox/seccomp_filter.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>

#include "gpueval/error.h"

namespace gpueval {
namespace {

// Refused with EPERM, whatever the arguments.
const char* const kRefused[] = {
    // other processes' memory and descriptors
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    // file systems
    "mount", "umount2", "mount_setattr", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick",
    "pivot_root", "chroot",
    // the kernel's keyrings, BPF, perf, io_uring, userfaultfd
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register",
    // namespaces
    "unshare", "setns",
    // the machine
    "kexec_load", "kexec_file_load", "reboot", "personality", "swapon", "swapoff", "init_module", "finit_module",
    "delete_module", "acct", "quotactl", "syslog", "vhangup", "lookup_dcookie", "open_by_handle_at",
    "name_to_handle_at", "fanotify_init", "iopl", "ioperm", "settimeofday", "clock_settime", "clock_adjtime",
    "adjtimex", "sethostname", "setdomainname", "uselib"};

const uint64_t kNamespaceFlags[] = {CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,   CLONE_NEWUSER,
                                    CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP};

struct Context {
  scmp_filter_ctx ctx = nullptr;
  ~Context() {
    if (ctx) seccomp_release(ctx);
  }
};

void check(int rc, const std::string& what) {
  if (rc != 0) fail("sandbox", "libseccomp refused {} (error {})", what, -rc);
}

// Builds the filter; `refused` (if given) receives what it refuses.
Context build(std::vector<std::string>* refused) {
  Context c;
  c.ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!c.ctx) fail("sandbox", "libseccomp could not start a filter");
  for (const char* name : kRefused) {
    const int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;
    check(seccomp_rule_add(c.ctx, SCMP_ACT_ERRNO(EPERM), nr, 0), name);
    if (refused) refused->push_back(name);
  }
  // libseccomp compares arguments with ==: one masked rule per namespace flag.
  for (uint64_t flag : kNamespaceFlags)
    check(seccomp_rule_add(c.ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                           scmp_arg_cmp{0, SCMP_CMP_MASKED_EQ, flag, flag}),
          "clone(CLONE_NEW*)");
  if (refused) refused->push_back("clone(CLONE_NEW*)");
  check(seccomp_rule_add(c.ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0), "clone3");
  if (refused) refused->push_back("clone3 (ENOSYS)");
  check(seccomp_rule_add(c.ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1, scmp_arg_cmp{1, SCMP_CMP_EQ, TIOCSTI, 0}),
        "ioctl(TIOCSTI)");
  if (refused) refused->push_back("ioctl(TIOCSTI)");
  return c;
}

}  // namespace

std::string seccomp_filter_bpf() {
  Context c = build(nullptr);
  const int fd = memfd_create("gpueval-seccomp", MFD_CLOEXEC);
  if (fd < 0) fail("sandbox", "memfd_create: {}", std::strerror(errno));
  std::unique_ptr<int, void (*)(int*)> closer(new int(fd), [](int* p) {
    ::close(*p);
    delete p;
  });
  check(seccomp_export_bpf(c.ctx, fd), "exporting the filter");
  const off_t length = ::lseek(fd, 0, SEEK_END);
  std::string bpf(static_cast<size_t>(length > 0 ? length : 0), '\0');
  if (length <= 0 || ::pread(fd, bpf.data(), bpf.size(), 0) != length) fail("sandbox", "the exported filter is empty");
  return bpf;
}

std::vector<std::string> seccomp_refused_calls() {
  std::vector<std::string> refused;
  build(&refused);
  return refused;
}

}  // namespace gpueval
