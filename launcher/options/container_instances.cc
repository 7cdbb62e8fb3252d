// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The instance directories of containers shared by steps (see container_instances.h).
#include "options/container_instances.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <sstream>

#include "common/file_util.h"
#include "options/container_plan.h"

namespace slipway::launcher {
namespace {

constexpr size_t kMaxEntry = 4096;

// The inode of PID's mount namespace, or 0 if PID is gone or not ours to look at.
ino_t mount_namespace_of(pid_t pid) {
  struct stat st;
  const std::string ns = "/proc/" + std::to_string(pid) + "/ns/mnt";
  return stat(ns.c_str(), &st) == 0 ? st.st_ino : 0;
}

struct Entry {
  Instance instance;
  ino_t mntns = 0;
  time_t since = 0;
};

bool parse_entry(const std::string& text, Entry& e) {
  std::istringstream in(text);
  int remap = 0, writable = 0, net = 0, ipc = 0, uts = 0;
  if (!(in >> e.mntns >> remap >> writable >> net >> ipc >> uts >> e.instance.image)) return false;
  e.instance.remap_root = remap != 0;
  e.instance.writable = writable != 0;
  e.instance.net = net != 0, e.instance.ipc = ipc != 0, e.instance.uts = uts != 0;
  return true;
}

}  // namespace

std::string instance_dir(const std::string& scope_dir, const std::string& name) {
  return scope_dir + "/" + name + ".run";
}

Status record_instance(const std::string& dir, pid_t holder, const LaunchSpec& spec,
                       const std::string& image) {
  SLIPWAY_TRY(make_private_dirs(dir));
  const ino_t ns = mount_namespace_of(holder);
  if (ns == 0) return Status::error("the container holder " + std::to_string(holder) + " is gone", ESRCH);
  std::ostringstream out;
  out << ns << ' ' << spec.remap_root << ' ' << spec.writable << ' ' << spec.unshare_net << ' '
      << spec.unshare_ipc << ' ' << spec.unshare_uts << ' ' << image << '\n';
  return write_file_atomic(dir + "/" + std::to_string(holder), out.str());
}

std::vector<Instance> live_instances(const std::string& dir) {
  std::vector<Entry> live;
  DIR* d = opendir(dir.c_str());
  if (!d) return {};
  while (const dirent* de = readdir(d)) {
    pid_t pid = 0;
    const char* end = de->d_name + strlen(de->d_name);
    auto [p, ec] = std::from_chars(de->d_name, end, pid);
    if (ec != std::errc() || p != end || pid <= 0) continue;  // ".", "..", temp files
    const std::string path = dir + "/" + de->d_name;
    auto text = read_file_limited(path, kMaxEntry);
    Entry e;
    struct stat st;
    if (!text.ok() || !parse_entry(*text, e) || mount_namespace_of(pid) != e.mntns ||
        lstat(path.c_str(), &st) != 0) {
      unlink(path.c_str());  // its holder is gone (or the record is not one of ours)
      continue;
    }
    e.instance.pid = pid;
    e.since = st.st_mtime;
    live.push_back(std::move(e));
  }
  closedir(d);
  std::sort(live.begin(), live.end(), [](const Entry& a, const Entry& b) { return a.since < b.since; });
  std::vector<Instance> out;
  for (auto& e : live) out.push_back(std::move(e.instance));
  return out;
}

Status take_instance_settings(const Instance& instance, const std::string& name,
                              const std::string& node, LaunchSpec& spec) {
  // As pyxis: a namespace the step asks to unshare must be one the running container has.
  const struct {
    bool wanted, has;
    const char* option;
    const char* phrase;
  } namespaces[] = {{spec.unshare_net, instance.net, "net", "network"},
                    {spec.unshare_ipc, instance.ipc, "ipc", "IPC"},
                    {spec.unshare_uts, instance.uts, "uts", "UTS"}};
  for (const auto& ns : namespaces)
    if (ns.wanted && !ns.has)
      return Status::error(std::string("--container-unshare=") + ns.option + ": container '" + name +
                               "' running on " + node + " is not in a separate " + ns.phrase +
                               " namespace, and a step that joins it cannot have one; leave " +
                               ns.option + " out, or start the container with it",
                           EINVAL);
  spec.remap_root = instance.remap_root;
  spec.writable = instance.writable;
  spec.unshare_net = instance.net;
  spec.unshare_ipc = instance.ipc;
  spec.unshare_uts = instance.uts;
  return Status();
}

}  // namespace slipway::launcher
