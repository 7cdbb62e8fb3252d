// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The Slurm releases Slipway's cluster suite passes on, with the PMIx, Open MPI and distribution
// each ran with: the one table that README ("Supported versions"), man spank_slipway and
// `slipway doctor` follow. A SPANK plugin loads only into the Slurm release (major.minor) it was
// built against; any release may build it, but only these were tested. README and the man page
// say "Slurm 22.05 with PMIx 4.2.2 and Open MPI 4.1.4 on Debian 12" for each (checked by
// tests/unit/launcher_dl/test_slurm_versions).
#pragma once

#include <string>
#include <string_view>

#include "dl/doctor.h"

namespace slipway::launcher {

struct TestedSlurm {
  std::string_view release;  // major.minor, as Slurm checks a plugin's version
  std::string_view pmix;
  std::string_view openmpi;
  std::string_view distribution;
};

inline constexpr TestedSlurm kTestedSlurm[] = {
    {"22.05", "4.2.2", "4.1.4", "Debian 12"},
    {"24.11", "5.0.7", "5.0.7", "Debian 13"},
};

// "Slurm 22.05 with PMIx 4.2.2 and Open MPI 4.1.4 on Debian 12".
std::string tested_stack(const TestedSlurm& t);

// "22.05" from "slurm 22.05.8", "22.05.8" or "slurm-wlm 24.11.5"; "" when TEXT holds no version.
std::string slurm_release_of(std::string_view text);

// This node's Slurm version as `sinfo --version` prints it ("slurm 22.05.8"), from PATH; "" when
// sinfo is missing, fails, or takes longer than TIMEOUT_S.
std::string installed_slurm_version(double timeout_s = 5);

// ok for a tested release, warn for another one (named, with the tested ones), skip when VERSION
// is empty (no Slurm found).
Finding check_slurm_version(std::string_view version);

}  // namespace slipway::launcher
