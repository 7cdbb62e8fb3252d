// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// `slipway run` under srun: the node's step directory (see run_step.h).
#include "cli/run_step.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>

#include "cli/cli_common.h"
#include "common/file_util.h"
#include "dl/dl_env.h"
#include "options/container_plan.h"
#include "runtime/container.h"

namespace slipway::launcher::cli {

std::string host_name() {
  char h[256] = {};
  gethostname(h, sizeof h - 1);
  return h;
}

// Under srun, this node's directory for the step in `cache`; empty when not under srun.
std::string step_run_dir(const std::string& cache) {
  const char* job = getenv("SLURM_JOB_ID");
  const char* step = getenv("SLURM_STEP_ID");
  if (!job || !step) return "";
  return cache + "/run/" + host_name() + "-" + job + "." + step;
}

// The step directory's `lock`, exclusively, on a directory that is still there: the holder of a
// step whose last task just left removes the directory while holding that lock, and a task that
// was waiting for it then starts afresh.
Result<FileLock> lock_step_dir(const std::string& run_dir) {
  for (int attempt = 0;; ++attempt) {
    SLIPWAY_TRY(make_private_dirs(run_dir));
    auto lock = FileLock::acquire(run_dir + "/lock", FileLock::Mode::kExclusive);
    if (!lock.ok() || lock->is_linked()) return lock;
    if (attempt == 10)
      return Status::error("the step directory " + run_dir + " keeps being removed under us", EAGAIN);
  }
}

// The tasks of a node resolve a tag once per step: the first to take the step's lock imports the
// image and records "TEXT\nDIGEST\n" in `image`; the others import that digest, which costs no
// registry request once it is cached. The registry sees one manifest request per node and step
// instead of one per task, and the tasks of a node run the same bytes even if the tag moves
// meanwhile. (Across nodes only the plugin, which resolves the tag in srun, pins a job's digest.)
Result<ImportedImage> import_for_step(const std::string& text, const std::string& run_dir,
                                      const ImportOptions& opts) {
  auto ref = parse_text_ref(text);
  SLIPWAY_TRY(ref);
  if (ref->kind != ImageRef::Kind::kRegistry || !ref->digest.empty()) return import_image(*ref, opts);
  auto lock = lock_step_dir(run_dir);
  SLIPWAY_TRY(lock);
  const std::string pin = run_dir + "/image";
  if (auto pinned = read_file_limited(pin, 4096); pinned.ok()) {
    size_t nl = pinned->find('\n');
    std::string digest = nl == std::string::npos ? "" : pinned->substr(nl + 1);
    if (!digest.empty() && digest.back() == '\n') digest.pop_back();
    if (pinned->compare(0, nl, text) == 0 && is_valid_digest(digest)) {
      ref->digest = digest;
      return import_image(*ref, opts);
    }
  }
  auto img = import_image(*ref, opts);
  SLIPWAY_TRY(img);
  SLIPWAY_TRY(write_file_atomic(pin, text + "\n" + img->manifest_digest + "\n"));
  return img;
}

// Under srun the node's first task runs the entrypoint and records the outcome in the step's
// directory for the others: "ok\n" and the exported variables, or "failed\n" and the message.
Status record_entrypoint(const std::string& run_dir, const Result<EntrypointRun>& r) {
  std::string text = r.ok() ? "ok\n" : "failed\n" + r.status().message();
  if (r.ok())
    for (const auto& kv : r->exported) text += kv + '\0';
  return write_file_atomic(run_dir + "/entrypoint", text);
}

Result<std::vector<std::string>> recorded_entrypoint(const std::string& run_dir) {
  auto text = read_file_limited(run_dir + "/entrypoint", 1 << 20);
  if (!text.ok()) return text.status().context("the image's entrypoint did not record its outcome");
  if (text->rfind("failed\n", 0) == 0) return Status::error(text->substr(7), EIO);
  std::vector<std::string> vars;
  for (size_t i = 3; i < text->size();) {
    size_t j = text->find('\0', i);
    if (j == std::string::npos) break;
    vars.push_back(text->substr(i, j - i));
    i = j + 1;
  }
  return vars;
}

void remove_run_dir(const std::string& dir) {
  // `lock` last: a task that arrives meanwhile waits on it (the remover holds it), then sees it
  // unlinked and starts afresh; it never finds a new `lock` beside the old `users`.
  for (const char* f : {"/holder", "/users", "/image", "/entrypoint", "/finished", "/lock"})
    unlink((dir + f).c_str());
  rmdir(dir.c_str());
}

// Run directories of this node's earlier steps whose holder was killed before it could remove
// them (SIGKILL: `scancel -s KILL`, an OOM kill, a node's daemons stopped): nobody holds their
// `lock` or `users`, and the holder recorded there is gone. The first task of the next step on
// the node removes them; a directory in use, or whose holder is still about to remove it, stays.
void sweep_stale_run_dirs(const std::string& own) {
  const std::string parent = own.substr(0, own.rfind('/')), mine = host_name() + "-";
  std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(parent.c_str()), closedir);
  if (!d) return;
  while (const dirent* e = readdir(d.get())) {
    const std::string name = e->d_name, dir = parent + "/" + name;
    if (name.rfind(mine, 0) != 0 || dir == own) continue;  // the cache may be shared by nodes
    UniqueFd lock(open((dir + "/lock").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!lock.valid() || flock(lock.get(), LOCK_EX | LOCK_NB) != 0) continue;
    UniqueFd users(open((dir + "/users").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (users.valid() && flock(users.get(), LOCK_EX | LOCK_NB) != 0) continue;
    pid_t pid = 0;
    std::ifstream(dir + "/holder") >> pid;
    if (pid > 0 && (kill(pid, 0) == 0 || errno == EPERM)) continue;
    remove_run_dir(dir);
  }
}

// The step's tasks on its first node (the one that saves); 1 if Slurm did not say.
int tasks_on_first_node() {
  const char* v = getenv("SLURM_STEP_TASKS_PER_NODE");
  if (!v) v = getenv("SLURM_TASKS_PER_NODE");
  auto n = tasks_on_node(v ? v : "", 0);
  return n.ok() && *n > 0 ? *n : 1;
}

// Whether this task is the node's last in the step to finish: each finishing task counts itself in
// `finished`, under the step's `lock`; the one that makes the count reach the node's task count
// keeps holding `lock` (in LOCK), so the holder, which takes `lock` before it looks at `users`,
// keeps the container until this task is done with it.
bool last_of_step(const std::string& run_dir, std::optional<FileLock>& lock) {
  auto l = FileLock::acquire(run_dir + "/lock", FileLock::Mode::kExclusive);
  if (!l.ok() || !l->is_linked()) return false;
  int finished = 0;
  if (auto text = read_file_limited(run_dir + "/finished", 64); text.ok())
    finished = std::atoi(text->c_str());
  ++finished;
  if (!write_file_atomic(run_dir + "/finished", std::to_string(finished) + "\n").ok()) return false;
  lock = std::move(*l);
  return finished == tasks_on_first_node();
}

}  // namespace slipway::launcher::cli
