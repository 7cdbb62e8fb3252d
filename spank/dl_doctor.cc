// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Root cause of a failed launch (see dl_doctor.h).
#include "dl_doctor.h"

#include <slurm/slurm_version.h>

#include "dl/doctor.h"

namespace slipway::spank {

std::string diagnose_launch_failure(const PluginState& st) {
  launcher::DoctorOptions o;
  o.cache_dir = st.cache_dir;
  o.host_lib_sets = st.config.host_lib_sets;
  o.fabric = st.config.fabric;
  // The plugin runs only in the Slurm release it was built against: no need to ask sinfo.
  constexpr unsigned kV = SLURM_VERSION_NUMBER;
  o.slurm_version = "slurm " + std::to_string(SLURM_VERSION_MAJOR(kV)) + "." +
                    (SLURM_VERSION_MINOR(kV) < 10 ? "0" : "") +
                    std::to_string(SLURM_VERSION_MINOR(kV)) + "." +
                    std::to_string(SLURM_VERSION_MICRO(kV));
  std::string out;
  for (const auto& f : launcher::run_doctor(o))
    if (f.verdict == launcher::Verdict::kFail)
      out += "; slipway doctor: " + f.check + ": " + f.detail + (f.fix.empty() ? "" : "; fix: " + f.fix);
  return out;
}

}  // namespace slipway::spank
