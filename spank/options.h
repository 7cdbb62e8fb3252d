// The job options the plugin adds to srun, sbatch and salloc, as one declarative table: SPANK
// registration, validation and help text are all generated from kOptionTable (style.md, "Data as
// tables"). Parsing is pure (no Slurm calls) so it is unit-tested directly.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace slipway::spank {

using launcher::Result;
using launcher::Status;

enum class OptionId : int { kContainerImage = 1, kDlGpus, kDlHostLibs, kDlExplain };

struct OptionSpec {
  OptionId id;
  const char* name;     // long option, without "--"
  const char* arginfo;  // shown in --help; nullptr for a flag
  const char* usage;    // one line of --help text
};

// Every option the plugin registers, in --help order.
std::span<const OptionSpec> option_table();

// --dl-gpus=N|auto|none: how many of the node's step GPUs each task sees.
struct DlGpus {
  enum class Mode { kUnset, kNone, kCount, kAuto };
  Mode mode = Mode::kUnset;
  int count = 0;
};

struct JobOptions {
  std::string container_image;
  DlGpus dl_gpus;
  std::vector<std::string> dl_host_libs;  // names of site-configured host library sets
  bool dl_explain = false;
};

Result<DlGpus> parse_dl_gpus(std::string_view text);

// Validates `arg` for option `id` and stores it in `opts`. The error names the option and the fix.
Status apply_option(JobOptions& opts, OptionId id, const char* arg);

}  // namespace slipway::spank
