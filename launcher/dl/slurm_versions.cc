// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The tested Slurm releases against the running one (see slurm_versions.h).
#include "dl/slurm_versions.h"

#include <unistd.h>

#include <cctype>

#include "common/child.h"

namespace slipway::launcher {

std::string tested_stack(const TestedSlurm& t) {
  return "Slurm " + std::string(t.release) + " with PMIx " + std::string(t.pmix) + " and Open MPI " +
         std::string(t.openmpi) + " on " + std::string(t.distribution);
}

std::string slurm_release_of(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (!isdigit(static_cast<unsigned char>(text[i])) ||
        (i > 0 && (isalnum(static_cast<unsigned char>(text[i - 1])) || text[i - 1] == '.')))
      continue;
    size_t dot = i;
    while (dot < text.size() && isdigit(static_cast<unsigned char>(text[dot]))) ++dot;
    size_t end = dot + 1;
    while (end < text.size() && isdigit(static_cast<unsigned char>(text[end]))) ++end;
    if (dot < text.size() && text[dot] == '.' && end > dot + 1)
      return std::string(text.substr(i, end - i));
    i = end - 1;
  }
  return "";
}

std::string installed_slurm_version(double timeout_s) {
  auto child = spawn({.name = "slipway-sinfo", .die_with_parent = true, .capture_output = true},
                     [](int) {
                       execlp("sinfo", "sinfo", "--version", static_cast<char*>(nullptr));
                       return 127;
                     });
  if (!child.ok()) return "";
  ChildExit done = child->wait(timeout_s);
  if (!done.ok()) return "";
  std::string out = done.output;
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

Finding check_slurm_version(std::string_view version) {
  if (version.empty())
    return {"slurm", Verdict::kSkip,
            "no Slurm version: 'sinfo --version' is not on PATH or failed (it needs slurm.conf)", ""};
  const std::string release = slurm_release_of(version);
  std::string tested;
  for (const auto& t : kTestedSlurm) {
    if (t.release == release)
      return {"slurm", Verdict::kOk,
              std::string(version) + ": release " + release + " is tested (" + tested_stack(t) + ")",
              ""};
    tested += (tested.empty() ? "" : ", ") + std::string(t.release);
  }
  return {"slurm", Verdict::kWarn,
          std::string(version) + " is not a release Slipway is tested on (tested: " + tested + ")",
          "build the plugin against this Slurm (it loads only into the release it was built for) "
          "and run the cluster tests (tests/cluster) here, or use a tested release"};
}

}  // namespace slipway::launcher
