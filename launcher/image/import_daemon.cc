// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// import_image() for dockerd://NAME and podman://NAME (enroot's schemes, which pyxis passes on):
// the image is exported from the node's Docker daemon or the user's rootless Podman store with
// `docker save` / `podman save --format docker-archive`, run as the calling user, into an unnamed
// file in the cache (O_TMPFILE: nothing is left behind, whatever happens), and imported from there
// as a docker-archive. The cache entry is the archive's (its digest comes from the image's config
// and layers), so a second step finds it cached after the export; the export itself runs each
// time, as enroot's does, since only the daemon knows whether NAME still names the same image.
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/run_tool.h"
#include "common/unique_fd.h"
#include "image/import_build.h"

namespace slipway::launcher {
namespace {

// What docker and podman need from the environment: where the user's store and runtime files
// are (HOME, XDG_*), and which daemon to ask (DOCKER_HOST, CONTAINER_HOST).
bool is_ours(const char* dir) {
  struct stat st;
  return dir && stat(dir, &st) == 0 && st.st_uid == getuid();
}

std::vector<std::string> tool_environment() {
  std::vector<std::string> env;
  for (const char* name : {"XDG_DATA_HOME", "XDG_CONFIG_HOME", "DOCKER_HOST", "DOCKER_CONFIG",
                           "CONTAINER_HOST", "CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF"})
    if (const char* v = getenv(name)) env.push_back(std::string(name) + "=" + v);
  // slurmstepd's import child has slurmstepd's environment, not the job's (HOME=/root there):
  // a home or runtime directory that is not the user's comes from the password database and
  // /run/user instead.
  if (const char* home = getenv("HOME"); is_ours(home)) {
    env.push_back(std::string("HOME=") + home);
  } else {
    struct passwd pw, *res = nullptr;
    std::vector<char> buf(16384);
    if (getpwuid_r(getuid(), &pw, buf.data(), buf.size(), &res) == 0 && res)
      env.push_back(std::string("HOME=") + res->pw_dir);
  }
  const std::string run_user = "/run/user/" + std::to_string(getuid());
  if (const char* run = getenv("XDG_RUNTIME_DIR"); is_ours(run))
    env.push_back(std::string("XDG_RUNTIME_DIR=") + run);
  else if (is_ours(run_user.c_str()))
    env.push_back("XDG_RUNTIME_DIR=" + run_user);
  return env;
}

}  // namespace

Result<ImportedImage> import_daemon_image(const ImageRef& ref, const ImportOptions& opts) {
  const std::string text = ref.str();
  const std::string tool = find_tool(ref.daemon.c_str());
  if (tool.empty())
    return Status::error("cannot import '" + text + "': " + ref.daemon + " is not installed on this "
                             "node; import the image from a registry or an archive instead",
                         ENOENT);
  NodeCache cache(opts.cache_dir);
  SLIPWAY_TRY(cache.ensure_layout());
  UniqueFd archive(open(cache.root().c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!archive.valid()) return Status::from_errno("create a temporary file in " + cache.root(), errno);
  std::vector<std::string> argv = {tool, "save"};
  if (ref.daemon == "podman") argv.insert(argv.end(), {"--format", "docker-archive"});
  argv.push_back(ref.repository);
  if (std::string why = run_tool(argv, archive.get(), -1, opts.bounds.max_image_bytes, tool_environment());
      !why.empty())
    return Status::error("cannot export '" + text + "' from " + ref.daemon + ": " + why +
                             "; check the name with '" + ref.daemon + " images'",
                         EIO);
  ImageRef local;
  local.kind = ImageRef::Kind::kArchive;
  local.path = "/proc/self/fd/" + std::to_string(archive.get());
  local.origin = text;
  return import_local_image(local, opts);
}

}  // namespace slipway::launcher
