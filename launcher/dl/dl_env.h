// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The distributed-training environment of one task (torch.distributed's env:// rendezvous and most
// launchers read it): RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR (the
// step's first node) and MASTER_PORT (a pure function of job and step id in a site range, so every
// task of the step computes the same port without talking to the others).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "dl/dl_types.h"

namespace slipway::launcher {

// Where one task sits in its step, as Slurm says (SPANK items or SLURM_* variables).
struct TaskPlacement {
  uint32_t job_id = 0, step_id = 0;
  int rank = 0;              // SLURM_PROCID
  int local_rank = 0;        // SLURM_LOCALID
  int world_size = 1;        // tasks of the step
  int local_world_size = 1;  // tasks of the step on this node
  int node_rank = 0;         // SLURM_NODEID
  std::string nodelist;      // SLURM_STEP_NODELIST, e.g. "node[1-4]"
};

struct PortRange {
  int first = 29500, last = 29999;
};

// "LO-HI" with 1024 <= LO <= HI <= 65535.
Result<PortRange> parse_port_range(std::string_view text);

// The same port for every task of a step; steps of different jobs spread over the range.
int master_port(uint32_t job_id, uint32_t step_id, PortRange range);

// The first host of a Slurm hostlist: "node[1-4,7],gpu01" -> "node1", "gpu[01-02]" -> "gpu01".
Result<std::string> first_host(std::string_view hostlist);

// The tasks on node NODE of a step from SLURM_STEP_TASKS_PER_NODE: "2(x3),1" is 2 on nodes 0-2
// and 1 on node 3. An error for a malformed value or a node it does not cover.
Result<int> tasks_on_node(std::string_view tasks_per_node, int node);

// Where the calling task sits, from the SLURM_* variables srun gives every task (the view of
// `slipway run`, which has no SPANK items): SLURM_JOB_ID, SLURM_STEP_ID, SLURM_PROCID,
// SLURM_LOCALID, SLURM_STEP_NUM_TASKS, SLURM_NODEID, SLURM_STEP_TASKS_PER_NODE and
// SLURM_STEP_NODELIST (or their SLURM_NTASKS, SLURM_TASKS_PER_NODE, SLURM_JOB_NODELIST forms).
// GETENV returns nullptr for an unset variable.
Result<TaskPlacement> placement_from_env(const std::function<const char*(const char*)>& getenv_fn);

// RANK ... MASTER_PORT for `t`. MASTER_ADDR and MASTER_PORT do not overwrite a value the job set.
Result<std::vector<EnvSetting>> dl_environment(const TaskPlacement& t, PortRange range);

}  // namespace slipway::launcher
