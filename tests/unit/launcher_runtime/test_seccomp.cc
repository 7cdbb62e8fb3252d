// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Tests for the --container-remap-root seccomp filter: root-only calls succeed without effect,
// everything else behaves as before. Runs in a forked child with no_new_privs (no root needed).
#include <dlfcn.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/seccomp.h"
#include "check_main.h"

namespace {

// Runs body() in a child that dropped to nobody (when root) and installed the filter.
template <class F>
int with_filter(F body) {
  pid_t pid = fork();
  if (pid == 0) {
    if (geteuid() == 0 && (setgid(65534) || setuid(65534))) _exit(90);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(91);
    auto st = slipway::launcher::install_fake_root_filter();
    if (!st.ok()) {
      fprintf(stderr, "%s\n", st.message().c_str());
      _exit(92);
    }
    _exit(body());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

START_TEST(root_only_calls_succeed_as_no_ops) {
  char dir[] = "/tmp/slw-seccomp-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  chmod(dir, 0777);
  std::string base = dir;
  int rc = with_filter([&] {
    std::string f = base + "/file";
    int fd = open(f.c_str(), O_CREAT | O_WRONLY, 0644);
    if (fd < 0) return 1;
    close(fd);
    if (chown(f.c_str(), 0, 0) != 0 || lchown(f.c_str(), 0, 0) != 0) return 2;
    struct stat st;
    if (stat(f.c_str(), &st) != 0 || st.st_uid != getuid()) return 3;  // nothing changed
    if (setuid(0) != 0 || setgid(0) != 0 || setgroups(0, nullptr) != 0) return 4;
    if (getuid() == 0 && geteuid() == 0) return 5;  // still not root
    if (mknod((base + "/dev").c_str(), S_IFCHR | 0600, makedev(1, 3)) != 0) return 6;
    if (access((base + "/dev").c_str(), F_OK) == 0) return 7;  // no device node was made
    if (mknod((base + "/fifo").c_str(), S_IFIFO | 0600, 0) != 0) return 8;
    if (stat((base + "/fifo").c_str(), &st) != 0 || !S_ISFIFO(st.st_mode)) return 9;  // real
    return 0;
  });
  std::string cmd = "rm -rf " + base;
  (void)!system(cmd.c_str());
  ck_assert_int_eq(rc, 0);
}
END_TEST

START_TEST(other_calls_still_fail_normally) {
  int rc = with_filter([] {
    if (open("/nonexistent/x", O_RDONLY) != -1 || errno != ENOENT) return 1;
    if (unlink("/etc/passwd") != -1 || (errno != EACCES && errno != EPERM)) return 2;
    return 0;
  });
  ck_assert_int_eq(rc, 0);
}
END_TEST

// The filter is compiled outside the container and installed inside, where no library of the host
// can be found: here a chroot into an empty directory (through a user namespace, no root needed),
// in a process that never loaded libseccomp (the program comes from another process).
static slipway::launcher::SeccompProgram program_from_another_process() {
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    auto program = slipway::launcher::compile_fake_root_filter();
    if (!program.ok()) _exit(1);
    size_t n = program->instructions.size() * sizeof(sock_filter);
    _exit(write(fds[1], program->instructions.data(), n) == static_cast<ssize_t>(n) ? 0 : 2);
  }
  close(fds[1]);
  slipway::launcher::SeccompProgram p;
  sock_filter insn;
  while (read(fds[0], &insn, sizeof insn) == static_cast<ssize_t>(sizeof insn))
    p.instructions.push_back(insn);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return p;
}

START_TEST(compiled_filter_installs_where_no_library_is_found) {
  const auto program = program_from_another_process();
  char dir[] = "/tmp/slw-seccomp-empty-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  chmod(dir, 0777);
  pid_t pid = fork();
  if (pid == 0) {
    if (geteuid() == 0 && (setgid(65534) || setuid(65534))) _exit(90);
    if (dlopen("libseccomp.so.2", RTLD_NOW | RTLD_NOLOAD) != nullptr) _exit(91);
    if (unshare(CLONE_NEWUSER) != 0) _exit(98);  // Slipway needs user namespaces anyway
    if (chroot(dir) != 0 || chdir("/") != 0) _exit(92);
    if (access("/lib", F_OK) == 0) _exit(93);  // really empty
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(94);
    if (!slipway::launcher::install_seccomp(program).ok()) _exit(95);
    int fd = open("/file", O_CREAT | O_WRONLY, 0644);
    if (fd < 0) _exit(96);
    close(fd);
    // An unmapped owner would fail with EINVAL; the filter makes it a no-op.
    _exit(chown("/file", 12345, 12345) == 0 ? 0 : 97);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::string cmd = std::string("rm -rf ") + dir;
  (void)!system(cmd.c_str());
  ck_assert(WIFEXITED(status));
  ck_assert_int_eq(WEXITSTATUS(status), 0);
}
END_TEST

// slipway run reads the program from the user's cache instead of compiling it at every start: the
// first call writes the file, later ones read the same program back; a damaged file is rewritten.
START_TEST(cached_filter_is_written_once_and_read_back) {
  char dir[] = "/tmp/slw-seccomp-cache-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  const std::string file = std::string(dir) + "/filter.bpf";
  auto compiled = slipway::launcher::compile_fake_root_filter();
  ck_assert(compiled.ok());
  const size_t bytes = compiled->instructions.size() * sizeof(sock_filter);
  auto first = slipway::launcher::cached_fake_root_filter(file);
  ck_assert(first.ok());
  struct stat st;
  ck_assert_int_eq(stat(file.c_str(), &st), 0);
  ck_assert_int_eq(st.st_size, static_cast<off_t>(bytes));
  // A file that is not a program's worth of instructions is compiled and written again.
  FILE* f = fopen(file.c_str(), "w");
  fputs("junk", f);
  fclose(f);
  auto second = slipway::launcher::cached_fake_root_filter(file);
  ck_assert(second.ok());
  ck_assert_int_eq(second->instructions.size(), compiled->instructions.size());
  ck_assert_int_eq(memcmp(second->instructions.data(), compiled->instructions.data(), bytes), 0);
  ck_assert_int_eq(stat(file.c_str(), &st), 0);
  ck_assert_int_eq(st.st_size, static_cast<off_t>(bytes));
  std::string cmd = std::string("rm -rf ") + dir;
  (void)!system(cmd.c_str());
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("seccomp");
  TCase* tc = tcase_create("fake_root");
  tcase_add_test(tc, root_only_calls_succeed_as_no_ops);
  tcase_add_test(tc, other_calls_still_fail_normally);
  tcase_add_test(tc, compiled_filter_installs_where_no_library_is_found);
  tcase_add_test(tc, cached_filter_is_written_once_and_read_back);
  suite_add_tcase(s, tc);
  return s;
}
