// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// A step's GPUs for both edges (see step_gpus.h).
#include "step/step_gpus.h"

#include <memory>

namespace slipway::launcher {

GpuChoice gpu_choice(const DlGpus& option, const DlGpus& site_default) {
  const DlGpus& g = option.mode != DlGpus::Mode::kUnset ? option : site_default;
  switch (g.mode) {
    case DlGpus::Mode::kNone: return {GpuChoice::Mode::kNone, 0};
    case DlGpus::Mode::kCount: return {GpuChoice::Mode::kCount, g.count};
    case DlGpus::Mode::kAuto: return {GpuChoice::Mode::kAuto, 0};
    case DlGpus::Mode::kUnset: break;
  }
  return {GpuChoice::Mode::kEnv, 0};
}

Result<GpuNodePlan> plan_step_gpus(const Step& step, const JobOptions& options,
                                   const StepGpuInput& in) {
  GpuNodeInput g;
  g.root = in.root;
  g.option = gpu_choice(options.dl_gpus, in.site_default);
  g.image_root = step.spec.rootfs;
  g.image = options.container_image.empty() ? options.container_name : options.container_image;
  g.node = in.node;
  auto image_env = std::make_shared<std::vector<std::string>>(step.image.config.env);
  g.env.job = in.job_env;
  g.env.image = [image_env](const std::string& name) -> std::optional<std::string> {
    std::optional<std::string> v;  // the last assignment wins, as in a shell
    for (const auto& e : *image_env)
      if (e.size() > name.size() && e.compare(0, name.size(), name) == 0 && e[name.size()] == '=')
        v = e.substr(name.size() + 1);
    return v;
  };
  g.env.names = in.job_env_names;
  for (const auto& e : *image_env) g.env.names.push_back(e.substr(0, e.find('=')));
  // Most steps ask for no GPU: they need not read the node's ld.so cache (every start pays it).
  const LdCache none;
  g.host_cache = &none;
  if (g.option.mode == GpuChoice::Mode::kNone) return plan_gpu_node(g);
  if (g.option.mode == GpuChoice::Mode::kEnv) {
    auto req = parse_nvidia_env(g.env);
    if (req.ok() && req->devices == NvidiaRequest::Devices::kVoid) return plan_gpu_node(g);
  }
  auto cache = LdCache::load(in_root(in.root, "/etc/ld.so.cache"));
  SLIPWAY_TRY(cache);
  g.host_cache = &*cache;
  return plan_gpu_node(g);  // the plan keeps values only, not the cache
}

}  // namespace slipway::launcher
