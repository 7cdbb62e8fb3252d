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

// While alive, the process's effective uid is 0 (when the real uid is 0); restored after.
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
launcher::Result<launcher::ImportedImage> import_as_user(
    const StepIds& ids, const ImportWork& work,
    const std::function<void(std::string_view)>& progress);

}  // namespace slipway::spank
