// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Running instances of a container on a node, so that later steps can share it as pyxis's do: a
// step that starts (or joins) a container records its holder in the container's instance
// directory (<scope>/NAME.run/ for a named container, <job scope>/<job>.<step>.run/ for an unnamed
// one, which pyxis lets other steps reach as --container-name=<job>.<step>). Each entry is a file
// named by the holder's pid holding what a joiner must match: the holder's mount namespace (an
// entry whose holder is gone, or whose pid was reused, no longer matches and is swept), whether
// root is remapped, whether the root is writable, the unshared namespaces and the image.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/launch_spec.h"

namespace slipway::launcher {

struct Instance {
  pid_t pid = -1;          // its holder
  bool remap_root = false;
  bool writable = false;
  bool net = false, ipc = false, uts = false;
  std::string image;       // the manifest digest of its image
};

// The instance directory of NAME in SCOPE_DIR.
std::string instance_dir(const std::string& scope_dir, const std::string& name);

// Records HOLDER (running SPEC, made from IMAGE) in DIR, which is made if missing.
Status record_instance(const std::string& dir, pid_t holder, const LaunchSpec& spec,
                       const std::string& image);

// The live instances recorded in DIR, oldest first; entries of holders that are gone are removed.
std::vector<Instance> live_instances(const std::string& dir);

// SPEC as a step that joins INSTANCE (container NAME on NODE, for messages) sees it: the
// instance's root and namespaces, not its own. A namespace SPEC unshares that the instance does
// not is refused, as pyxis refuses it ("not in a separate network namespace").
Status take_instance_settings(const Instance& instance, const std::string& name,
                              const std::string& node, LaunchSpec& spec);

}  // namespace slipway::launcher
