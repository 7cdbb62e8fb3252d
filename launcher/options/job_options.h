// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The container options of a job, shared by the SPANK plugin (srun, sbatch, salloc) and
// `slipway run`, as one declarative table: SPANK registration, --help text, environment defaults
// (SLIPWAY_CONTAINER_*, PYXIS_CONTAINER_*) and the man page check all come from option_table()
// (docs/conventions.md, "Data as tables"). Names and meanings follow pyxis so job scripts move
// over unchanged. Parsing is pure (no Slurm calls): unit-tested.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace slipway::launcher {

enum class OptionId : int {
  kContainerImage = 1,
  kContainerMounts,
  kContainerWorkdir,
  kContainerName,
  kContainerSave,
  kContainerMountHome,
  kNoContainerMountHome,
  kContainerRemapRoot,
  kNoContainerRemapRoot,
  kContainerEntrypoint,
  kNoContainerEntrypoint,
  kContainerEntrypointLog,
  kContainerWritable,
  kContainerReadonly,
  kContainerEnv,
  kContainerUnshare,
  kDlGpus,
  kDlHostLibs,
  kDlExplain,
};

struct JobOptions;

struct OptionSpec {
  OptionId id;
  const char* name;     // long option, without "--"
  const char* arginfo;  // shown in --help; nullptr for a flag
  const char* usage;    // one line of --help text
  const char* env;      // "CONTAINER_IMAGE": read from SLIPWAY_<env> or PYXIS_<env>; nullptr: none
  // Validates and stores the value (flags get ""); errors name the option and the fix.
  Status (*apply)(JobOptions& opts, std::string_view value, std::string_view cwd);
};

// Every option the plugin registers, in --help order.
std::span<const OptionSpec> option_table();

// --dl-gpus=N|auto|none: how many of the node's step GPUs each task sees.
struct DlGpus {
  enum class Mode { kUnset, kNone, kCount, kAuto };
  Mode mode = Mode::kUnset;
  int count = 0;
};

// One --container-mounts entry: SRC[:DST[:FLAGS]], FLAGS joined by '+' (parse_mounts()).
struct MountSpec {
  std::string source;
  std::string destination;
  bool read_only = false;
  bool recursive = true;
  bool no_exec = false;
  bool unbindable = false;   // flag unbindable or runbindable (mount_namespaces(7))
  std::string tmpfs_options = {};  // tmpfs:DST only: size=, mode=, nr_inodes=, huge=, comma-joined
  // pyxis's special sources: "tmpfs" mounts a fresh tmpfs at DST, "umount" removes the mount at
  // DST (one the image or a default put there, e.g. /tmp). SOURCE is then that word.
  enum class Kind { kBind, kTmpfs, kUmount } kind = Kind::kBind;
  bool is_bind() const { return kind == Kind::kBind; }
};

// --container-name=NAME[:MODE], pyxis's modes (open_named_container() in container_plan.h): auto
// joins the running container or starts it; exec joins it or fails; no_exec starts a new instance
// of its root; create fails if NAME exists.
enum class NameMode { kAuto, kCreate, kExec, kNoExec };

struct Unshare {
  bool net = false, ipc = false, uts = false;
};

struct JobOptions {
  std::string container_image;
  std::vector<MountSpec> mounts;
  std::string workdir;
  std::string container_name;
  NameMode name_mode = NameMode::kAuto;
  std::string save_path;
  std::optional<bool> mount_home, remap_root, entrypoint, writable;  // unset: the site default
  bool entrypoint_log = false;
  std::vector<std::string> env_names;  // --container-env: keep the job's value over the image's
  Unshare unshare;
  DlGpus dl_gpus;
  std::vector<std::string> dl_host_libs;  // names of site-configured host library sets
  bool dl_explain = false;

  // True when the step runs in a container (an image or a named container was asked for).
  bool wants_container() const { return !container_image.empty() || !container_name.empty(); }
  std::vector<OptionId> given;      // options set by the user, in order (for conflict checks)
  std::vector<OptionId> inherited;  // of those, the ones srun got from its allocation
};

Result<DlGpus> parse_dl_gpus(std::string_view text);

// "--container-mounts: source path does not exist: 'SRC'" (pyxis's phrase, which scripts grep).
std::string mount_source_missing(const std::string& source);
Result<std::vector<MountSpec>> parse_mounts(std::string_view text, std::string_view cwd);

// Validates `arg` for option `id` and stores it in `opts`. The error names the option and the fix.
// `cwd` makes relative mount sources absolute. An `inherited` flag (srun inside sbatch or salloc
// gets the allocation's options too) never contradicts its opposite given to srun: the explicit one
// wins, whichever comes first.
Status apply_option(JobOptions& opts, OptionId id, const char* arg, std::string_view cwd = "",
                    bool inherited = false);

// Fills options the user did not give from SLIPWAY_CONTAINER_* (then PYXIS_CONTAINER_* when
// `honor_pyxis`), read with `getenv`. Flags accept 1/0, true/false, yes/no.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
Status apply_env_defaults(JobOptions& opts, const EnvLookup& getenv, bool honor_pyxis,
                          std::string_view cwd = "");

// Checks between options once all are known: contradictory flags, options that need an image.
Status validate_options(const JobOptions& opts);

}  // namespace slipway::launcher
