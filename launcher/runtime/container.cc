// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Building and entering containers (see container.h). The steps, in order:
// 1. build_container(): a new user namespace with a one-id map (the job's uid/gid, or 0 with remap_root) and a new mount
//    namespace (unshare(2)); one mapped id is enough because the image files were unpacked by the
//    user and so are owned by that one id (charliecloud's reasoning, user_namespaces(7));
// 2. the root: an overlay of the cached image under a tmpfs upper, so mount points can be created and
//    writes never reach the cache; then /dev, /proc, /sys, /tmp, the binds, the host files;
// 3. enter_root(): a child mount namespace for the task, its own binds, then pivot_root(".", ".")
//    and a lazy unmount of the old root (pivot_root(2), "NOTES");
// 4. join_container(): the task's root joins the holder's root in one peer group, so that what a
//    task mounts in the container every task and attaching step sees, as in pyxis's one namespace
//    ("Mount propagation" below).
#include "runtime/container.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "runtime/mounts.h"
#include "runtime/squashfs_mount.h"

namespace slipway::launcher {
namespace {

// openat2(2) of a path inside a container root, as if it were "/" (symlinks stay inside).
constexpr struct open_how kInRoot = {.flags = O_PATH | O_CLOEXEC, .mode = 0,
                                     .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};

Status write_proc_file(const char* path, const std::string& data) {
  UniqueFd fd(open(path, O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::from_errno(std::string("open ") + path, errno);
  if (write(fd.get(), data.data(), data.size()) != static_cast<ssize_t>(data.size()))
    return Status::from_errno(std::string("write ") + path, errno);
  return Status();
}

// Brings the loopback interface of a fresh network namespace up (netdevice(7), SIOCSIFFLAGS).
Status loopback_up() {
  UniqueFd sock(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return Status::from_errno("socket", errno);
  struct ifreq ifr = {};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  SLIPWAY_SYS(ioctl(sock.get(), SIOCGIFFLAGS, &ifr), "read the flags of lo");
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
  SLIPWAY_SYS(ioctl(sock.get(), SIOCSIFFLAGS, &ifr), "bring lo up");
  return Status();
}

// --container-unshare: namespaces owned by the container's user namespace.
Status unshare_optional(const LaunchSpec& spec) {
  int flags = (spec.unshare_net ? CLONE_NEWNET : 0) | (spec.unshare_ipc ? CLONE_NEWIPC : 0) |
              (spec.unshare_uts ? CLONE_NEWUTS : 0);
  if (flags == 0) return Status();
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  SLIPWAY_SYS(unshare(flags), "unshare the container's net/ipc/uts namespaces");
  if (spec.unshare_uts) SLIPWAY_SYS(sethostname(host, std::strlen(host)), "sethostname");
  if (spec.unshare_net) SLIPWAY_TRY(loopback_up());
  return Status();
}

// A new user namespace in which the caller is INNER_UID/INNER_GID (OUTER_UID/OUTER_GID, as the
// parent namespace knows them, which must be the caller's own), and a mount namespace it owns.
Status new_user_and_mount_namespace(uid_t inner_uid, gid_t inner_gid, uid_t outer_uid,
                                    gid_t outer_gid) {
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS) == -1) {
    int e = errno;
    return Status::error(std::string("cannot create a user namespace: ") + strerror(e) +
                             (e == ENOSPC || e == EPERM
                                  ? "; unprivileged user namespaces are off on this node (sysctl "
                                    "user.max_user_namespaces, kernel.unprivileged_userns_clone); "
                                    "run 'slipway doctor'"
                                  : ""),
                         e);
  }
  // An unprivileged writer must deny setgroups(2) before it may write gid_map.
  SLIPWAY_TRY(write_proc_file("/proc/self/setgroups", "deny"));
  SLIPWAY_TRY(write_proc_file("/proc/self/uid_map",
                              std::to_string(inner_uid) + " " + std::to_string(outer_uid) + " 1\n"));
  SLIPWAY_TRY(write_proc_file("/proc/self/gid_map",
                              std::to_string(inner_gid) + " " + std::to_string(outer_gid) + " 1\n"));
  // Nothing we mount may propagate back to the node, and pivot_root refuses shared mounts.
  SLIPWAY_SYS(mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), "make / private");
  return Status();
}

// Into the container's user and mount namespaces (and net/ipc/uts where SPEC unshares them).
// Returns the squashfs image's detached mount for mount_overlay_root(), or an invalid fd.
Result<UniqueFd> enter_namespaces(const LaunchSpec& spec) {
  // slurmstepd set our uid, which cleared the dumpable flag and left /proc/self/uid_map owned by
  // root; make it ours again (execve(2) resets the flag before the user's program runs).
  SLIPWAY_SYS(prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl(PR_SET_DUMPABLE)");
  const uid_t inner_uid = spec.remap_root ? 0 : spec.uid;
  const gid_t inner_gid = spec.remap_root ? 0 : spec.gid;
  UniqueFd lower;
  if (!spec.squashfs_file.empty()) {
    // A squashfs image is mounted one user namespace further out, where the user is root: its
    // files, root's in the file (what enroot and --container-save write), are then the user's
    // own, as an unpacked image's are, and the container's namespace inside it sees them as its
    // own user's (or root's, remapped). The mount stays detached until mount_overlay_root().
    SLIPWAY_TRY(new_user_and_mount_namespace(0, 0, spec.uid, spec.gid));
    auto mounted = mount_squashfs(spec.squashfs_file);
    if (!mounted.ok())
      return mounted.status().context("cannot mount squashfs image '" + spec.squashfs_file + "'");
    lower = std::move(*mounted);
    SLIPWAY_TRY(new_user_and_mount_namespace(inner_uid, inner_gid, 0, 0));
  } else {
    SLIPWAY_TRY(new_user_and_mount_namespace(inner_uid, inner_gid, spec.uid, spec.gid));
  }
  SLIPWAY_TRY(unshare_optional(spec));
  return lower;
}

bool has_overlay_special_chars(const std::string& p) {
  return p.find_first_of(",:\\") != std::string::npos;
}

// tmpfs on the scratch dir, holding the overlay's upper and work dirs and its mount point; the
// lower layer is the image's rootfs, or SQUASHFS (a detached mount) attached at lower/ there.
Result<std::string> mount_overlay_root(const LaunchSpec& spec, UniqueFd squashfs) {
  for (const std::string* p : {&spec.rootfs, &spec.scratch_dir})
    if (has_overlay_special_chars(*p))
      return Status::error("image path '" + *p + "' contains ',', ':' or '\\'; set a plain cache "
                           "directory", EINVAL);
  const std::string& s = spec.scratch_dir;
  SLIPWAY_SYS(mount("slipway", s.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755"),
              "mount tmpfs on " + s);
  for (const char* d : {"/upper", "/work", "/root"})
    SLIPWAY_SYS(mkdir((s + d).c_str(), 0755), "mkdir " + s + d);
  std::string lower = spec.rootfs;
  if (squashfs.valid()) {
    lower = s + "/lower";
    SLIPWAY_SYS(mkdir(lower.c_str(), 0755), "mkdir " + lower);
    SLIPWAY_SYS(move_mount(squashfs.get(), "", AT_FDCWD, lower.c_str(), MOVE_MOUNT_F_EMPTY_PATH),
                "attach the squashfs image at " + lower);
  }
  // A named container keeps its changes on disk, in its own directory, across steps.
  const std::string& layer = spec.persistent_dir.empty() ? s : spec.persistent_dir;
  if (!spec.persistent_dir.empty()) {
    if (has_overlay_special_chars(layer))
      return Status::error("container directory '" + layer + "' contains ',', ':' or '\\'", EINVAL);
    for (const char* d : {"/upper", "/work"})
      if (mkdir((layer + d).c_str(), 0700) == -1 && errno != EEXIST)
        return Status::from_errno("mkdir " + layer + d, errno);
  }
  std::string opts = "lowerdir=" + lower + ",upperdir=" + layer + "/upper,workdir=" + layer +
                     "/work";
  const std::string root = s + "/root";
  // userxattr: keep overlay metadata in user.* xattrs, the only ones a user namespace may write
  // (Documentation/filesystems/overlayfs.rst); older kernels without it get the plain options.
  if (mount("overlay", root.c_str(), "overlay", MS_NOSUID | MS_NODEV, (opts + ",userxattr").c_str()))
    SLIPWAY_SYS(mount("overlay", root.c_str(), "overlay", MS_NOSUID | MS_NODEV, opts.c_str()),
                "mount the image overlay (kernel >= 5.11 needed for overlayfs in a user namespace)");
  return root;
}

Status bind_at(int root_fd, const std::string& source, const std::string& dest, BindFlags flags) {
  struct stat st;
  SLIPWAY_SYS(stat(source.c_str(), &st), "bind " + source + " to " + dest);
  auto kind = S_ISDIR(st.st_mode) ? NodeKind::kDirectory : NodeKind::kFile;
  auto point = make_mount_point(root_fd, dest, kind);
  SLIPWAY_TRY(point);
  return bind_onto(source, point->get(), flags, source + " to " + dest);
}

constexpr std::array kDeviceNodes = {"null", "zero", "full", "random", "urandom", "tty"};
constexpr std::array<std::array<const char*, 2>, 5> kDevLinks = {{{"fd", "/proc/self/fd"},
                                                                  {"stdin", "/proc/self/fd/0"},
                                                                  {"stdout", "/proc/self/fd/1"},
                                                                  {"stderr", "/proc/self/fd/2"},
                                                                  {"ptmx", "pts/ptmx"}}};

// Binds host /dev/NAME onto a new NAME in `dev` (our fresh tmpfs: nothing in it can be a symlink
// planted by the image, so plain openat/mkdirat are safe). A node the host lacks is left out.
Status bind_dev_entry(int dev, const char* name, BindFlags flags) {
  const std::string host = std::string("/dev/") + name;
  UniqueFd tree(open_tree(AT_FDCWD, host.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
  if (!tree.valid()) return errno == ENOENT ? Status() : Status::from_errno("bind " + host, errno);
  struct mount_attr attr = {};
  attr.attr_set = MOUNT_ATTR_NOSUID | (flags.allow_devices ? 0 : MOUNT_ATTR_NODEV);
  SLIPWAY_SYS(mount_setattr(tree.get(), "", AT_EMPTY_PATH, &attr, sizeof attr),
              "bind " + host + ": set mount flags");
  struct stat st;
  SLIPWAY_SYS(fstat(tree.get(), &st), "stat " + host);
  UniqueFd target;
  if (S_ISDIR(st.st_mode)) {
    SLIPWAY_SYS(mkdirat(dev, name, 0755), "mkdir " + host + " in container");
    target.reset(openat(dev, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  } else {
    target.reset(openat(dev, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  }
  if (!target.valid()) return Status::from_errno("create " + host + " in container", errno);
  SLIPWAY_SYS(move_mount(tree.get(), "", target.get(), "",
                         MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH),
              "bind " + host);
  return Status();
}

// --container-unshare=ipc: POSIX shared memory and message queues of the container's own, as its
// System V IPC is: a fresh tmpfs on /dev/shm and the new IPC namespace's mqueue filesystem
// (mq_overview(7): an mqueue mount shows the queues of the mounter's IPC namespace).
Status mount_private_ipc(int dev) {
  for (const char* d : {"shm", "mqueue"})
    SLIPWAY_SYS(mkdirat(dev, d, d[0] == 's' ? 01777 : 0755), std::string("mkdir /dev/") + d);
  auto at = [&](const char* d) { return fd_path(dev) + "/" + d; };
  SLIPWAY_SYS(mount("shm", at("shm").c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"),
              "mount a private /dev/shm");
  SLIPWAY_SYS(mount("mqueue", at("mqueue").c_str(), "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                    nullptr),
              "mount a private /dev/mqueue");
  return Status();
}

// Terminals: a devpts of the container's own, whose ptmx anyone may open (ptmxmode=0666; /dev/ptmx
// links to it). The node's devpts is often mounted with ptmxmode=000, its ptmx reachable only
// through the /dev/ptmx device node, and a bind of that node cannot find its devpts from inside
// (devpts_acquire() in fs/devpts/inode.c looks for "pts" beside the node's own dentry): openpty(3)
// would fail. devpts may be mounted in a user namespace (FS_USERNS_MOUNT); no gid= since the tty
// group is not mapped. The terminal of `srun --pty` stays an inherited descriptor.
Status mount_devpts(int dev) {
  SLIPWAY_SYS(mkdirat(dev, "pts", 0755), "mkdir /dev/pts in container");
  SLIPWAY_SYS(mount("devpts", (fd_path(dev) + "/pts").c_str(), "devpts", MS_NOSUID | MS_NOEXEC,
                    "newinstance,ptmxmode=0666,mode=0620"),
              "mount devpts on /dev/pts");
  return Status();
}

// Mounts a fresh tmpfs over the container's /dev (whose mount point is `point`) and opens it.
Result<UniqueFd> mount_dev_tmpfs(int root_fd, int point, const std::string& what) {
  SLIPWAY_SYS(mount("tmpfs", fd_path(point).c_str(), "tmpfs", MS_NOSUID | MS_NOEXEC,
                    "mode=0755,size=64k"),
              "mount " + what);
  // `point` names the mount point under the tmpfs; resolve again to land on the tmpfs itself.
  auto top = make_mount_point(root_fd, "/dev", NodeKind::kDirectory);
  SLIPWAY_TRY(top);
  UniqueFd dev(openat(top->get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dev.valid()) return Status::from_errno("open " + what, errno);
  return dev;
}

// A fresh /dev holding only the harmless device nodes (bound from the host: a tmpfs made in a user
// namespace cannot hold usable device nodes), shared memory, message queues and ptys.
Status mount_dev(int root_fd, bool private_ipc) {
  auto point = make_mount_point(root_fd, "/dev", NodeKind::kDirectory);
  SLIPWAY_TRY(point);
  auto opened = mount_dev_tmpfs(root_fd, point->get(), "tmpfs on /dev in container");
  SLIPWAY_TRY(opened);
  UniqueFd dev = std::move(*opened);
  for (const char* node : kDeviceNodes)
    SLIPWAY_TRY(bind_dev_entry(dev.get(), node, {.recursive = false, .allow_devices = true}));
  if (private_ipc) {
    SLIPWAY_TRY(mount_private_ipc(dev.get()));
  } else {
    SLIPWAY_TRY(bind_dev_entry(dev.get(), "shm", {.recursive = false}));
    SLIPWAY_TRY(bind_dev_entry(dev.get(), "mqueue", {.recursive = false}));
  }
  SLIPWAY_TRY(mount_devpts(dev.get()));
  for (const auto& link : kDevLinks)
    SLIPWAY_SYS(symlinkat(link[1], dev.get(), link[0]), std::string("symlink /dev/") + link[0]);
  return Status();
}

Status mount_system(int root_fd, const LaunchSpec& spec) {
  SLIPWAY_TRY(mount_dev(root_fd, spec.unshare_ipc));
  // A fresh procfs needs a PID namespace of our own; the tasks of a step share the node's, so the
  // host's /proc is bound (as charliecloud does).
  SLIPWAY_TRY(bind_at(root_fd, "/proc", "/proc", {.recursive = true}));
  SLIPWAY_TRY(bind_at(root_fd, "/sys", "/sys", {.recursive = true, .read_only = true}));
  SLIPWAY_TRY(bind_at(root_fd, "/tmp", "/tmp", {.recursive = true}));
  return Status();
}

// --container-mounts=tmpfs:DST: a fresh tmpfs, open to all as /tmp is (the default of tmpfs).
Status mount_tmpfs_at(int root_fd, const Bind& b) {
  auto point = make_mount_point(root_fd, b.destination, NodeKind::kDirectory);
  SLIPWAY_TRY(point);
  unsigned long flags = MS_NOSUID | MS_NODEV | (b.read_only ? MS_RDONLY : 0) |
                        (b.no_exec ? MS_NOEXEC : 0);
  // Options later in the list win (tmpfs(5)): the user's mode= over the default.
  const std::string data = "mode=1777" + (b.tmpfs_options.empty() ? "" : "," + b.tmpfs_options);
  if (mount("tmpfs", fd_path(point->get()).c_str(), "tmpfs", flags, data.c_str()) != 0)
    return Status::error("--container-mounts=tmpfs:" + b.destination + (b.tmpfs_options.empty() ? "" : ":" + b.tmpfs_options) +
                             ": cannot mount a tmpfs: " + strerror(errno) + "; check its options",
                         errno);
  return Status();
}

// --container-mounts=umount:DST: the mount at DST goes (an image directory shows again).
Status detach_at(int root_fd, const std::string& dest) {
  struct open_how how = {};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  std::string rel = dest.substr(dest.find_first_not_of('/') == std::string::npos ? dest.size()
                                                                                 : dest.find_first_not_of('/'));
  UniqueFd fd(static_cast<int>(syscall(SYS_openat2, root_fd, rel.empty() ? "." : rel.c_str(), &how,
                                       sizeof how)));
  if (!fd.valid() || umount2(fd_path(fd.get()).c_str(), MNT_DETACH) != 0) {
    const int err = errno;
    if (err == ENOENT || err == EINVAL)
      return Status::error("--container-mounts=umount:" + dest + ": nothing is mounted at " + dest +
                               " in the container; drop it",
                           err);
    return Status::error("--container-mounts=umount:" + dest + ": cannot remove the mount at " +
                             dest + " in the container: " + strerror(err) + "; drop it",
                         err);
  }
  return Status();
}

Status mount_binds(int root_fd, const LaunchSpec& spec) {
  for (const auto& b : spec.binds) {
    if (b.tmpfs) {
      SLIPWAY_TRY(mount_tmpfs_at(root_fd, b));
      continue;
    }
    if (b.detach) {
      SLIPWAY_TRY(detach_at(root_fd, b.destination));
      continue;
    }
    if (b.optional && access(b.source.c_str(), F_OK) != 0) continue;
    Status st = bind_at(root_fd, b.source, b.destination,
                        {.recursive = b.recursive, .read_only = b.read_only,
                         .allow_devices = b.allow_devices, .no_exec = b.no_exec});
    // A user namespace may not leave out mounts below a bind source: they are locked to it.
    if (!st.ok() && !b.recursive && st.error_number() == EINVAL)
      return Status::error("--container-mounts: cannot bind '" + b.source + "' with norbind: it "
                           "has mounts below it, which a user namespace may not hide; drop norbind",
                           EINVAL);
    SLIPWAY_TRY(st);
  }
  for (const auto& f : spec.host_files) {
    if (access(f.c_str(), R_OK) != 0) continue;
    SLIPWAY_TRY(bind_at(root_fd, f, f, {.recursive = false, .read_only = true}));
  }
  return Status();
}

// --container-mounts flag unbindable. A copy of a mount namespace (unshare(CLONE_NEWNS), as each
// task makes) turns unbindable mounts into private ones, so every namespace marks them again. A
// fresh lookup of the destination lands on the mount itself, not on the directory beneath.
Status mark_unbindable(int root_fd, const std::vector<Bind>& binds) {
  for (const auto& b : binds) {
    if (!b.unbindable) continue;
    const size_t start = b.destination.find_first_not_of('/');
    const std::string rel = start == std::string::npos ? "" : b.destination.substr(start);
    UniqueFd fd(static_cast<int>(syscall(SYS_openat2, root_fd, rel.empty() ? "." : rel.c_str(),
                                         &kInRoot, sizeof kInRoot)));
    if (!fd.valid()) return Status::from_errno("open " + b.destination + " in the container", errno);
    SLIPWAY_SYS(mount(nullptr, fd_path(fd.get()).c_str(), nullptr, MS_UNBINDABLE, nullptr),
                "make " + b.destination + " unbindable");
  }
  return Status();
}

Status pivot_into(const std::string& root, const TaskView& task) {
  SLIPWAY_SYS(chdir(root.c_str()), "chdir " + root);
  // pivot_root(".", ".") stacks the old root on top of the new one; unmounting "." then removes the
  // old root and leaves the new one (pivot_root(2), NOTES). No directory in the image is needed.
  SLIPWAY_SYS(static_cast<int>(syscall(SYS_pivot_root, ".", ".")), "pivot_root into the image");
  SLIPWAY_SYS(umount2(".", MNT_DETACH), "detach the host root");
  SLIPWAY_SYS(chdir("/"), "chdir /");
  const std::string wd = task.workdir.empty() ? std::string("/") : task.workdir;
  if (chdir(wd.c_str()) == -1)
    // "PATH: No such file or directory", unquoted, as pyxis's "couldn't chdir to PATH: ..." has it.
    return Status::error("working directory in the container: " + wd + ": " + strerror(errno) +
                             "; check --container-workdir (or the image's WorkingDir)",
                         errno);
  return Status();
}

std::string root_of(const LaunchSpec& spec) { return spec.scratch_dir + "/root"; }

// A task that binds device nodes (its GPUs) gets a /dev of its own: a new tmpfs holding binds of
// the shared /dev's entries, so that the mount points it creates are not left in the /dev of the
// node's other tasks (another task's GPU would show there as an empty file /dev/nvidiaN, which a
// CUDA program would try to open).
Status private_dev(int root_fd) {
  auto shared = make_mount_point(root_fd, "/dev", NodeKind::kDirectory);
  SLIPWAY_TRY(shared);
  // The container's /dev is shared with the holder's (share_container_mounts()): in this task it
  // leaves that peer group, with everything below it, so neither the tmpfs stacked on it nor the
  // copies of its entries reach another task.
  SLIPWAY_SYS(mount(nullptr, fd_path(shared->get()).c_str(), nullptr, MS_REC | MS_PRIVATE, nullptr),
              "make the task's /dev private");
  UniqueFd old(openat(shared->get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!old.valid()) return Status::from_errno("open /dev in container", errno);
  struct Entry {
    std::string name, link;
    UniqueFd tree;
    bool dir = false;
  };
  std::vector<Entry> entries;
  DIR* d = fdopendir(dup(old.get()));
  if (!d) return Status::from_errno("read /dev in container", errno);
  while (dirent* e = readdir(d)) {
    Entry en{e->d_name, "", UniqueFd(), false};
    if (en.name == "." || en.name == "..") continue;
    char target[4096];
    ssize_t n = readlinkat(old.get(), e->d_name, target, sizeof target - 1);
    if (n >= 0) {
      en.link.assign(target, static_cast<size_t>(n));
    } else {
      struct stat st;
      en.tree.reset(open_tree(old.get(), e->d_name, OPEN_TREE_CLONE | AT_RECURSIVE | OPEN_TREE_CLOEXEC));
      if (!en.tree.valid() || fstat(en.tree.get(), &st) != 0) {
        closedir(d);
        return Status::from_errno("bind /dev/" + en.name + " for the task", errno);
      }
      en.dir = S_ISDIR(st.st_mode);
    }
    entries.push_back(std::move(en));
  }
  closedir(d);
  auto opened = mount_dev_tmpfs(root_fd, shared->get(), "the task's tmpfs on /dev");
  SLIPWAY_TRY(opened);
  UniqueFd dev = std::move(*opened);
  for (auto& en : entries) {
    if (!en.tree.valid()) {
      SLIPWAY_SYS(symlinkat(en.link.c_str(), dev.get(), en.name.c_str()), "symlink /dev/" + en.name);
      continue;
    }
    UniqueFd target;
    if (en.dir && mkdirat(dev.get(), en.name.c_str(), 0755) == 0)
      target.reset(openat(dev.get(), en.name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    else if (!en.dir)
      target.reset(openat(dev.get(), en.name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!target.valid()) return Status::from_errno("create /dev/" + en.name + " for the task", errno);
    SLIPWAY_SYS(move_mount(en.tree.get(), "", target.get(), "",
                           MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH),
                "bind /dev/" + en.name + " for the task");
  }
  return Status();
}

// A task's own binds must not propagate: each is attached to a mount that sends nothing to
// other namespaces. The root is a slave until the binds are made (enter_root()), /dev is private
// where the task has one of its own (private_dev()), and any other mount a bind lands on (a
// --container-mounts directory, /tmp) becomes a slave in this task, before the bind is made: it
// still receives the others' mounts, and sends none of this task's. The mount points themselves
// are created here.
Status keep_binds_to_this_task(int root_fd, const std::vector<Bind>& binds) {
  for (const auto& b : binds) {
    if (b.detach || (b.optional && access(b.source.c_str(), F_OK) != 0)) continue;
    struct stat st;
    NodeKind kind = NodeKind::kDirectory;
    if (!b.tmpfs) {
      if (stat(b.source.c_str(), &st) != 0) continue;  // mount_binds() says so
      if (!S_ISDIR(st.st_mode)) kind = NodeKind::kFile;
    }
    SLIPWAY_TRY(make_mount_point(root_fd, b.destination, kind));
    auto mount_root = open_mount_root(root_fd, b.destination);
    SLIPWAY_TRY(mount_root);
    SLIPWAY_SYS(mount(nullptr, fd_path(mount_root->get()).c_str(), nullptr, MS_SLAVE, nullptr),
                "keep the task's bind at " + b.destination + " to itself");
  }
  return Status();
}

// The task's binds land on the shared overlay, which is read-only: lift that on this task's own
// copy of the mount just long enough to create the mount points (empty, visible to all tasks;
// under /dev, the task's own: private_dev()).
Status make_task_mount_points(int root_fd, const LaunchSpec& spec, const TaskView& task) {
  if (task.binds.empty()) return Status();
  if (std::any_of(task.binds.begin(), task.binds.end(),
                  [](const Bind& b) { return b.destination.rfind("/dev/", 0) == 0; }))
    SLIPWAY_TRY(private_dev(root_fd));
  auto set_rdonly = [&](bool on) {
    struct mount_attr attr = {};
    (on ? attr.attr_set : attr.attr_clr) = MOUNT_ATTR_RDONLY;
    return mount_setattr(root_fd, "", AT_EMPTY_PATH, &attr, sizeof attr);
  };
  if (!spec.writable) SLIPWAY_SYS(set_rdonly(false), "make the task's root writable");
  LaunchSpec only_binds;
  only_binds.binds = task.binds;
  Status st = keep_binds_to_this_task(root_fd, task.binds);
  if (st.ok()) st = mount_binds(root_fd, only_binds);
  if (!spec.writable) SLIPWAY_SYS(set_rdonly(true), "make the task's root read-only again");
  return st;
}

}  // namespace

namespace {

// What every container root gets once the overlay is mounted at ROOT: /dev, /proc, /sys, /tmp,
// the binds, the generated files, and read-only unless writable.
Status furnish_root(const std::string& root, const LaunchSpec& spec) {
  UniqueFd root_fd(open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd.valid()) return Status::from_errno("open " + root, errno);
  SLIPWAY_TRY(mount_system(root_fd.get(), spec));
  SLIPWAY_TRY(mount_binds(root_fd.get(), spec));
  for (const auto& f : spec.files) SLIPWAY_TRY(write_file_in_root(root_fd.get(), f.path, f.content));
  // Read-only root (submounts keep their own flags): only the overlay mount itself.
  struct mount_attr attr = {};
  (spec.writable ? attr.attr_clr : attr.attr_set) = MOUNT_ATTR_RDONLY;
  SLIPWAY_SYS(mount_setattr(root_fd.get(), "", AT_EMPTY_PATH, &attr, sizeof attr),
              "set the container root's read-only flag");
  return Status();
}

Status check_spec(const LaunchSpec& spec) {
  const std::string& image = spec.squashfs_file.empty() ? spec.rootfs : spec.squashfs_file;
  if (image.empty() || image[0] != '/' || spec.scratch_dir.empty())
    return Status::error("container spec needs an absolute image path and a scratch directory",
                         EINVAL);
  return Status();
}

// Into HOLDER's namespaces: the user namespace first, which gives us the capabilities over the
// others it owns; the mount namespace last, which puts our root and cwd at its root (setns(2)).
Status enter_holder_namespaces(const ContainerHolder& holder) {
  SLIPWAY_SYS(setns(holder.userns_fd(), CLONE_NEWUSER), "join the container's user namespace");
  for (const auto& [fd, type] : holder.other_namespaces())
    SLIPWAY_SYS(setns(fd, type), "join the container's namespace " + std::to_string(type));
  SLIPWAY_SYS(setns(holder.mntns_fd(), CLONE_NEWNS), "join the container's mount namespace");
  return Status();
}

}  // namespace

Status build_container(const LaunchSpec& spec) {
  SLIPWAY_TRY(check_spec(spec));
  auto lower = enter_namespaces(spec);
  SLIPWAY_TRY(lower);
  auto root = mount_overlay_root(spec, std::move(*lower));
  SLIPWAY_TRY(root);
  return furnish_root(*root, spec);
}

Status join_namespaces(pid_t holder, const LaunchSpec& spec) {
  SLIPWAY_SYS(prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl(PR_SET_DUMPABLE)");
  auto running = attach_holder(holder, spec);
  SLIPWAY_TRY(running);
  return enter_holder_namespaces(*running);
}

Status adopt_container(pid_t instance, const LaunchSpec& spec) {
  SLIPWAY_TRY(check_spec(spec));
  LaunchSpec only_user_and_mount = spec;
  only_user_and_mount.unshare_net = only_user_and_mount.unshare_ipc = false;
  only_user_and_mount.unshare_uts = false;
  SLIPWAY_TRY(join_namespaces(instance, only_user_and_mount));
  // A copy of the instance's mount namespace, owned by its user namespace (so nothing in it is
  // locked), in which only the overlay mount is kept: a clone of it alone (no submounts), the
  // instance's scratch tmpfs and all its binds detached, a fresh tmpfs under the clone.
  SLIPWAY_SYS(unshare(CLONE_NEWNS), "unshare a mount namespace for the new instance");
  SLIPWAY_SYS(mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), "make / private");
  SLIPWAY_TRY(unshare_optional(spec));
  const std::string root = root_of(spec);
  UniqueFd overlay(open_tree(AT_FDCWD, root.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
  if (!overlay.valid()) return Status::from_errno("clone the running container's root", errno);
  SLIPWAY_SYS(umount2(spec.scratch_dir.c_str(), MNT_DETACH), "detach the running container's mounts");
  SLIPWAY_SYS(mount("slipway", spec.scratch_dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755"),
              "mount tmpfs on " + spec.scratch_dir);
  SLIPWAY_SYS(mkdir(root.c_str(), 0755), "mkdir " + root);
  SLIPWAY_SYS(move_mount(overlay.get(), "", AT_FDCWD, root.c_str(), MOVE_MOUNT_F_EMPTY_PATH),
              "attach the container's root");
  return furnish_root(root, spec);
}

namespace {

// Mount propagation (mount_namespaces(7)). pyxis's tasks and the steps that attach to its
// container share one mount namespace, so a mount one of them makes (`mount -t tmpfs none
// /mymnt` as root inside) every other sees. Here each task has a namespace of its own for its own
// binds (its GPUs, the PMIx directory), copied from the holder's, and the root of each task joins
// the holder's root in one peer group: a mount made under the root by any of them then propagates
// to the holder's namespace, whose copies later tasks and attaching steps start from, and to every
// running task. What must stay a task's own is attached to mounts that send nothing to the
// others (keep_binds_to_this_task(), private_dev()), before the root joins.
// Nothing reaches the node: no mount of the container has a peer outside its namespaces
// (share_container_mounts()). A task's namespace that goes away takes its own mounts along and
// unmounts nothing elsewhere; a umount(2) inside propagates, as in pyxis's one namespace.
// MOVE_MOUNT_SET_GROUP (move_mount(2), Linux 5.15) puts the task's root, a slave since
// enter_root(), into the peer group of the holder's root; it takes only a private mount, so a
// mount another task makes between these two calls (microseconds) does not reach this one. Older
// kernels refuse the flag with EINVAL, as they refuse a holder's root that is not shared: the
// task's mounts then stay its own.
Status join_root_peer_group(int holder_root) {
  SLIPWAY_SYS(mount(nullptr, "/", nullptr, MS_PRIVATE, nullptr), "make the task's root private");
  const unsigned int flags = MOVE_MOUNT_SET_GROUP | MOVE_MOUNT_F_EMPTY_PATH;
  if (move_mount(holder_root, "", AT_FDCWD, "/", flags) == 0 || errno == EINVAL) return Status();
  return Status::from_errno("share the task's mounts with the container", errno);
}

// Into the built root: the task's binds, pivot_root, chdir.
Status enter_built_root(const LaunchSpec& spec, const TaskView& task) {
  const std::string root = root_of(spec);
  UniqueFd root_fd(open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd.valid()) return Status::from_errno("open " + root, errno);
  SLIPWAY_TRY(make_task_mount_points(root_fd.get(), spec, task));
  SLIPWAY_TRY(mark_unbindable(root_fd.get(), spec.binds));
  return pivot_into(root, task);
}

}  // namespace

Status enter_root(const LaunchSpec& spec, const TaskView& task) {
  // This task's own copy of every mount, made inside the container's user namespace that owns the
  // holder's: not "less privileged" (mount_namespaces(7)), so nothing is locked and the shared
  // mounts stay shared rather than turning slave. Until the task is in its root
  // (join_container()), the root is a slave of its peer group: the task's binds must not
  // propagate, and pivot_root(2) refuses a shared mount as put_old (".", the new root itself);
  // a slave still receives what the other tasks mount meanwhile.
  SLIPWAY_SYS(unshare(CLONE_NEWNS), "unshare the task's mount namespace");
  SLIPWAY_SYS(mount(nullptr, root_of(spec).c_str(), nullptr, MS_SLAVE, nullptr),
              "make the task's root a slave");
  return enter_built_root(spec, task);
}

Status enter_container(const LaunchSpec& spec, const TaskView& task) {
  SLIPWAY_TRY(build_container(spec));
  // No other task shares this namespace: copying it again (~0.25 ms, bench/launch) buys nothing.
  return enter_built_root(spec, task);
}

Status share_container_mounts(const LaunchSpec& spec) {
  // MS_SHARED gives every mount of the container a new peer group of its own: none has a peer
  // or a master outside this namespace, whose other mounts stay private
  // (new_user_and_mount_namespace()).
  SLIPWAY_SYS(mount(nullptr, root_of(spec).c_str(), nullptr, MS_REC | MS_SHARED, nullptr),
              "share the container's mounts with its tasks");
  return Status();
}

Status join_container(const ContainerHolder& holder, const LaunchSpec& spec, const TaskView& task) {
  SLIPWAY_TRY(enter_holder_namespaces(holder));
  // The container's root as the holder's namespace has it, kept past unshare(2).
  UniqueFd holder_root(open(root_of(spec).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!holder_root.valid()) return Status::from_errno("open the container's root", errno);
  SLIPWAY_TRY(enter_root(spec, task));
  return join_root_peer_group(holder_root.get());
}

bool is_inside_root(int root_fd, const std::string& path) {
  struct open_how how = {};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  std::string rel = path;
  while (!rel.empty() && rel[0] == '/') rel.erase(0, 1);
  if (rel.empty()) rel = ".";
  int fd = static_cast<int>(syscall(SYS_openat2, root_fd, rel.c_str(), &how, sizeof how));
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

}  // namespace slipway::launcher
