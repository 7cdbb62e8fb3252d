// What the plugin remembers between SPANK callbacks of one process (srun, sbatch, salloc or one
// slurmstepd): the site configuration, the job's options, and on a node the imported image or the
// error to raise in task_init (Slurm does not report user_init failures to srun: bug 7573).
#pragma once

#include <optional>
#include <string>

#include "config.h"
#include "image/import.h"
#include "options.h"
#include "runtime/container.h"
#include "spank_c.h"

namespace slipway::spank {

struct PluginState {
  PluginConfig config;
  JobOptions options;
  std::optional<launcher::ImportedImage> image;  // set by user_init on success
  launcher::LaunchSpec spec;                     // the node's container, as the holder built it
  launcher::ContainerHolder holder;              // the node's container for this step
  std::string cache_dir;                         // the node cache this step uses
  std::string deferred_error;                    // set by user_init on failure
};

PluginState& state();

// Environment variables by which srun/sbatch/salloc pin the image digest for every node.
inline constexpr const char* kEnvImageRef = "SLIPWAY_IMAGE_REF";
inline constexpr const char* kEnvImageDigest = "SLIPWAY_IMAGE_DIGEST";

// Context handlers, one file each: client.cc (srun, sbatch, salloc), remote_import.cc (user_init),
// remote_task.cc (task_init). Each returns 0 or -1 and never throws.
int client_init_post_opt(spank_t sp);
int remote_user_init(spank_t sp);
int remote_task_init(spank_t sp);
int remote_exit(spank_t sp);

// Fills state().options from the options slurmstepd received in the launch message.
void load_remote_options(spank_t sp);

}  // namespace slipway::spank
