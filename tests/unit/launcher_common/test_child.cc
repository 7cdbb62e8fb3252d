// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Unit tests for child processes (common/child.h): exit status and report, captured output and
// stderr, the deadline, what a child inherits of signals, the job user, detached daemons, and
// that a Child never leaves a zombie or an orphan behind.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "check_main.h"
#include "common/child.h"
#include "common/run_tool.h"

using slipway::launcher::Child;
using slipway::launcher::ChildExit;
using slipway::launcher::ChildOptions;
using slipway::launcher::fork_child;
using slipway::launcher::run_tool;
using slipway::launcher::spawn;

namespace {

void say(int fd, const std::string& s) { (void)!write(fd, s.data(), s.size()); }

bool gone(pid_t pid) { return kill(pid, 0) == -1 && errno == ESRCH; }

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

START_TEST(exit_status_and_report_come_back) {
  auto c = spawn({}, [](int fd) {
    say(fd, "half way");
    return 3;
  });
  ck_assert(c.ok());
  ChildExit e = c->wait();
  ck_assert(!e.ok());
  ck_assert_int_eq(e.code(), 3);
  ck_assert_str_eq(e.report.c_str(), "half way");
  ck_assert_str_eq(e.why().c_str(), "exit status 3");
  auto ok = spawn({}, [](int) { return 0; });
  ck_assert(ok.ok() && ok->wait().ok());
}
END_TEST

START_TEST(a_signal_is_named) {
  auto c = spawn({}, [](int) {
    raise(SIGSEGV);
    return 0;
  });
  ChildExit e = c->wait();
  ck_assert_int_eq(e.code(), 128 + SIGSEGV);
  ck_assert_str_eq(e.why().c_str(), "killed by signal 11 (SIGSEGV)");
}
END_TEST

START_TEST(output_and_the_last_stderr_line_are_captured) {
  auto c = spawn({.capture_output = true}, [](int) {
    execl("/bin/sh", "sh", "-c", "echo out; echo err >&2; exit 4", (char*)nullptr);
    return 127;
  });
  ChildExit e = c->wait();
  ck_assert_int_eq(e.code(), 4);
  ck_assert_str_eq(e.output.c_str(), "out\nerr\n");
  auto s = spawn({.capture_stderr = true}, [](int) {
    execl("/bin/sh", "sh", "-c", "echo one >&2; echo two >&2; echo >&2; exit 1", (char*)nullptr);
    return 127;
  });
  ck_assert_str_eq(s->wait().stderr_line.c_str(), "two");
  // run_tool's errors are the tool's last line on stderr, or its status.
  ck_assert_str_eq(run_tool({"/bin/sh", "-c", "echo broken >&2; exit 2"}, 1, -1, 1 << 20).c_str(),
                   "broken");
  ck_assert_str_eq(run_tool({"/bin/sh", "-c", "exit 5"}, 1, -1, 1 << 20).c_str(), "exit status 5");
}
END_TEST

START_TEST(a_child_past_its_deadline_is_killed) {
  const auto t = std::chrono::steady_clock::now();
  auto c = spawn({}, [](int) {
    sleep(30);
    return 0;
  });
  const pid_t pid = c->pid();
  ChildExit e = c->wait(0.3);
  ck_assert(e.timed_out);
  ck_assert(!e.ok());
  ck_assert_int_eq(e.code(), 128 + SIGKILL);
  ck_assert(seconds_since(t) < 5);
  ck_assert(gone(pid));
}
END_TEST

// The parent ignores SIGTERM, blocks SIGUSR1 and catches SIGHUP (as a daemon such as slurmstepd
// may): a child starts with none of that; the user's command (keep_signals) keeps the ignored ones.
void on_hup(int) {}
START_TEST(signals_start_from_the_defaults_unless_kept) {
  signal(SIGTERM, SIG_IGN);
  signal(SIGHUP, on_hup);
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  sigprocmask(SIG_BLOCK, &usr1, nullptr);
  auto probe = [](int fd) {
    struct sigaction term, hup;
    sigaction(SIGTERM, nullptr, &term);
    sigaction(SIGHUP, nullptr, &hup);
    sigset_t mask;
    sigprocmask(SIG_SETMASK, nullptr, &mask);
    say(fd, std::string(term.sa_handler == SIG_IGN ? "ign" : term.sa_handler == SIG_DFL ? "dfl" : "fn") +
                " " + (hup.sa_handler == SIG_DFL ? "dfl" : "fn") + " " +
                (sigismember(&mask, SIGUSR1) ? "blocked" : "open"));
    return 0;
  };
  ck_assert_str_eq(spawn({}, probe)->wait().report.c_str(), "dfl dfl open");
  ck_assert_str_eq(spawn({.keep_signals = true}, probe)->wait().report.c_str(), "ign fn blocked");
  sigprocmask(SIG_UNBLOCK, &usr1, nullptr);
  signal(SIGTERM, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
}
END_TEST

START_TEST(a_child_going_out_of_scope_is_killed_and_reaped) {
  pid_t pid;
  {
    auto c = spawn({}, [](int) {
      pause();
      return 0;
    });
    pid = c->pid();
    ck_assert(kill(pid, 0) == 0);
  }
  ck_assert(gone(pid));  // not even a zombie
}
END_TEST

START_TEST(read_report_returns_while_the_child_keeps_running) {
  const auto t = std::chrono::steady_clock::now();
  auto c = spawn({.name = "slw-test-child"}, [](int fd) {
    say(fd, "ready");
    close(fd);
    pause();
    return 0;
  });
  ck_assert_str_eq(c->read_report(10).c_str(), "ready");
  ck_assert(seconds_since(t) < 5);
  ck_assert(kill(c->pid(), 0) == 0);
  char comm[64] = {};
  FILE* f = fopen(("/proc/" + std::to_string(c->pid()) + "/comm").c_str(), "r");
  ck_assert_ptr_nonnull(f);
  ck_assert_ptr_nonnull(fgets(comm, sizeof comm, f));
  fclose(f);
  ck_assert_str_eq(comm, "slw-test-child\n");
}
END_TEST

START_TEST(a_detached_child_runs_in_its_own_session_and_outlives_the_handle) {
  pid_t daemon = 0;
  {
    auto c = spawn({.detach = true}, [](int fd) {
      say(fd, std::to_string(getpid()) + " " + std::to_string(getsid(0)));
      close(fd);
      pause();
      return 0;
    });
    ck_assert(c.ok());
    ck_assert_int_eq(c->pid(), -1);
    const std::string r = c->read_report(10);
    daemon = std::stoi(r);
    ck_assert_int_ne(std::stoi(r.substr(r.find(' ') + 1)), getsid(0));  // a session of its own
  }
  ck_assert(kill(daemon, 0) == 0);  // not ours to kill
  kill(daemon, SIGKILL);
}
END_TEST

START_TEST(a_child_dies_with_its_parent) {
  auto middle = spawn({}, [](int fd) {
    auto inner = spawn({.die_with_parent = true}, [](int) {
      pause();
      return 0;
    });
    say(fd, std::to_string(inner->release()));
    return 0;  // _exit: the inner child's parent is gone
  });
  ChildExit e = middle->wait();
  const pid_t inner = std::stoi(e.report);
  for (int i = 0; i < 200 && !gone(inner); ++i) {
    usleep(10000);
    waitpid(inner, nullptr, WNOHANG);  // reparented to us if we are a subreaper
  }
  ck_assert(gone(inner) || kill(inner, 0) == 0);
  // Reparented to init (or to a subreaper, which reaps it): it got SIGKILL either way.
  char state = 0;
  if (FILE* f = fopen(("/proc/" + std::to_string(inner) + "/stat").c_str(), "r")) {
    ck_assert(fscanf(f, "%*d %*s %c", &state) == 1);
    fclose(f);
  }
  ck_assert(state == 0 || state == 'Z');
}
END_TEST

START_TEST(the_child_becomes_the_job_user) {
  if (getuid() != 0) return;  // needs root, as slurmstepd has
  auto c = spawn({.uid = 65534, .gid = 65534}, [](int fd) {
    gid_t groups[8];
    const int n = getgroups(8, groups);
    uid_t r, e, s;
    getresuid(&r, &e, &s);
    say(fd, std::to_string(r) + " " + std::to_string(e) + " " + std::to_string(s) + " " +
                std::to_string(getgid()) + " " + std::to_string(n) + " " +
                std::to_string(n > 0 ? groups[0] : 0));
    return 0;
  });
  ck_assert_str_eq(c->wait().report.c_str(), "65534 65534 65534 65534 1 65534");
}
END_TEST

// Changing ids clears the parent-death signal (commit_creds()): it must be set after them.
START_TEST(a_child_that_became_the_user_still_dies_with_its_parent) {
  if (getuid() != 0) return;
  auto middle = spawn({}, [](int fd) {
    auto inner = spawn({.uid = 65534, .gid = 65534, .die_with_parent = true}, [](int report) {
      say(report, "up");  // set up: the user already
      close(report);
      pause();
      return 0;
    });
    if (inner->read_report(10) != "up") return 1;
    say(fd, std::to_string(inner->release()));
    return 0;
  });
  const pid_t inner = std::stoi(middle->wait().report);
  bool dead = false;
  for (int i = 0; i < 200 && !dead; ++i) {
    char state = 0;
    FILE* f = fopen(("/proc/" + std::to_string(inner) + "/stat").c_str(), "r");
    if (!f) break;
    dead = fscanf(f, "%*d %*s %c", &state) == 1 && state == 'Z';
    fclose(f);
    if (!dead) usleep(10000);
  }
  ck_assert(dead || gone(inner));
  kill(inner, SIGKILL);
}
END_TEST

START_TEST(fork_child_returns_into_the_child) {
  auto c = fork_child({});
  ck_assert(c.ok());
  if (c->pid() == 0) _exit(7);
  ck_assert_int_eq(c->wait().code(), 7);
}
END_TEST

START_TEST(an_ignored_sigchld_gives_an_unknown_status_not_success) {
  signal(SIGCHLD, SIG_IGN);  // children are reaped by the kernel: waitpid has nothing to give
  auto c = spawn({}, [](int) { return 0; });
  ChildExit e = c->wait();
  signal(SIGCHLD, SIG_DFL);
  ck_assert(!e.ok());
  ck_assert_int_eq(e.code(), 255);
}
END_TEST

// The child is gone (reaped by the kernel) before wait() starts: no pidfd can be opened for it.
START_TEST(an_ignored_sigchld_and_a_child_already_gone_do_not_hang_wait) {
  signal(SIGCHLD, SIG_IGN);
  auto c = spawn({}, [](int) { return 0; });
  const pid_t pid = c->pid();
  for (int i = 0; i < 500 && ::kill(pid, 0) == 0; ++i) usleep(10000);
  ChildExit e = c->wait(20);
  signal(SIGCHLD, SIG_DFL);
  ck_assert(!e.timed_out);
  ck_assert_int_eq(e.code(), 255);
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("child");
  TCase* tc = tcase_create("child");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, exit_status_and_report_come_back);
  tcase_add_test(tc, a_signal_is_named);
  tcase_add_test(tc, output_and_the_last_stderr_line_are_captured);
  tcase_add_test(tc, a_child_past_its_deadline_is_killed);
  tcase_add_test(tc, signals_start_from_the_defaults_unless_kept);
  tcase_add_test(tc, a_child_going_out_of_scope_is_killed_and_reaped);
  tcase_add_test(tc, read_report_returns_while_the_child_keeps_running);
  tcase_add_test(tc, a_detached_child_runs_in_its_own_session_and_outlives_the_handle);
  tcase_add_test(tc, a_child_dies_with_its_parent);
  tcase_add_test(tc, the_child_becomes_the_job_user);
  tcase_add_test(tc, a_child_that_became_the_user_still_dies_with_its_parent);
  tcase_add_test(tc, fork_child_returns_into_the_child);
  tcase_add_test(tc, an_ignored_sigchld_gives_an_unknown_status_not_success);
  tcase_add_test(tc, an_ignored_sigchld_and_a_child_already_gone_do_not_hang_wait);
  suite_add_tcase(s, tc);
  return s;
}
