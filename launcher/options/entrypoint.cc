// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// --container-entrypoint (see entrypoint.h).
#include "options/entrypoint.h"

#include <algorithm>

#include "options/container_plan.h"
#include "runtime/run_in.h"

namespace slipway::launcher {

std::vector<std::string> entrypoint_start_env(const std::vector<std::string>& job_env,
                                              const ImageConfig& config, const JobOptions& opts) {
  std::vector<std::string> env = config.env;
  auto set = [&](const std::string& kv) {
    const std::string prefix = kv.substr(0, kv.find('=') + 1);
    std::erase_if(env, [&](const std::string& e) { return e.compare(0, prefix.size(), prefix) == 0; });
    env.push_back(kv);
  };
  for (const auto& name : opts.env_names)
    for (const auto& kv : job_env)
      if (kv.compare(0, name.size() + 1, name + "=") == 0) set(kv);
  const bool has_path = std::any_of(env.begin(), env.end(),
                                    [](const std::string& e) { return e.rfind("PATH=", 0) == 0; });
  if (!has_path) env.push_back(std::string("PATH=") + kDefaultPath);
  return env;
}

std::vector<std::string> exported_variables(const std::string& environ_block,
                                            const std::vector<std::string>& before) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < environ_block.size()) {
    size_t j = environ_block.find('\0', i);
    if (j == std::string::npos) j = environ_block.size();
    std::string kv = environ_block.substr(i, j - i);
    i = j + 1;
    std::string name = kv.substr(0, kv.find('='));
    if (name.empty() || name == "PWD" || name == "SHLVL" || name == "_") continue;
    if (std::find(before.begin(), before.end(), kv) == before.end()) out.push_back(kv);
  }
  return out;
}

Result<EntrypointRun> run_entrypoint(const ContainerHolder& holder, const LaunchSpec& spec,
                                     const std::vector<std::string>& entrypoint,
                                     const std::vector<std::string>& start_env) {
  std::vector<std::string> argv = entrypoint;
  for (const char* a : {"/bin/sh", "-c", "cat /proc/self/environ >&3"}) argv.emplace_back(a);
  auto r = run_in_container(holder, spec, argv, start_env, kEntrypointTimeoutS);
  if (!r.ok()) return r.status().context("the image's entrypoint (" + entrypoint[0] + ")");
  if (r->exit_code != 0) {
    std::string last = r->output.substr(0, r->output.find_last_not_of('\n') + 1);
    last = last.substr(last.rfind('\n') == std::string::npos ? 0 : last.rfind('\n') + 1);
    return Status::error("the image's entrypoint (" + entrypoint[0] + ") failed with status " +
                             std::to_string(r->exit_code) + (last.empty() ? "" : ": " + last) +
                             "; fix the image or run with --no-container-entrypoint",
                         EIO);
  }
  return EntrypointRun{exported_variables(r->fd3, start_env), std::move(r->output)};
}

}  // namespace slipway::launcher
