// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The plugin's use of `slipway doctor` (launcher/dl/doctor.h): when a container cannot be started
// or entered, the node's failed checks are added to the error the user sees, so that "cannot
// create a user namespace" comes with its cause (e.g. user.max_user_namespaces=0) and its fix.
#pragma once

#include <cerrno>
#include <string>

#include "plugin_state.h"

namespace slipway::spank {

// "; slipway doctor: FAIL userns: ...; fix: ..." for every failed check, or "" when all pass.
std::string diagnose_launch_failure(const PluginState& st);

// The diagnosis for a failed container start, only for errors a node's configuration can cause
// (permissions, namespace limits); a bad option or image needs none, and a wrong one misleads.
inline std::string diagnosis_for(const launcher::Status& failure, const PluginState& st) {
  const int e = failure.error_number();
  return e == EPERM || e == EACCES || e == ENOSPC || e == EUSERS ? diagnose_launch_failure(st) : "";
}

}  // namespace slipway::spank
