// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Child processes: every process Slipway forks starts here (the import, the holder, tools such as
// mksquashfs and squashfuse_ll, the entrypoint, the save, the epilog's removal, a task's command).
// One place decides what a child inherits and how the parent waits for it:
//   - in the child, between fork and the body, only async-signal-safe calls (the caller may be
//     slurmstepd, which has threads);
//   - the signal mask is emptied and every handler or ignored signal is back to SIG_DFL, unless
//     the child is the user's own command (ChildOptions::keep_signals), which gets what its
//     caller was given, as a shell passes it on;
//   - the child may become the job user entirely before its body runs, and die with its parent;
//   - the parent waits with EINTR retried, an optional deadline (then SIGKILL), and gets the exit
//     status, what the child reported on its report pipe, and the last line of its stderr;
//   - a Child that goes out of scope kills and reaps a child still running: no zombie, no orphan.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/unique_fd.h"

namespace slipway::launcher {

struct ChildOptions {
  const char* name = nullptr;  // PR_SET_NAME: what ps and top show admins (and tests)
  // When uid is set: the child becomes this user entirely (its only group GID) before the body.
  uid_t uid = static_cast<uid_t>(-1);
  gid_t gid = static_cast<gid_t>(-1);
  bool die_with_parent = false;  // SIGKILL when the parent dies (also if it died before the fork returned)
  bool keep_signals = false;     // the user's command: mask and ignored signals as the caller's
  bool capture_stderr = false;   // fd 2 into a memfd: ChildExit::stderr_line
  bool capture_output = false;   // fds 1 and 2 into a pipe the parent drains: ChildExit::output
  // A daemon: the child starts a session of its own and forks the body off; the parent reaps the
  // intermediate at once. Its pid is whatever the body reports; it is never killed from here.
  bool detach = false;
};

struct ChildExit {
  int status = 0;           // waitpid(2)'s status
  bool timed_out = false;   // still running at the deadline: killed with SIGKILL
  std::string report;       // what it wrote on its report descriptor (at most 1 MiB kept)
  std::string output;       // capture_output: its stdout and stderr (at most 1 MiB kept)
  std::string stderr_line;  // capture_stderr: the last non-empty line of its stderr
  // Exited with status 0 before any deadline.
  bool ok() const;
  // Its exit status, or 128 + the signal that killed it, as a shell reports it.
  int code() const;
  // "exit status N" or "killed by signal N (NAME)".
  std::string why() const;
};

class Child {
 public:
  Child() = default;
  Child(Child&& o) noexcept;
  Child& operator=(Child&& o) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  // A child still running (not released) is killed with SIGKILL and reaped.
  ~Child();

  // 0 in the child of fork_child(); -1 for a detached daemon (its pid is in its report).
  pid_t pid() const { return pid_; }
  // The parent's end of the report pipe (-1 once wait() has read it).
  int report_fd() const { return report_.get(); }
  // Everything the child writes on its report descriptor until it closes it (or exits, or the
  // deadline TIMEOUT_S passes; 0: none): for a child that reports and then keeps running.
  std::string read_report(double timeout_s = 0);
  // Waits for the child to exit, reading its report (and output) meanwhile; one still running
  // TIMEOUT_S seconds from now (0: no limit) is killed with SIGKILL.
  ChildExit wait(double timeout_s = 0);
  // Leaves the child running and to the caller: neither killed nor reaped here.
  pid_t release();

 private:
  friend Result<Child> fork_child(const ChildOptions& options);
  friend Result<Child> spawn(const ChildOptions& options,
                             const std::function<int(int report_fd)>& body);
  // Reads the report and output pipes until the child exits (or, with UNTIL_REPORT_EOF, until
  // it closes its report descriptor) or the deadline; fills OUT and returns false at the deadline.
  bool pump(double timeout_s, bool until_report_eof, ChildExit& out);
  pid_t pid_ = -1;
  int status_ = 0;  // waitpid's, once reaped (-1: it was not our child to reap)
  bool reaped_ = false;
  UniqueFd report_;
  UniqueFd output_;
  UniqueFd stderr_;
};

// Forks. In the child, OPTIONS are applied, BODY runs with the write end of the report pipe (close
// on exec) and the child _exits with what BODY returns; a setup that failed (the user could not
// be become) exits 125 with the reason on the report pipe. The parent gets the Child.
Result<Child> spawn(const ChildOptions& options, const std::function<int(int report_fd)>& body);

// For the one child that must return into its caller instead of running a body (slurmstepd's
// task: task_init returns, then slurmstepd execs the command in it): forks with OPTIONS applied
// (not capture_* nor detach); in the child the Child returned has pid() 0 and owns nothing.
Result<Child> fork_child(const ChildOptions& options);

// waitpid(2) for PID, EINTR retried; its status, or -1 when it is not (or no longer) our child.
int reap(pid_t pid);

// The last non-empty line of what FD (a memfd or file a child wrote its stderr to) holds.
std::string last_line(int fd);

}  // namespace slipway::launcher
