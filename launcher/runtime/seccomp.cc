// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// compile_fake_root_filter() and install_seccomp() (see seccomp.h). With libseccomp every listed
// call answers 0 without doing anything (SCMP_ACT_ERRNO(0)); mknod/mknodat only for character and
// block devices, so FIFOs and regular files are still created for real. seccomp_export_bpf() writes
// the program libseccomp generated (architecture check included) to a pipe we read back.
#include "runtime/seccomp.h"

#include <fcntl.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <memory>

#include "common/file_util.h"
#include "common/lazy_library.h"
#include "common/unique_fd.h"

namespace slipway::launcher {

namespace {
SLIPWAY_LAZY_LIBRARY(seccomp_library, "libseccomp.so.2", "libseccomp2 (Debian) or libseccomp (RHEL)")
}  // namespace

}  // namespace slipway::launcher

using Ctx = scmp_filter_ctx;
#define SLIPWAY_SECCOMP(RET, NAME, PARAMS, ARGS, FAIL) \
  SLIPWAY_LAZY_FORWARD(slipway::launcher::seccomp_library(), RET, NAME, PARAMS, ARGS, FAIL)
SLIPWAY_SECCOMP(Ctx, seccomp_init, (uint32_t action), (action), nullptr)
SLIPWAY_LAZY_FORWARD_VOID(slipway::launcher::seccomp_library(), seccomp_release, (Ctx c), (c))
SLIPWAY_SECCOMP(int, seccomp_syscall_resolve_name, (const char* name), (name), __NR_SCMP_ERROR)
SLIPWAY_SECCOMP(int, seccomp_rule_add_array,
                (Ctx c, uint32_t action, int nr, unsigned int n, const scmp_arg_cmp* args),
                (c, action, nr, n, args), -ELIBACC)
SLIPWAY_SECCOMP(int, seccomp_export_bpf, (const Ctx c, int fd), (c, fd), -ELIBACC)

namespace slipway::launcher {
namespace {

constexpr std::array kNoOpCalls = {
    "chown",     "fchown",    "lchown",    "fchownat",  "setuid",    "setgid",
    "setreuid",  "setregid",  "setresuid", "setresgid", "setgroups", "setfsuid",
    "setfsgid",  "capset",
};

struct FilterDeleter {
  void operator()(scmp_filter_ctx ctx) const { seccomp_release(ctx); }
};

Status rule(scmp_filter_ctx ctx, int nr, unsigned count, const scmp_arg_cmp* args) {
  int rc = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(0), nr, count, args);
  return rc == 0 ? Status() : Status::from_errno("seccomp_rule_add", -rc);
}

// mknod(path, mode, dev): mode is argument 1; mknodat(dirfd, path, mode, dev): argument 2.
Status add_device_mknod_rules(scmp_filter_ctx ctx) {
  for (mode_t type : {S_IFCHR, S_IFBLK}) {
    scmp_arg_cmp mknod_arg = SCMP_A1(SCMP_CMP_MASKED_EQ, S_IFMT, type);
    scmp_arg_cmp mknodat_arg = SCMP_A2(SCMP_CMP_MASKED_EQ, S_IFMT, type);
    SLIPWAY_TRY(rule(ctx, SCMP_SYS(mknod), 1, &mknod_arg));
    SLIPWAY_TRY(rule(ctx, SCMP_SYS(mknodat), 1, &mknodat_arg));
  }
  return Status();
}

// The program libseccomp generates for `ctx`, read back through a pipe (a few hundred bytes: far
// below the pipe's capacity, so the export never blocks).
Result<SeccompProgram> export_program(scmp_filter_ctx ctx) {
  int fds[2];
  SLIPWAY_SYS(pipe2(fds, O_CLOEXEC), "pipe for the seccomp filter");
  UniqueFd rd(fds[0]), wr(fds[1]);
  int rc = seccomp_export_bpf(ctx, wr.get());
  if (rc != 0) return Status::from_errno("export the seccomp filter", -rc);
  wr.reset();
  std::vector<char> bytes;
  char buf[4096];
  for (ssize_t n; (n = read(rd.get(), buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::from_errno("read the seccomp filter", errno);
    bytes.insert(bytes.end(), buf, buf + n);
  }
  if (bytes.empty() || bytes.size() % sizeof(sock_filter) != 0)
    return Status::error("libseccomp exported a malformed filter", EINVAL);
  SeccompProgram p;
  p.instructions.resize(bytes.size() / sizeof(sock_filter));
  std::memcpy(p.instructions.data(), bytes.data(), bytes.size());
  return p;
}

}  // namespace

Result<SeccompProgram> compile_fake_root_filter() {
  SLIPWAY_TRY(seccomp_library().load().context("--container-remap-root needs libseccomp"));
  std::unique_ptr<void, FilterDeleter> ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) return Status::error("seccomp_init failed", ENOMEM);
  for (const char* name : kNoOpCalls) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    SLIPWAY_TRY(rule(ctx.get(), nr, 0, nullptr));
  }
  SLIPWAY_TRY(add_device_mknod_rules(ctx.get()));
  return export_program(ctx.get());
}

Result<SeccompProgram> cached_fake_root_filter(const std::string& cache_file) {
  if (auto bytes = read_file_limited(cache_file, 64 << 10);
      bytes.ok() && !bytes->empty() && bytes->size() % sizeof(sock_filter) == 0) {
    SeccompProgram p;
    p.instructions.resize(bytes->size() / sizeof(sock_filter));
    std::memcpy(p.instructions.data(), bytes->data(), bytes->size());
    return p;
  }
  auto program = compile_fake_root_filter();
  SLIPWAY_TRY(program);
  (void)write_file_atomic(cache_file,
                          std::string(reinterpret_cast<const char*>(program->instructions.data()),
                                      program->instructions.size() * sizeof(sock_filter)));
  return program;
}

Status install_seccomp(const SeccompProgram& program) {
  struct sock_fprog prog = {};
  prog.len = static_cast<unsigned short>(program.instructions.size());
  prog.filter = const_cast<sock_filter*>(program.instructions.data());
  SLIPWAY_SYS(static_cast<int>(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog)),
              "load the container's seccomp filter");
  return Status();
}

Status install_fake_root_filter() {
  auto program = compile_fake_root_filter();
  SLIPWAY_TRY(program);
  return install_seccomp(*program);
}

}  // namespace slipway::launcher
