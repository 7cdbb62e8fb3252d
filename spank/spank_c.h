// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The one way the plugin includes Slurm's headers. spank.h declares the slurm_spank_* hooks outside
// its extern "C" block, so C++ would give our definitions C++ linkage (and mangled names that
// slurmstepd never finds); including it inside extern "C" gives every declaration C linkage.
#pragma once

extern "C" {
#include <slurm/slurm.h>
#include <slurm/spank.h>
}
