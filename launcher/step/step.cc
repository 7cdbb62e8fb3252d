// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// A step's container on one node, for both edges (see step.h).
#include "step/step.h"

#include <sys/prctl.h>

#include <algorithm>

#include "common/file_util.h"
#include "options/save.h"

namespace slipway::launcher {
namespace {

// The image a named or running container was made from, as the cache (or its file) holds it.
Result<ImportedImage> recorded_image(const StepInput& in) {
  auto image = find_recorded_image(NodeCache(in.plan.cache_dir), in.recorded_image);
  if (image.ok()) return image;
  const std::string& name = in.options.container_name;
  if (in.recorded_image.starts_with("squashfs:")) return image.status().context("container '" + name + "'");
  return Status::error("the image of container '" + name +
                           "' is no longer in the node cache; recreate it with --container-name=" +
                           name + ":create --container-image=IMAGE",
                       ENOENT);
}

}  // namespace

Result<Step> prepare_step(const StepInput& in) {
  Step step;
  // The image stays in the cache while the step runs (slipway rm and gc skip images in use). An
  // rm or gc between the import and the mark removes it: then import it again.
  for (int attempt = 0;; ++attempt) {
    auto image = in.recorded_image.empty() ? in.import() : recorded_image(in);
    SLIPWAY_TRY(image);
    step.image = std::move(*image);
    if (!step.image.squashfs.empty()) break;  // mounted from its file: nothing in the cache to hold
    auto in_use = mark_in_use(NodeCache(in.plan.cache_dir), step.image.manifest_digest);
    if (in_use.ok()) {
      step.image_in_use = std::move(*in_use);
      break;
    }
    // Something else than a removal (a cache on a filesystem without locks): run unmarked.
    if (in_use.status().error_number() != ENOENT || attempt == 2) break;
  }
  if (!in.options.container_name.empty() && in.recorded_image.empty())
    SLIPWAY_TRY(record_named_container_image(in.plan.named_dir, step.image.manifest_digest));
  // The per-task private mount point of the container root (see LaunchSpec::scratch_dir).
  SLIPWAY_TRY(make_private_dirs(in.plan.cache_dir + "/mnt"));
  PlanInput plan = in.plan;
  plan.rootfs = step.image.rootfs;
  plan.squashfs_file = step.image.squashfs;
  auto spec = plan_container(in.options, in.site, plan);
  SLIPWAY_TRY(spec);
  // The fabric devices first: they belong to /dev, which is built before every other bind, so
  // the job's --container-mounts and the site's mounts= still come after them.
  std::vector<Bind> fabric;
  for (auto& b : plan_fabric("/", in.fabric).binds) fabric.push_back(std::move(b.bind));
  spec->binds.insert(spec->binds.begin(), fabric.begin(), fabric.end());
  step.spec = std::move(*spec);
  return step;
}

bool wants_entrypoint(const Step& step, const JobOptions& options, bool site_default) {
  return options.entrypoint.value_or(site_default) && !step.image.config.entrypoint.empty();
}

Result<EntrypointRun> step_entrypoint(const ContainerHolder& holder, const Step& step,
                                      const JobOptions& options,
                                      const std::vector<std::string>& job_env) {
  return run_entrypoint(holder, step.spec, step.image.config.entrypoint,
                        entrypoint_start_env(job_env, step.image.config, options));
}

TaskEntry task_entry(const Step& step, const JobOptions& options, const TaskInput& in) {
  TaskEntry t;
  auto job_has = [&](const std::string& name) { return in.job_env(name).has_value(); };
  t.env = image_settings(options, step.image.config.env, in.entrypoint_env, job_has);
  if (auto home = container_home(step.spec, in.home); !home.empty()) t.env.emplace_back("HOME", home);
  if (auto pmix = in.job_env("PMIX_SERVER_TMPDIR")) {
    if (is_dir(*pmix)) t.view.binds.push_back({.source = *pmix, .destination = *pmix});
    const bool bound = std::any_of(t.view.binds.begin(), t.view.binds.end(),
                                   [&](const Bind& b) { return b.destination == *pmix; });
    // As enroot's PMIx hook, a PMIX_MCA_* the job sets itself is kept.
    if (!bound && !in.job_env("PMIX_MCA_gds")) t.env.emplace_back("PMIX_MCA_gds", "hash");
    if (step.spec.remap_root && is_dir("/run/munge") && !in.job_env("PMIX_MCA_psec"))
      t.env.emplace_back("PMIX_MCA_psec", "munge");
  }
  add_working_directory(options, step.image.config.working_dir, t.view);
  return t;
}

Status lock_down(const std::optional<SeccompProgram>& filter) {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    return Status::from_errno("prctl(PR_SET_NO_NEW_PRIVS)", errno);
  return filter ? install_seccomp(*filter) : Status();
}

Status save_step(pid_t holder_pid, const Step& step, const JobOptions& options,
                 const std::string& cache_dir) {
  return save_container({.holder = holder_pid, .spec = step.spec, .cache_dir = cache_dir,
                         .manifest_digest = step.image.manifest_digest,
                         .output_path = options.save_path});
}

}  // namespace slipway::launcher
