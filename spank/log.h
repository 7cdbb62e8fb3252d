// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The plugin's one logging header: every line starts with "slipway: ". Levels
// (docs/conventions.md, "Errors"): error = the step fails, user = a warning or progress line for
// the user's terminal, info = what an admin wants in the slurmd log, verbose = what we ran,
// debug = internals. slurm_error() in srun/sbatch reaches the user's terminal; in slurmstepd it
// reaches both the node log and, from task_init, the user.
#pragma once

#include "spank_c.h"

#include <string>

namespace slipway::spank {

inline void log_error(const std::string& m) { slurm_error("slipway: %s", m.c_str()); }
// A line for the user's terminal that is not an error (a warning, progress): at error level, so
// srun shows it, without the "error: " that slurm_error() puts before it.
inline void log_user(const std::string& m) { slurm_spank_log("slipway: %s", m.c_str()); }
inline void log_info(const std::string& m) { slurm_info("slipway: %s", m.c_str()); }
inline void log_verbose(const std::string& m) { slurm_verbose("slipway: %s", m.c_str()); }
inline void log_debug(const std::string& m) { slurm_debug("slipway: %s", m.c_str()); }

}  // namespace slipway::spank
