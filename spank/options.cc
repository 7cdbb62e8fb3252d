// The option table and the validation of each option's value (see options.h).
#include "options.h"

#include <array>
#include <algorithm>
#include <charconv>

namespace slipway::spank {
namespace {

constexpr std::array kOptions = {
    OptionSpec{OptionId::kContainerImage, "container-image", "IMAGE",
               "[slipway] run the step in the container IMAGE: [REGISTRY/]REPO[:TAG][@DIGEST], "
               "docker://..., an OCI or docker archive (./img.tar) or an OCI layout directory"},
    OptionSpec{OptionId::kDlGpus, "dl-gpus", "N|auto|none",
               "[slipway] GPUs per task, chosen by local rank from the step's GPUs on the node "
               "(auto: divide them evenly among the node's tasks)"},
    OptionSpec{OptionId::kDlHostLibs, "dl-host-libs", "SET[,SET...]",
               "[slipway] inject these site-configured host library sets (e.g. mpi,nccl) into the "
               "container, ahead of the image's copies"},
    OptionSpec{OptionId::kDlExplain, "dl-explain", nullptr,
               "[slipway] print what each task would get (binds, environment, injected "
               "libraries) and why, without running the command"},
};

constexpr int kMaxGpusPerTask = 64;

}  // namespace

std::span<const OptionSpec> option_table() { return kOptions; }

Result<DlGpus> parse_dl_gpus(std::string_view text) {
  DlGpus g;
  if (text == "none") {
    g.mode = DlGpus::Mode::kNone;
    return g;
  }
  if (text == "auto") {
    g.mode = DlGpus::Mode::kAuto;
    return g;
  }
  int n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || n < 1 ||
      n > kMaxGpusPerTask)
    return Status::error("--dl-gpus='" + std::string(text) +
                             "' is not valid; use a count from 1 to " +
                             std::to_string(kMaxGpusPerTask) + ", 'auto' or 'none'",
                         EINVAL);
  g.mode = DlGpus::Mode::kCount;
  g.count = n;
  return g;
}

Status apply_option(JobOptions& opts, OptionId id, const char* arg) {
  std::string_view value = arg ? arg : "";
  switch (id) {
    case OptionId::kContainerImage:
      if (value.empty())
        return Status::error("--container-image needs an image, e.g. --container-image=ubuntu",
                             EINVAL);
      opts.container_image = std::string(value);
      return Status();
    case OptionId::kDlHostLibs: {
      opts.dl_host_libs.clear();
      size_t i = 0;
      while (i <= value.size()) {
        size_t j = std::min(value.find(',', i), value.size());
        std::string_view name = value.substr(i, j - i);
        if (name.empty() || name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") !=
                                std::string_view::npos)
          return Status::error("--dl-host-libs='" + std::string(value) +
                                   "': set names are lowercase words separated by commas, e.g. "
                                   "--dl-host-libs=mpi,nccl",
                               EINVAL);
        opts.dl_host_libs.emplace_back(name);
        i = j + 1;
      }
      return Status();
    }
    case OptionId::kDlExplain:
      opts.dl_explain = true;
      return Status();
    case OptionId::kDlGpus: {
      auto g = parse_dl_gpus(value);
      SLIPWAY_TRY(g);
      opts.dl_gpus = *g;
      return Status();
    }
  }
  return Status::error("unknown option", EINVAL);
}

}  // namespace slipway::spank
