// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// `slipway run` under srun: the node's directory for the step, <cache>/run/<node>-<job>.<step>/,
// through which the tasks of a node share one container (run.cc). Its files:
//   lock        flock(2), exclusive while a task joins, pins the image, counts itself finished, or
//               while the holder looks at `users` and removes the directory
//   users       flock(2), shared by every running task; the holder exits when it can take it
//   holder      the holder's pid, and the identity of its image (ImportedImage::manifest_digest)
//   image       "TEXT\nDIGEST\n": the digest the first task's tag resolved to
//   entrypoint  "ok\n" + exported variables (NUL-separated), or "failed\n" + the message
//   finished    how many of the node's tasks have finished (--container-save on the first node)
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "image/cache.h"
#include "image/import.h"
#include "options/entrypoint.h"

namespace slipway::launcher::cli {

std::string host_name();

// This node's directory for the step in CACHE; empty when not under srun.
std::string step_run_dir(const std::string& cache);

// RUN_DIR's `lock`, exclusively, on a directory that is still there: the holder of a step whose
// last task just left removes the directory while holding that lock, and a task that was waiting
// for it then starts afresh.
Result<FileLock> lock_step_dir(const std::string& run_dir);

// The image TEXT names, resolved once per node and step (the first task pins the digest).
Result<ImportedImage> import_for_step(const std::string& text, const std::string& run_dir,
                                      const ImportOptions& opts);

// The entrypoint's outcome, written by the task that ran it and read by the node's others.
Status record_entrypoint(const std::string& run_dir, const Result<EntrypointRun>& r);
Result<std::vector<std::string>> recorded_entrypoint(const std::string& run_dir);

// Removes the step directory DIR and its files: by its detached holder when the last task has gone
// (HolderOptions::when_unused), or by the next step's first task for a holder that was killed.
void remove_run_dir(const std::string& dir);

// Removes the directories of this node's earlier steps whose holder was killed (not OWN).
void sweep_stale_run_dirs(const std::string& own);

// The step's tasks on its first node; 1 if Slurm did not say.
int tasks_on_first_node();

// Whether this task is the node's last in the step to finish; if so LOCK holds `lock` until the
// caller is done with the container.
bool last_of_step(const std::string& run_dir, std::optional<FileLock>& lock);

}  // namespace slipway::launcher::cli
