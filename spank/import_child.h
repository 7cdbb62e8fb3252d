// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Long work of user_init done outside slurmstepd's identity window. Slurm runs user_init with the
// whole slurmstepd's effective uid set to the job user; meanwhile its other threads (the PMIx
// server, authenticating peers through munge) act as that user and are refused
// ("Munge decode failed: Unauthorized credential"), which can hang a PMIx fence on other nodes.
// So the import runs in a child that has become the user entirely, and slurmstepd waits with its
// effective uid back at root (EuidRoot), for as short a window as user_init can have.
#pragma once

#include <functional>
#include <string_view>

#include "image/import.h"
#include "remote_env.h"

namespace slipway::spank {

// From user_init on: every slurmstepd thread acts as root again (glibc's seteuid(0) is
// process-wide), except the calling thread, which keeps the job user's effective uid through a
// raw setresuid(2), which the kernel applies to one thread only. The other threads stay root when
// user_init returns: Slurm goes on forking the tasks from this thread as the user, and then its
// own seteuid(0) reaches every thread. Putting them all back to the user there reopened the window
// in which the PMIx server thread's munge decode is refused (seen under load in CI).
class OnlyThisThreadIsTheUser {
 public:
  OnlyThisThreadIsTheUser();
  ~OnlyThisThreadIsTheUser();
  OnlyThisThreadIsTheUser(const OnlyThisThreadIsTheUser&) = delete;
  OnlyThisThreadIsTheUser& operator=(const OnlyThisThreadIsTheUser&) = delete;

 private:
  uid_t user_ = 0;
  bool active_ = false;
};

// While alive, the calling thread's effective uid is 0 (real uid 0 required); restored after. For
// waiting on children that become the user themselves, so no thread acts as the user meanwhile.
class EuidRoot {
 public:
  EuidRoot();
  ~EuidRoot();
  EuidRoot(const EuidRoot&) = delete;
  EuidRoot& operator=(const EuidRoot&) = delete;

 private:
  uid_t saved_ = 0;
  bool raised_ = false;
};

using ImportWork = std::function<launcher::Result<launcher::ImportedImage>(
    const std::function<void(std::string_view)>& progress)>;

// Runs `work` in a child that became ids.uid/ids.gid; its progress lines reach `progress` here.
// The child hands back only the image's identity; the image (its root, its config) is then read
// from CACHE_DIR here, as the user, with find_recorded_image().
launcher::Result<launcher::ImportedImage> import_as_user(
    const StepIds& ids, const std::string& cache_dir, const ImportWork& work,
    const std::function<void(std::string_view)>& progress);

}  // namespace slipway::spank
