// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// --dl-explain (see dl_explain.h). One block per task, every line "slipway-explain: task R: ...",
// so the blocks of many tasks stay apart when srun interleaves them.
#include "dl_explain.h"

#include <unistd.h>

namespace slipway::spank {
namespace {

std::string bind_line(const launcher::PlannedBind& b) {
  std::string flags = b.bind.read_only ? "ro" : "rw";
  if (b.bind.allow_devices) flags += ",dev";
  if (b.bind.no_exec) flags += ",noexec";
  return "bind " + b.bind.source + " -> " + b.bind.destination + " (" + flags + "): " + b.why;
}

}  // namespace

std::string explain_text(const TaskPlan& plan, const launcher::InjectionPlan& injection,
                         const launcher::GpuNodePlan& gpu, const std::string& failure) {
  const auto& t = plan.placement;
  const std::string p = "slipway-explain: task " + std::to_string(t.rank) + ": ";
  std::string out = p + "rank " + std::to_string(t.rank) + " of " + std::to_string(t.world_size) +
                    ", local rank " + std::to_string(t.local_rank) + " of " +
                    std::to_string(t.local_world_size) + " on " + plan.node + " (node rank " +
                    std::to_string(t.node_rank) + "); nothing is run\n";
  for (const auto* list : {&plan.env, &plan.gpu.env})
    for (const auto& e : *list)
      out += p + "env " + e.name + "=" + e.value + (e.overwrite ? "" : " (unless the job sets it)") +
             ": " + e.why + "\n";
  if (!plan.gpu_source.empty())
    out += p + "gpus " + (plan.gpu.minors.empty() ? std::string("none") : "") +
           [&] {
             std::string s;
             for (int m : plan.gpu.minors) s += (s.empty() ? "" : ",") + std::to_string(m);
             return s;
           }() + " of " + plan.gpu_source + "\n";
  for (const auto& b : plan.gpu.binds) out += p + bind_line(b) + "\n";
  if (!plan.gpu.cpus.empty())
    out += p + "cpus " + launcher::format_cpulist(plan.gpu.cpus) + ": " + plan.gpu.cpus_why + "\n";
  for (const auto& l : injection.libs)
    out += p + "inject " + l.soname + " from " + l.host_path + " (set " + l.set + "): " + l.why + "\n";
  for (const auto& b : injection.binds)  // the libraries' own binds: said by their "inject" lines
    if (b.bind.destination.rfind(launcher::kHostLibDir, 0) != 0) out += p + bind_line(b) + "\n";
  if (gpu.expose)
    out += p + "driver " + (gpu.driver.version.empty() ? std::string("unknown") : gpu.driver.version) +
           " (CUDA " + gpu.driver.cuda() + "), capabilities " +
           launcher::format_capabilities(gpu.request.capabilities) + ", libraries in " + gpu.lib_dir +
           "\n";
  for (const auto& note : gpu.notes) out += p + "gpus: " + note + "\n";
  for (const auto& b : gpu.binds) out += p + bind_line(b) + "\n";
  for (const auto& c : injection.checks) out += p + "check ok: " + c + "\n";
  for (const auto& w : injection.warnings) out += p + "check warning: " + w + "\n";
  if (!failure.empty()) out += p + "would fail: " + failure + "\n";
  return out;
}

void explain_and_exit(const TaskPlan& plan, const launcher::InjectionPlan& injection,
                      const launcher::GpuNodePlan& gpu, const std::string& failure) {
  const std::string text = explain_text(plan, injection, gpu, failure);
  for (size_t off = 0; off < text.size();) {
    ssize_t n = write(STDOUT_FILENO, text.data() + off, text.size() - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  // The task process ends here, before slurmstepd execs the command: nothing of the user runs.
  _exit(failure.empty() ? 0 : 1);
}

}  // namespace slipway::spank
