// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Node diagnosis (see doctor.h). Probes that change process state (unshare, mount, dlopen) run in
// a child (common/child.h) that reports one status word and an errno through a pipe, so the caller (the
// `slipway` command or slurmstepd's plugin) is never touched by them.
#include "dl/doctor.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <grp.h>
#include <netdb.h>
#include <poll.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "common/child.h"
#include "common/file_util.h"
#include "common/unique_fd.h"
#include "dl/gpu.h"
#include "dl/nvidia_env.h"
#include "dl/ld_cache.h"
#include "dl/slurm_versions.h"
#include "runtime/squashfs_mount.h"

namespace slipway::launcher {
namespace {

std::string read_value(const std::string& path) {
  std::ifstream in(path);
  std::string v;
  std::getline(in, v);
  return v;
}

// Runs `probe` in a forked child; returns its result (0 = worked, else an errno) and, when the
// probe fills it, a message.
struct ProbeResult {
  int err = 0;
  std::string message;
};

template <class F>
ProbeResult in_child(F&& probe) {
  auto child = spawn({}, [&](int report_fd) {
    std::string msg;
    int err = probe(msg);
    std::string out = std::to_string(err) + " " + msg;
    (void)!write(report_fd, out.data(), out.size());
    return 0;
  });
  if (!child.ok()) return {child.status().error_number(), child.status().message()};
  const std::string got = child->wait().report;
  if (got.empty()) return {EIO, "the probe died"};
  size_t sp = got.find(' ');
  return {atoi(got.substr(0, sp).c_str()), sp == std::string::npos ? "" : got.substr(sp + 1)};
}

// As root, probe as `nobody`: what an unprivileged job user gets is what matters.
// Changing uid clears the dumpable flag, which leaves /proc/self/uid_map root's
// (docs/platform.md, "SPANK callbacks").
void become_unprivileged() {
  if (geteuid() != 0) return;
  // Root's supplementary groups go first: nobody has none (rpmlint's setgroups-before-setuid).
  if (setgroups(0, nullptr) == 0 && setgid(65534) == 0 && setuid(65534) == 0)
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
}

int write_file(const char* path, const std::string& data) {
  UniqueFd fd(open(path, O_WRONLY | O_CLOEXEC));
  if (!fd.valid() || write(fd.get(), data.data(), data.size()) < 0) return errno;
  return 0;
}

// A new user namespace with our one id mapped, and a mount namespace it owns.
int enter_userns(std::string& msg) {
  const uid_t uid = getuid();
  const gid_t gid = getgid();
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return msg = "unshare", errno;
  if (int e = write_file("/proc/self/setgroups", "deny")) return msg = "setgroups", e;
  if (int e = write_file("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1")) return msg = "uid_map", e;
  if (int e = write_file("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1")) return msg = "gid_map", e;
  return 0;
}

Finding userns_failure(int err) {
  Finding f{"userns", Verdict::kFail, "", ""};
  const std::string max = read_value("/proc/sys/user/max_user_namespaces");
  const std::string clone = read_value("/proc/sys/kernel/unprivileged_userns_clone");
  const std::string apparmor = read_value("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
  if (max == "0") {
    f.detail = "unprivileged user namespaces are off: user.max_user_namespaces=0";
    f.fix = "sysctl -w user.max_user_namespaces=15000 (and set it in /etc/sysctl.d/ to keep it)";
  } else if (clone == "0") {
    f.detail = "unprivileged user namespaces are off: kernel.unprivileged_userns_clone=0";
    f.fix = "sysctl -w kernel.unprivileged_userns_clone=1";
  } else if (apparmor == "1") {
    f.detail = "AppArmor restricts unprivileged user namespaces "
               "(kernel.apparmor_restrict_unprivileged_userns=1)";
    f.fix = "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile "
            "allowing userns for slurmstepd";
  } else if (err == ENOSPC) {
    f.detail = "the user namespace limit is reached (user.max_user_namespaces=" + max + ")";
    f.fix = "raise user.max_user_namespaces, or find what holds so many namespaces";
  } else {
    f.detail = std::string("cannot create a user namespace: ") + strerror(err);
    f.fix = "check seccomp filters or the container this node runs in";
  }
  return f;
}

std::string gib(double bytes) {
  char buf[32];
  snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  return buf;
}

}  // namespace

Finding check_user_namespaces() {
  auto r = in_child([](std::string& msg) {
    become_unprivileged();
    return enter_userns(msg);
  });
  if (r.err != 0 && r.message != "unshare") {
    Finding f = userns_failure(r.err);
    f.detail = "a user namespace was created, but writing its " + r.message + " failed: " +
               strerror(r.err);
    f.fix = "check that nothing (seccomp, LSM) restricts /proc/self/uid_map";
    return f;
  }
  if (r.err != 0) return userns_failure(r.err);
  return {"userns", Verdict::kOk,
          "unprivileged user namespaces work (user.max_user_namespaces=" +
              read_value("/proc/sys/user/max_user_namespaces") + ")",
          ""};
}

Finding check_overlay_in_userns() {
  char tmpl[] = "/tmp/slipway-doctor.XXXXXX";
  if (!mkdtemp(tmpl)) return {"overlay", Verdict::kWarn, "cannot create a scratch dir in /tmp", ""};
  const std::string dir = tmpl;
  chmod(dir.c_str(), 0777);  // the probe may run as nobody
  auto r = in_child([&](std::string& msg) {
    become_unprivileged();
    if (int e = enter_userns(msg)) return msg = "userns", e;
    if (mount("slipway", dir.c_str(), "tmpfs", 0, "mode=0755") != 0) return msg = "tmpfs", errno;
    for (const char* d : {"/l", "/u", "/w", "/m"}) mkdir((dir + d).c_str(), 0755);
    std::string opts = "lowerdir=" + dir + "/l,upperdir=" + dir + "/u,workdir=" + dir + "/w";
    if (mount("overlay", (dir + "/m").c_str(), "overlay", 0, (opts + ",userxattr").c_str()) == 0 ||
        mount("overlay", (dir + "/m").c_str(), "overlay", 0, opts.c_str()) == 0)
      return 0;
    return msg = "overlay", errno;
  });
  rmdir(dir.c_str());
  if (r.err == 0)
    return {"overlay", Verdict::kOk, "overlayfs mounts inside a user namespace", ""};
  if (r.message == "userns")
    return {"overlay", Verdict::kSkip, "not tried: user namespaces do not work", ""};
  return {"overlay", Verdict::kFail,
          "cannot mount " + r.message + " inside a user namespace: " + strerror(r.err),
          "use a kernel >= 5.11 (overlayfs in user namespaces)"};
}

// A FUSE mount inside a user namespace, as a squashfs image gets one (no daemon needed: the mount
// itself is what the kernel may refuse), and squashfuse_ll to serve it.
Finding check_fuse_in_userns() {
  const std::string why = squashfs_mount_unavailable();
  const std::string fix = "apt install squashfuse; /dev/fuse mode 0666 (Debian's default)";
  if (geteuid() != 0 && !why.empty())
    return {"fuse", Verdict::kWarn, "squashfs images are unpacked, not mounted: " + why, fix};
  char tmpl[] = "/tmp/slipway-doctor.XXXXXX";
  if (!mkdtemp(tmpl)) return {"fuse", Verdict::kWarn, "cannot create a scratch dir in /tmp", ""};
  const std::string dir = tmpl;
  chmod(dir.c_str(), 0777);  // the probe may run as nobody
  auto r = in_child([&](std::string& msg) {
    become_unprivileged();
    if (int e = enter_userns(msg)) return msg = "userns", e;
    const int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (fd < 0) return msg = "open /dev/fuse", errno;
    const std::string opts = "fd=" + std::to_string(fd) + ",rootmode=40000,user_id=" +
                             std::to_string(getuid()) + ",group_id=" + std::to_string(getgid());
    if (mount("slipway-doctor", dir.c_str(), "fuse.squashfuse", MS_RDONLY, opts.c_str()) != 0)
      return msg = "mount FUSE", errno;
    return 0;
  });
  rmdir(dir.c_str());
  if (r.message == "userns")
    return {"fuse", Verdict::kSkip, "not tried: user namespaces do not work", ""};
  if (r.err != 0)
    return {"fuse", Verdict::kWarn,
            "squashfs images are unpacked, not mounted: cannot " + r.message +
                " inside a user namespace: " + strerror(r.err),
            fix};
  if (!why.empty())
    return {"fuse", Verdict::kWarn, "squashfs images are unpacked, not mounted: " + why, fix};
  return {"fuse", Verdict::kOk, "squashfs images are mounted (FUSE in a user namespace, squashfuse_ll)",
          ""};
}

Finding check_cache_dir(const std::string& dir) {
  std::string probe = dir;
  while (!probe.empty() && !is_dir(probe)) probe = probe.substr(0, probe.rfind('/'));
  if (probe.empty()) probe = "/";
  struct statvfs vfs;
  if (statvfs(probe.c_str(), &vfs) != 0)
    return {"cache", Verdict::kFail, "cannot stat " + probe + ": " + strerror(errno), ""};
  const double avail = static_cast<double>(vfs.f_bavail) * static_cast<double>(vfs.f_frsize);
  const std::string what = "cache " + dir + ": " + gib(avail) + " free on " + probe;
  if (access(probe.c_str(), W_OK) != 0)
    return {"cache", Verdict::kFail, what + ", not writable by uid " + std::to_string(getuid()),
            "set cache_dir= (plugstack.conf) or SLIPWAY_CACHE_DIR to a writable directory"};
  if (avail < 1024.0 * 1024 * 1024)
    return {"cache", Verdict::kFail, what, "free space there, or point cache_dir= elsewhere"};
  if (avail < 10.0 * 1024 * 1024 * 1024)
    return {"cache", Verdict::kWarn, what + " (large images need more)", ""};
  return {"cache", Verdict::kOk, what, ""};
}

Finding check_registry(const std::string& host_port, int timeout_ms) {
  size_t colon = host_port.rfind(':');
  std::string host = host_port.substr(0, colon), port = colon == std::string::npos ? "443" : host_port.substr(colon + 1);
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (int e = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); e != 0)
    return {"registry", Verdict::kFail, "cannot resolve " + host + ": " + gai_strerror(e),
            "check the registry name in default_registry= / the image reference, and DNS"};
  int err = ETIMEDOUT;
  for (addrinfo* a = res; a && err != 0; a = a->ai_next) {
    UniqueFd s(socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!s.valid()) continue;
    if (connect(s.get(), a->ai_addr, a->ai_addrlen) == 0) { err = 0; break; }
    if (errno != EINPROGRESS) { err = errno; continue; }
    pollfd p{s.get(), POLLOUT, 0};
    if (poll(&p, 1, timeout_ms) != 1) { err = ETIMEDOUT; continue; }
    socklen_t len = sizeof err;
    getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  }
  freeaddrinfo(res);
  if (err != 0)
    return {"registry", Verdict::kFail, "cannot connect to " + host_port + ": " + strerror(err),
            "start the registry or open the network path from this node to it"};
  return {"registry", Verdict::kOk, host_port + " reachable", ""};
}

Finding check_slurm_pmix(const std::string& plugin_dir) {
  if (!is_dir(plugin_dir))
    return {"pmix", Verdict::kSkip, "no Slurm plugin directory " + plugin_dir, ""};
  const bool plugin = access((plugin_dir + "/mpi_pmix.so").c_str(), R_OK) == 0 ||
                      access((plugin_dir + "/mpi_pmix_v4.so").c_str(), R_OK) == 0;
  auto cache = LdCache::load("/etc/ld.so.cache");
  const LdCacheEntry* lib = cache.ok() ? cache->find("libpmix.so") : nullptr;
  if (!plugin)
    return {"pmix", Verdict::kFail, "Slurm's mpi/pmix plugin is missing from " + plugin_dir,
            "install slurm-wlm-basic-plugins (Debian) or build Slurm --with-pmix"};
  if (!lib)
    return {"pmix", Verdict::kFail,
            "mpi/pmix is installed but the unversioned libpmix.so it opens is not in the ld.so cache",
            "install libpmix-dev (Debian), or link libpmix.so to libpmix.so.2"};
  return {"pmix", Verdict::kOk, "mpi/pmix plugin present, libpmix.so -> " + lib->path, ""};
}

Finding check_gpus(const std::string& root) {
  auto gpus = node_gpus(root);
  if (gpus.empty()) return {"gpus", Verdict::kSkip, "no NVIDIA GPUs (no /dev/nvidiaN)", ""};
  std::vector<int> minors;
  for (const auto& g : gpus) minors.push_back(g.minor);
  std::string detail = std::to_string(gpus.size()) + " GPU(s): /dev/nvidia" + format_cpulist(minors);
  for (const char* ctl : {"/dev/nvidiactl", "/dev/nvidia-uvm"})
    if (access(in_root(root, ctl).c_str(), F_OK) != 0)
      return {"gpus", Verdict::kFail, detail + ", but " + ctl + " is missing",
              "load the nvidia and nvidia-uvm modules (nvidia-modprobe -u -c=0)"};
  auto cache = LdCache::load(in_root(root, "/etc/ld.so.cache"));
  const LdCacheEntry* cuda = cache.ok() ? cache->find("libcuda.so.1") : nullptr;
  for (const char* lib : {"libcuda.so.1", "libnvidia-ml.so.1"})
    if (!cache.ok() || !cache->find(lib))
      return {"gpus", Verdict::kFail, detail + ", but " + lib + " is not in the ld.so cache",
              "install the driver's user-space libraries and run ldconfig"};
  const DriverInfo driver = host_driver(root, *cache);
  if (!driver.version.empty()) detail += ", driver " + driver.version + " (CUDA " + driver.cuda() + ")";
  return {"gpus", Verdict::kOk, detail + ", libcuda.so.1 -> " + cuda->path, ""};
}

std::vector<Finding> check_host_libs(const std::vector<HostLibSet>& sets) {
  std::vector<Finding> out;
  auto cache = LdCache::load("/etc/ld.so.cache");
  for (const auto& set : sets) {
    const std::string name = "hostlibs:" + set.name;
    InjectRequest req{{set.name}, "/", "/", MpiAbiRule::kMajor};
    auto plan = cache.ok() ? plan_injection(sets, req, *cache) : Result<InjectionPlan>(cache.status());
    if (!plan.ok()) {
      out.push_back({name, Verdict::kFail, plan.status().message(), "fix host_libs= in plugstack.conf"});
      continue;
    }
    // Present is not enough: load each library the set names as a program would, its
    // dependencies with it, in the loader's order. A dependency alone may not load: UCX's libucm
    // uses libucs's symbols without naming libucs (OpenMPI 5 on Debian 13).
    std::string failed;
    for (const auto& lib : plan->libs) {
      if (!lib.named) continue;
      auto r = in_child([&](std::string& msg) {
        if (dlopen(lib.host_path.c_str(), RTLD_NOW | RTLD_LOCAL)) return 0;
        const char* e = dlerror();
        msg = e ? e : "dlopen failed";
        return EIO;
      });
      if (r.err != 0) failed += (failed.empty() ? "" : "; ") + r.message;
    }
    if (!failed.empty())
      out.push_back({name, Verdict::kFail, "cannot load: " + failed, "fix the installation on the node"});
    else
      out.push_back({name, Verdict::kOk,
                     std::to_string(plan->libs.size()) + " libraries present and loadable", ""});
  }
  return out;
}

std::vector<Finding> run_doctor(const DoctorOptions& o) {
  std::vector<Finding> out{check_user_namespaces(), check_overlay_in_userns(),
                           check_fuse_in_userns()};
  if (!o.cache_dir.empty()) out.push_back(check_cache_dir(o.cache_dir));
  for (const auto& r : o.registries) out.push_back(check_registry(r, o.timeout_ms));
  out.push_back(check_slurm_version(o.slurm_version.empty() ? installed_slurm_version()
                                                             : o.slurm_version));
  out.push_back(check_slurm_pmix(o.slurm_plugin_dir));
  out.push_back(check_gpus(o.root));
  out.push_back(check_fabric(o.root, o.fabric));
  for (auto& f : check_host_libs(o.host_lib_sets)) out.push_back(std::move(f));
  return out;
}

std::string format_findings(const std::vector<Finding>& findings) {
  std::string out;
  for (const auto& f : findings) {
    const char* word = f.verdict == Verdict::kOk     ? "ok  "
                       : f.verdict == Verdict::kWarn ? "warn"
                       : f.verdict == Verdict::kFail ? "FAIL"
                                                     : "skip";
    out += std::string(word) + "  " + f.check + ": " + f.detail + (f.fix.empty() ? "" : "; fix: " + f.fix) + "\n";
  }
  return out;
}

bool has_failures(const std::vector<Finding>& findings) {
  for (const auto& f : findings)
    if (f.verdict == Verdict::kFail) return true;
  return false;
}

}  // namespace slipway::launcher
