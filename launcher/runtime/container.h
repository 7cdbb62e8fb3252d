// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Containers: one per node per job step, shared by the step's tasks on that node (so MPI and NCCL
// shared memory and cross-memory attach work between them), with a private view per task.
//   build_container()  the calling process creates the user + mount namespace and the root (an
//                      overlay of the image) without entering it: the "staging" namespace;
//   start_holder()     forks a small holder process that does build_container() and then waits,
//                      keeping the namespaces alive for the step's tasks;
//   share_container_mounts()  the holder makes the container's mounts shared, so that
//                      what a task mounts inside reaches the holder and every task (container.cc,
//                      "Mount propagation");
//   join_container()   a task setns()es into the holder's namespaces, then enter_root(), then its
//                      root joins the holder's root in one peer group;
//   enter_root()       a child mount namespace with the task's own binds, pivot_root, chdir;
//   enter_container()  build_container() and into the root in one process (no holder), for a
//                      container with a single task: its namespace needs no private child.
// A container can be shared by steps (pyxis's named containers, attached with srun --overlap):
//   join_namespaces()  a holder of a later step enters a running holder's namespaces, so that
//                      its tasks join the same container (--container-name=NAME or NAME:exec);
//   adopt_container()  a new instance of a running container: the same root filesystem (the
//                      overlay mount itself, so writes are shared), its own mounts and binds
//                      (--container-name=NAME:no_exec).
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "runtime/launch_spec.h"

namespace slipway::launcher {

// What differs between the tasks of one container.
struct TaskView {
  std::vector<Bind> binds;  // e.g. $PMIX_SERVER_TMPDIR, the working directory, GPU devices
  std::string workdir;      // chdir target inside; empty: "/"
};

Status build_container(const LaunchSpec& spec);
// Enters the user namespace of the running holder HOLDER, its net/ipc/uts namespaces where SPEC
// unshares them, then its mount namespace.
Status join_namespaces(pid_t holder, const LaunchSpec& spec);
// Like build_container(), but the root is the overlay of the running holder INSTANCE.
Status adopt_container(pid_t instance, const LaunchSpec& spec);
Status enter_root(const LaunchSpec& spec, const TaskView& task);
// In the holder, once build_container() or adopt_container() is done.
Status share_container_mounts(const LaunchSpec& spec);
Status enter_container(const LaunchSpec& spec, const TaskView& task);
inline Status enter_container(const LaunchSpec& spec) {
  return enter_container(spec, TaskView{{}, spec.workdir});
}

// The holder of a node's container: a child process that owns its namespaces.
class ContainerHolder {
 public:
  ContainerHolder() = default;
  ContainerHolder(pid_t pid, UniqueFd userns, UniqueFd mntns);
  ContainerHolder(ContainerHolder&& o) noexcept;
  ContainerHolder& operator=(ContainerHolder&& o) noexcept;
  ~ContainerHolder();

  pid_t pid() const { return pid_; }
  int userns_fd() const { return userns_.get(); }
  int mntns_fd() const { return mntns_.get(); }
  // The net/ipc/uts namespaces the container unshared: (fd, CLONE_NEW*) pairs.
  const std::vector<std::pair<int, int>>& other_namespaces() const { return others_; }
  void add_namespace(UniqueFd fd, int type) {
    others_.emplace_back(fd.get(), type);
    owned_.push_back(std::move(fd));
  }
  bool running() const { return pid_ > 0; }
  // Kills the holder and reaps it; the container's mounts go when its last task exits. Only the
  // process that started the holder does anything here: a forked task that exits must not take
  // its siblings' container down.
  void stop();
  // Forgets the holder without stopping it.
  void release() { pid_ = -1; }
  // A holder that stop() must not kill (detached, or attached to).
  void set_not_owned() { owner_ = -1; }

 private:
  pid_t pid_ = -1;
  pid_t owner_ = -1;
  UniqueFd userns_, mntns_;
  std::vector<std::pair<int, int>> others_;
  std::vector<UniqueFd> owned_;
};

struct HolderOptions {
  // > 0: instead of building a container, share this running holder's (join_namespaces()), or
  // make a new instance of its root (adopt_container()).
  pid_t join = -1;
  pid_t adopt = -1;
  // false: the holder is the caller's child and dies with it (PR_SET_PDEATHSIG): the plugin's case.
  // true: the holder runs on its own (double fork, new session) and exits once nobody holds a
  // shared flock on `users_lock` any more: the case of `slipway run` tasks under srun, where the
  // task that happened to start it may finish first. stop() then only forgets it.
  bool detached = false;
  std::string users_lock;
  // A detached holder looks at `users_lock` only while it holds `join_lock` exclusively (a task
  // holding it is joining, or finishing with the container), and calls `when_unused` still
  // holding it before it exits: how its caller (cli/run_step.h) clears what it kept for it.
  std::string join_lock;
  std::function<void()> when_unused;
};

// Starts the holder. When the caller runs as root with another effective uid (slurmstepd in
// user_init), the holder first becomes spec.uid/spec.gid entirely. It keeps none of the caller's
// file descriptors.
Result<ContainerHolder> start_holder(const LaunchSpec& spec, const HolderOptions& options = {});

// Opens the namespaces of a running holder (another process's, same user) for join_container().
Result<ContainerHolder> attach_holder(pid_t pid, const LaunchSpec& spec);

// Joins the container of `holder` (its namespace fds) and enters the task's root.
Status join_container(const ContainerHolder& holder, const LaunchSpec& spec, const TaskView& task);

// True when `path` (absolute, inside the container root `root_fd`) resolves to a location inside the
// root without following any symlink that leaves it (openat2 RESOLVE_BENEATH semantics).
bool is_inside_root(int root_fd, const std::string& path);

}  // namespace slipway::launcher
