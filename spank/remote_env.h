// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Small typed wrappers over spank_get_item / spank_getenv for the remote (slurmstepd) context.
#pragma once

#include "spank_c.h"

#include <optional>
#include <string>

namespace slipway::spank {

// The job environment's value of `name`, if set.
std::optional<std::string> job_getenv(spank_t sp, const char* name);

struct StepIds {
  uint32_t job_id = 0;
  uint32_t step_id = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  // The batch script, the extern step and salloc's interactive step run no user task in a
  // container (sbatch_support, issue 4, will change the first).
  bool is_user_step() const {
    return step_id != SLURM_BATCH_SCRIPT && step_id != SLURM_EXTERN_CONT &&
           step_id != SLURM_INTERACTIVE_STEP;
  }
};

std::optional<StepIds> step_ids(spank_t sp);

// The home directory of `uid` from the password database; empty if unknown.
std::string home_of(uid_t uid);

}  // namespace slipway::spank
