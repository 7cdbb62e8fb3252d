// install_fake_root_filter() (see seccomp.h), with libseccomp: every listed call answers 0 without
// doing anything (SCMP_ACT_ERRNO(0)); mknod/mknodat only for character and block devices, so FIFOs
// and regular files are still created for real.
#include "runtime/seccomp.h"

#include <seccomp.h>
#include <sys/stat.h>

#include <array>
#include <memory>

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

}  // namespace

Status install_fake_root_filter() {
  std::unique_ptr<void, FilterDeleter> ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) return Status::error("seccomp_init failed", ENOMEM);
  for (const char* name : kNoOpCalls) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    SLIPWAY_TRY(rule(ctx.get(), nr, 0, nullptr));
  }
  SLIPWAY_TRY(add_device_mknod_rules(ctx.get()));
  int rc = seccomp_load(ctx.get());
  if (rc != 0) return Status::from_errno("load the --container-remap-root seccomp filter", -rc);
  return Status();
}

}  // namespace slipway::launcher
