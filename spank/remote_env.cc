// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Typed wrappers over the SPANK item and environment calls (see remote_env.h).
#include "remote_env.h"

#include <pwd.h>

#include <vector>

namespace slipway::spank {

std::optional<std::string> job_getenv(spank_t sp, const char* name) {
  std::vector<char> buf(4096);
  for (int attempt = 0; attempt < 4; ++attempt) {
    spank_err_t rc = spank_getenv(sp, name, buf.data(), static_cast<int>(buf.size()));
    if (rc == ESPANK_SUCCESS) return std::string(buf.data());
    if (rc != ESPANK_NOSPACE) return std::nullopt;
    buf.resize(buf.size() * 8);
  }
  return std::nullopt;
}

std::optional<StepIds> step_ids(spank_t sp) {
  StepIds ids;
  if (spank_get_item(sp, S_JOB_ID, &ids.job_id) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_STEPID, &ids.step_id) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_UID, &ids.uid) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_GID, &ids.gid) != ESPANK_SUCCESS)
    return std::nullopt;
  return ids;
}

std::string home_of(uid_t uid) {
  struct passwd pw, *res = nullptr;
  std::vector<char> buf(16384);
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &res) != 0 || !res || !res->pw_dir) return "";
  return res->pw_dir;
}

}  // namespace slipway::spank
