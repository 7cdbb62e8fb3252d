// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The DL environment of a task (see dl_env.h).
#include "dl/dl_env.h"

#include <charconv>
#include <initializer_list>

namespace slipway::launcher {

Result<PortRange> parse_port_range(std::string_view text) {
  size_t dash = text.find('-');
  int lo = 0, hi = 0;
  auto parse = [](std::string_view s, int& v) {
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return !s.empty() && ec == std::errc() && end == s.data() + s.size();
  };
  if (dash == std::string_view::npos || !parse(text.substr(0, dash), lo) ||
      !parse(text.substr(dash + 1), hi) || lo < 1024 || hi > 65535 || lo > hi)
    return Status::error("master_port_range='" + std::string(text) +
                             "' is not LO-HI with 1024 <= LO <= HI <= 65535, e.g. 29500-29999",
                         EINVAL);
  return PortRange{lo, hi};
}

int master_port(uint32_t job_id, uint32_t step_id, PortRange range) {
  // splitmix64 finaliser over (job, step): consecutive jobs land far apart in the range, so two
  // jobs that share a first node rarely pick the same port.
  uint64_t x = (static_cast<uint64_t>(job_id) << 32) | step_id;
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  const uint64_t span = static_cast<uint64_t>(range.last - range.first) + 1;
  return range.first + static_cast<int>(x % span);
}

Result<int> tasks_on_node(std::string_view text, int node) {
  int first = 0;  // the first node the current element covers
  size_t i = 0;
  auto number = [&](int& v) {
    auto [end, ec] = std::from_chars(text.data() + i, text.data() + text.size(), v);
    if (ec != std::errc() || v < 0) return false;
    i = static_cast<size_t>(end - text.data());
    return true;
  };
  while (i < text.size()) {
    int count = 0, repeat = 1;
    if (!number(count)) break;
    if (text.substr(i, 2) == "(x") {
      i += 2;
      if (!number(repeat) || repeat < 1 || i >= text.size() || text[i] != ')') break;
      ++i;
    }
    if (i < text.size() && text[i] != ',') break;
    if (node >= first && node < first + repeat) return count;
    first += repeat;
    ++i;
  }
  return Status::error("tasks per node '" + std::string(text) + "' does not cover node " +
                           std::to_string(node),
                       EINVAL);
}

Result<TaskPlacement> placement_from_env(const std::function<const char*(const char*)>& getenv_fn) {
  auto var = [&](std::initializer_list<const char*> names) -> std::string_view {
    for (const char* n : names)
      if (const char* v = getenv_fn(n)) return v;
    return {};
  };
  auto number = [&](std::initializer_list<const char*> names, int64_t& out) -> Status {
    std::string_view v = var(names);
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size() || out < 0)
      return Status::error(std::string(*names.begin()) + "='" + std::string(v) +
                               "' is not a number: not a task of srun?",
                           EINVAL);
    return Status();
  };
  int64_t job = 0, step = 0, rank = 0, local = 0, world = 0, node = 0;
  SLIPWAY_TRY(number({"SLURM_JOB_ID"}, job));
  SLIPWAY_TRY(number({"SLURM_STEP_ID"}, step));
  SLIPWAY_TRY(number({"SLURM_PROCID"}, rank));
  SLIPWAY_TRY(number({"SLURM_LOCALID"}, local));
  SLIPWAY_TRY(number({"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, world));
  SLIPWAY_TRY(number({"SLURM_NODEID"}, node));
  auto local_world = tasks_on_node(var({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}),
                                   static_cast<int>(node));
  SLIPWAY_TRY(local_world);
  TaskPlacement t;
  t.job_id = static_cast<uint32_t>(job);
  t.step_id = static_cast<uint32_t>(step);
  t.rank = static_cast<int>(rank);
  t.local_rank = static_cast<int>(local);
  t.world_size = static_cast<int>(world);
  t.local_world_size = *local_world;
  t.node_rank = static_cast<int>(node);
  t.nodelist = std::string(var({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}));
  return t;
}

Result<std::string> first_host(std::string_view hostlist) {
  // The first element ends at the first ',' outside brackets.
  size_t depth = 0, end = 0;
  for (; end < hostlist.size(); ++end) {
    char c = hostlist[end];
    if (c == '[') ++depth;
    if (c == ']' && depth > 0) --depth;
    if (c == ',' && depth == 0) break;
  }
  std::string_view first = hostlist.substr(0, end);
  size_t open = first.find('[');
  if (first.empty() || open == 0)
    return Status::error("cannot read the first node of hostlist '" + std::string(hostlist) + "'",
                         EINVAL);
  if (open == std::string_view::npos) return std::string(first);
  size_t stop = first.find_first_of(",-]", open + 1);
  if (stop == std::string_view::npos || stop == open + 1)
    return Status::error("cannot read the first node of hostlist '" + std::string(hostlist) + "'",
                         EINVAL);
  // "gpu[01-02]x" -> prefix + the first range's first number, as written (keeps zero padding).
  size_t close = first.find(']', open);
  std::string suffix = close == std::string_view::npos ? "" : std::string(first.substr(close + 1));
  return std::string(first.substr(0, open)) + std::string(first.substr(open + 1, stop - open - 1)) +
         suffix;
}

Result<std::vector<EnvSetting>> dl_environment(const TaskPlacement& t, PortRange range) {
  auto master = first_host(t.nodelist);
  SLIPWAY_TRY(master);
  auto n = [](int v) { return std::to_string(v); };
  return std::vector<EnvSetting>{
      {"RANK", n(t.rank), "SLURM_PROCID: the task's rank in the step"},
      {"LOCAL_RANK", n(t.local_rank), "SLURM_LOCALID: the task's rank on its node"},
      {"WORLD_SIZE", n(t.world_size), "tasks in the step"},
      {"LOCAL_WORLD_SIZE", n(t.local_world_size), "tasks of the step on this node"},
      {"NODE_RANK", n(t.node_rank), "SLURM_NODEID: this node's index in the step"},
      {"MASTER_ADDR", *master, "the step's first node (" + t.nodelist + ")", false},
      {"MASTER_PORT", n(master_port(t.job_id, t.step_id, range)),
       "derived from job " + std::to_string(t.job_id) + " step " + std::to_string(t.step_id) +
           " in master_port_range " + n(range.first) + "-" + n(range.last),
       false},
  };
}

}  // namespace slipway::launcher
