// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Tests for enter_container(): a forked child, dropped to an unprivileged uid as a job's task is,
// enters a tiny busybox rootfs and checks what it sees. Label: userns (skipped, code 77, where
// unprivileged user namespaces are off).
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <grp.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "check_main.h"
#include "runtime/container.h"
#include "runtime/squashfs_mount.h"

using slipway::launcher::LaunchSpec;

namespace {

constexpr uid_t kUser = 65534;  // nobody: a real job's task is never root
std::string g_base;

void write_file(const std::string& path, const std::string& data) {
  std::ofstream(path) << data;
}

std::string read_link(const char* p) {
  char buf[256];
  ssize_t n = readlink(p, buf, sizeof buf - 1);
  return n < 0 ? "" : std::string(buf, static_cast<size_t>(n));
}

// Builds BASE/rootfs (busybox + marker) and BASE/scratch owned by kUser, like the node cache does.
void setup(void) {
  char tmpl[] = "/tmp/slw-container-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(tmpl));
  g_base = tmpl;
  chmod(tmpl, 0755);
  for (const char* d : {"/rootfs", "/rootfs/bin", "/rootfs/etc", "/scratch", "/work"})
    ck_assert_int_eq(mkdir((g_base + d).c_str(), 0755), 0);
  std::string cmd = "cp /bin/busybox " + g_base + "/rootfs/bin/busybox";
  ck_assert_int_eq(system(cmd.c_str()), 0);
  write_file(g_base + "/rootfs/etc/slipway-image", "test\n");
  for (const char* d : {"", "/rootfs", "/rootfs/bin", "/rootfs/etc", "/rootfs/etc/slipway-image",
                        "/rootfs/bin/busybox", "/scratch", "/work"})
    ck_assert_int_eq(lchown((g_base + d).c_str(), kUser, kUser), 0);
}

void teardown(void) {
  std::string cmd = "rm -rf " + g_base;
  (void)!system(cmd.c_str());
}

LaunchSpec spec_for_user() {
  LaunchSpec s;
  s.rootfs = g_base + "/rootfs";
  s.scratch_dir = g_base + "/scratch";
  s.uid = kUser;
  s.gid = kUser;
  s.binds.push_back({.source = g_base + "/work", .destination = "/data/work"});
  s.workdir = "/data/work";
  return s;
}

// Runs `body` in a child that has dropped to kUser and entered the container; returns its exit code
// (0 = every check held, 77 = user namespaces unavailable, else the failing check's number).
template <class F>
int in_container(const LaunchSpec& spec, F body) {
  pid_t pid = fork();
  if (pid == 0) {
    if (geteuid() == 0 && (setgroups(0, nullptr) || setgid(kUser) || setuid(kUser))) _exit(90);
    auto st = slipway::launcher::enter_container(spec);
    if (!st.ok()) {
      fprintf(stderr, "enter_container: %s\n", st.message().c_str());
      _exit(st.error_number() == EPERM || st.error_number() == ENOSPC ? 77 : 91);
    }
    _exit(body());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int expect_rc(int rc) { return rc; }

// Whether an unprivileged process may create a user namespace here; if not, the whole executable
// reports "skipped" to CTest (exit 77) instead of failing or passing.
bool userns_available() {
  pid_t pid = fork();
  if (pid == 0) {
    if (geteuid() == 0 && (setgroups(0, nullptr) || setgid(kUser) || setuid(kUser))) _exit(2);
    _exit(unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0 ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

START_TEST(sees_the_image_and_not_the_host) {
  std::string host_mnt = read_link("/proc/self/ns/mnt");
  int rc = in_container(spec_for_user(), [&] {
    if (access("/etc/slipway-image", R_OK) != 0) return 1;
    if (access("/bin/busybox", X_OK) != 0) return 2;
    if (access("/usr/sbin/slurmd", F_OK) == 0 || access("/usr/bin/cmake", F_OK) == 0) return 3;
    if (read_link("/proc/self/ns/mnt") == host_mnt) return 4;
    if (getuid() != kUser) return 5;
    char cwd[256];
    if (!getcwd(cwd, sizeof cwd) || std::string(cwd) != "/data/work") return 6;
    int fd = open("/dev/null", O_WRONLY);
    if (fd < 0 || write(fd, "x", 1) != 1) return 7;
    close(fd);
    if (access("/proc/self/status", R_OK) != 0 || access("/sys/kernel", F_OK) != 0) return 8;
    if (access("/tmp", W_OK) != 0) return 9;
    return 0;
  });
  ck_assert_int_eq(expect_rc(rc), 0);
}
END_TEST

START_TEST(root_is_read_only_and_binds_are_writable) {
  int rc = in_container(spec_for_user(), [] {
    int fd = open("/newfile", O_WRONLY | O_CREAT, 0644);
    if (fd >= 0 || errno != EROFS) return 1;
    fd = open("/data/work/out", O_WRONLY | O_CREAT, 0644);
    if (fd < 0) return 2;
    close(fd);
    // nosuid,nodev on binds: a device node there would be inert.
    return 0;
  });
  ck_assert_int_eq(expect_rc(rc), 0);
  ck_assert_int_eq(access((g_base + "/work/out").c_str(), F_OK), 0);
}
END_TEST

START_TEST(writable_overlay_never_reaches_the_image) {
  LaunchSpec s = spec_for_user();
  s.writable = true;
  int rc = in_container(s, [] {
    int fd = open("/etc/slipway-image", O_WRONLY | O_TRUNC);
    if (fd < 0 || write(fd, "changed", 7) != 7) return 1;
    close(fd);
    return mkdir("/newdir", 0755) == 0 ? 0 : 2;
  });
  ck_assert_int_eq(expect_rc(rc), 0);
  std::ifstream in(g_base + "/rootfs/etc/slipway-image");
  std::string line;
  std::getline(in, line);
  ck_assert_str_eq(line.c_str(), "test");
  ck_assert_int_ne(access((g_base + "/rootfs/newdir").c_str(), F_OK), 0);
}
END_TEST

START_TEST(remap_root_maps_the_user_to_zero) {
  LaunchSpec s = spec_for_user();
  s.remap_root = true;
  int rc = in_container(s, [] {
    struct stat st;
    if (getuid() != 0 || stat("/etc/slipway-image", &st) != 0) return 1;
    return st.st_uid == 0 ? 0 : 2;  // the user's files appear as root's
  });
  ck_assert_int_eq(expect_rc(rc), 0);
}
END_TEST

START_TEST(missing_workdir_is_a_clear_error) {
  LaunchSpec s = spec_for_user();
  s.workdir = "/no/such/dir";
  pid_t pid = fork();
  if (pid == 0) {
    if (geteuid() == 0 && (setgroups(0, nullptr) || setgid(kUser) || setuid(kUser))) _exit(90);
    auto st = slipway::launcher::enter_container(s);
    if (st.ok()) _exit(1);
    if (st.error_number() == EPERM && st.message().find("user namespace") != std::string::npos)
      _exit(77);
    _exit(st.message().find("working directory in the container: /no/such/dir: No such file or directory") == 0
              ? 0
              : 2);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ck_assert_int_eq(expect_rc(WEXITSTATUS(status)), 0);
}
END_TEST

// Forks a "task" that becomes kUser entirely, joins the holder's container with its own binds,
// and runs `body` there.
template <class F>
pid_t spawn_task(const slipway::launcher::ContainerHolder& h, const LaunchSpec& spec,
                 const slipway::launcher::TaskView& view, F body) {
  pid_t pid = fork();
  if (pid == 0) {
    if (getuid() == 0 && (seteuid(0) || setgroups(0, nullptr) || setgid(kUser) || setuid(kUser)))
      _exit(90);
    auto st = slipway::launcher::join_container(h, spec, view);
    if (!st.ok()) {
      fprintf(stderr, "join_container: %s\n", st.message().c_str());
      _exit(91);
    }
    _exit(body());
  }
  return pid;
}

int reap(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

START_TEST(tasks_share_one_container_with_private_views) {
  // As slurmstepd in user_init: real uid root, effective uid the job user.
  if (getuid() == 0) ck_assert_int_eq(seteuid(kUser), 0);
  LaunchSpec spec = spec_for_user();
  spec.binds.clear();
  auto holder = slipway::launcher::start_holder(spec);
  ck_assert_msg(holder.ok(), "%s", holder.ok() ? "" : holder.status().message().c_str());
  ck_assert_int_gt(holder->pid(), 0);
  mkdir((g_base + "/task1").c_str(), 0755);
  chown((g_base + "/task1").c_str(), kUser, kUser);
  const std::string user_ns_file = g_base + "/work/userns";
  slipway::launcher::TaskView one{{{.source = g_base + "/task1", .destination = "/task"}}, "/task"};
  slipway::launcher::TaskView two{{}, "/"};
  // Task one: sees its bind and records its user namespace for task two to compare.
  pid_t t1 = spawn_task(*holder, spec, one, [&] {
    if (access("/etc/slipway-image", R_OK) != 0) return 1;
    char cwd[64];
    if (!getcwd(cwd, sizeof cwd) || std::string(cwd) != "/task") return 2;
    std::ofstream("/task/userns") << read_link("/proc/self/ns/user");
    return 0;
  });
  ck_assert_int_eq(reap(t1), 0);
  std::ifstream in(g_base + "/task1/userns");
  std::string t1_userns;
  std::getline(in, t1_userns);
  pid_t t2 = spawn_task(*holder, spec, two, [&] {
    if (access("/etc/slipway-image", R_OK) != 0) return 1;
    if (read_link("/proc/self/ns/user") != t1_userns) return 2;  // same container: CMA works
    if (access("/task/userns", F_OK) == 0) return 3;             // but not task one's binds
    if (getuid() != kUser) return 4;
    return 0;
  });
  ck_assert_int_eq(reap(t2), 0);
  pid_t hp = holder->pid();
  holder->stop();
  ck_assert_int_ne(kill(hp, 0), 0);  // reaped: no holder outlives stop()
}
END_TEST

// Polls up to 10 s for PATH to exist (another task's step).
bool wait_for(const std::string& path) {
  for (int i = 0; i < 200; ++i, usleep(50 * 1000))
    if (access(path.c_str(), F_OK) == 0) return true;
  return false;
}

// Whether this process's mount namespace has a mount at PATH (/proc/self/mountinfo, field 5).
bool has_mount_at(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    size_t at = 0;
    for (int field = 0; field < 4 && at != std::string::npos; ++field) at = line.find(' ', at + 1);
    if (at != std::string::npos && line.compare(at + 1, path.size() + 1, path + " ") == 0)
      return true;
  }
  return false;
}

// As in pyxis's one namespace: a mount one task makes inside (here with the capabilities a task
// has in the container's user namespace before its exec) reaches a task already running and one
// that joins after it has exited; each task's own binds reach no other task.
START_TEST(mounts_made_in_a_task_reach_every_task_but_its_binds_do_not) {
  for (const char* d : {"/rootfs/shared", "/one", "/two"}) {
    ck_assert_int_eq(mkdir((g_base + d).c_str(), 0755), 0);
    if (getuid() == 0) ck_assert_int_eq(lchown((g_base + d).c_str(), kUser, kUser), 0);
  }
  if (getuid() == 0) ck_assert_int_eq(seteuid(kUser), 0);
  LaunchSpec spec = spec_for_user();  // with a bind at /data/work, shared as the root is
  auto holder = slipway::launcher::start_holder(spec);
  ck_assert_msg(holder.ok(), "%s", holder.ok() ? "" : holder.status().message().c_str());
  using slipway::launcher::TaskView;
  // Task one's binds: one on the root, one on the container's bind (which it keeps to itself).
  const TaskView one{{{.source = g_base + "/one", .destination = "/task-one"},
                      {.source = g_base + "/one", .destination = "/data/work/inner"}},
                     "/"};
  const TaskView two{{{.source = g_base + "/two", .destination = "/task-two"}}, "/"};
  // Task two runs first and waits; task one mounts a tmpfs with a file at /shared meanwhile.
  pid_t t2 = spawn_task(*holder, spec, two, [&] {
    std::ofstream("/task-two/ready").close();
    if (!wait_for("/task-two/go")) return 1;
    if (access("/shared/made-by-one", F_OK) != 0) return 2;  // propagated into a running task
    if (has_mount_at("/task-one") || has_mount_at("/data/work/inner")) return 3;
    return has_mount_at("/task-two") ? 0 : 4;
  });
  ck_assert(wait_for(g_base + "/two/ready"));
  pid_t t1 = spawn_task(*holder, spec, one, [&] {
    if (mount("none", "/shared", "tmpfs", 0, nullptr) != 0) return 10;
    std::ofstream("/shared/made-by-one").close();
    return has_mount_at("/task-two") ? 11 : 0;
  });
  ck_assert_int_eq(reap(t1), 0);
  write_file(g_base + "/two/go", "");
  ck_assert_int_eq(reap(t2), 0);
  // A task that joins once both have exited: the mount is the container's now, the binds are gone.
  pid_t t3 = spawn_task(*holder, spec, TaskView{{}, "/"}, [&] {
    if (access("/shared/made-by-one", F_OK) != 0) return 20;
    if (has_mount_at("/task-one") || has_mount_at("/task-two") || has_mount_at("/data/work/inner"))
      return 21;
    return has_mount_at("/shared") ? 0 : 22;
  });
  ck_assert_int_eq(reap(t3), 0);
  holder->stop();
}
END_TEST

START_TEST(holder_reports_build_errors) {
  if (getuid() == 0) ck_assert_int_eq(seteuid(kUser), 0);
  LaunchSpec spec = spec_for_user();
  spec.rootfs = g_base + "/no-such-rootfs";
  auto holder = slipway::launcher::start_holder(spec);
  ck_assert(!holder.ok());
  ck_assert_msg(holder.status().message().find("overlay") != std::string::npos, "%s",
                holder.status().message().c_str());
}
END_TEST

// A squashfs of the test rootfs (root's files, as enroot and --container-save write them).
static LaunchSpec squashfs_spec() {
  ck_assert_msg(access("/usr/bin/mksquashfs", X_OK) == 0 && access("/usr/bin/squashfuse_ll", X_OK) == 0,
                "mksquashfs or squashfuse_ll missing: run contrib/install-deps.sh");
  struct stat st;
  ck_assert_msg(stat("/dev/fuse", &st) == 0 && (st.st_mode & 0666) == 0666,
                "/dev/fuse is not mode 0666: run contrib/install-deps.sh");
  const std::string sqsh = g_base + "/image.sqsh";
  const std::string cmd = "mksquashfs " + g_base + "/rootfs " + sqsh + " -all-root -noappend -quiet >/dev/null";
  ck_assert_int_eq(system(cmd.c_str()), 0);
  LaunchSpec s = spec_for_user();
  s.rootfs.clear();
  s.squashfs_file = sqsh;
  return s;
}

// The squashfuse_ll processes of kUser still running (zombies, which hold nothing, aside: this
// machine's pid 1 reaps them late).
static int daemons_left() {
  usleep(200 * 1000);  // SIGKILL from PR_SET_PDEATHSIG is delivered, not awaited
  std::string cmd = "ps -o stat=,comm= -u " + std::to_string(kUser) +
                    " | grep -v '^Z' | grep -qw squashfuse_ll";
  return system(cmd.c_str()) == 0 ? 1 : 0;
}

START_TEST(squashfs_image_is_mounted_with_the_users_files) {
  LaunchSpec s = squashfs_spec();
  // A bind of a directory above the scratch dir (a cache under /dev/shm, which every container
  // binds) clones the container's own mounts with it: the image's must be clonable.
  s.binds.push_back({.source = g_base, .destination = "/data/base"});
  int rc = in_container(s, [] {
    struct stat st;
    if (stat("/etc/slipway-image", &st) != 0) return 1;
    if (st.st_uid != kUser) return 2;  // root's in the file, the user's in the container
    std::ifstream in("/etc/slipway-image");
    std::string line;
    if (!std::getline(in, line) || line != "test") return 3;
    int fd = open("/newfile", O_WRONLY | O_CREAT, 0644);
    if (fd >= 0 || errno != EROFS) return 4;
    // Nothing of the host's below: the image is the root.
    return access("/usr/bin/cmake", F_OK) == 0 ? 5 : 0;
  });
  ck_assert_int_eq(expect_rc(rc), 0);
  ck_assert_int_eq(daemons_left(), 0);
  s.remap_root = true;
  s.writable = true;
  rc = in_container(s, [] {
    struct stat st;
    if (getuid() != 0 || stat("/etc/slipway-image", &st) != 0 || st.st_uid != 0) return 1;
    int fd = open("/etc/slipway-image", O_WRONLY | O_TRUNC);  // copied up from the mount
    if (fd < 0 || write(fd, "changed", 7) != 7) return 2;
    close(fd);
    return 0;
  });
  ck_assert_int_eq(expect_rc(rc), 0);
  ck_assert_int_eq(daemons_left(), 0);
}
END_TEST

START_TEST(corrupt_squashfs_is_one_line_and_leaves_nothing) {
  LaunchSpec s = squashfs_spec();
  // The tables (at the end, before the superblock's bytes_used) zeroed: the superblock still
  // says squashfs, squashfuse_ll refuses the rest.
  uint64_t used = 0;
  {
    std::ifstream in(s.squashfs_file, std::ios::binary);
    in.seekg(40);
    in.read(reinterpret_cast<char*>(&used), sizeof used);  // little-endian, as x86
  }
  ck_assert_uint_gt(used, 4096);
  const std::string cmd = "dd if=/dev/zero of=" + s.squashfs_file + " bs=1 seek=" +
                          std::to_string(used - 2048) + " count=2048 conv=notrunc status=none";
  ck_assert_int_eq(system(cmd.c_str()), 0);
  pid_t pid = fork();
  if (pid == 0) {
    if (geteuid() == 0 && (setgroups(0, nullptr) || setgid(kUser) || setuid(kUser))) _exit(90);
    auto st = slipway::launcher::enter_container(s);
    if (st.ok()) _exit(1);
    fprintf(stderr, "%s\n", st.message().c_str());
    const std::string want = "cannot mount squashfs image '" + s.squashfs_file + "': ";
    _exit(st.message().rfind(want, 0) == 0 && st.message().find('\n') == std::string::npos ? 0 : 2);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ck_assert(WIFEXITED(status));
  ck_assert_int_eq(WEXITSTATUS(status), 0);
  ck_assert_int_eq(daemons_left(), 0);
}
END_TEST

// A daemon that never answers (here: its "file" a FIFO nobody writes, where open(2) blocks, as on
// a hung filesystem) is killed after the start timeout; the mount fails in one line, no hang.
START_TEST(a_squashfs_daemon_that_never_answers_is_a_bounded_error) {
  const std::string fifo = g_base + "/hung.sqsh";
  ck_assert_int_eq(mkfifo(fifo.c_str(), 0644), 0);
  ck_assert_int_eq(lchown(fifo.c_str(), kUser, kUser), 0);
  const time_t t0 = time(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    if (geteuid() == 0 && (setgroups(0, nullptr) || setgid(kUser) || setuid(kUser))) _exit(90);
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);  // setuid cleared it: /proc/self/uid_map must be ours
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) _exit(77);
    write_file("/proc/self/setgroups", "deny");
    write_file("/proc/self/uid_map", "0 " + std::to_string(kUser) + " 1\n");
    write_file("/proc/self/gid_map", "0 " + std::to_string(kUser) + " 1\n");
    auto mnt = slipway::launcher::mount_squashfs(fifo, 1);
    if (mnt.ok()) _exit(1);
    fprintf(stderr, "%s\n", mnt.status().message().c_str());
    _exit(mnt.status().message().find("did not answer within 1 s") != std::string::npos ? 0 : 2);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ck_assert(WIFEXITED(status));
  ck_assert_int_eq(WEXITSTATUS(status), 0);
  ck_assert_int_le(time(nullptr) - t0, 5);
  ck_assert_int_eq(daemons_left(), 0);
}
END_TEST

// An image whose /home, /var/tmp or another directory is a symlink into the host's /tmp (bound
// into every container): no mount point (a bind's, a file bind's, a tmpfs's) and no generated
// file is made through it on the host; the start fails in one line naming the path. A symlink
// that stays on the image's own filesystem still works, and so does a path under /tmp written
// as such.
START_TEST(image_symlinks_never_create_on_the_host) {
  char tmpl[] = "/tmp/slw-host-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(tmpl));
  const std::string host = tmpl;
  chmod(tmpl, 0777);
  ck_assert_int_eq(chown(tmpl, kUser, kUser), 0);
  ck_assert_int_eq(mkdir((g_base + "/rootfs/var").c_str(), 0755), 0);
  ck_assert_int_eq(mkdir((g_base + "/rootfs/opt").c_str(), 0755), 0);
  for (const char* d : {"/rootfs/var", "/rootfs/opt"})
    ck_assert_int_eq(lchown((g_base + d).c_str(), kUser, kUser), 0);
  for (const char* link : {"/rootfs/home", "/rootfs/var/tmp", "/rootfs/evil"})
    ck_assert_int_eq(symlink(host.c_str(), (g_base + link).c_str()), 0);
  ck_assert_int_eq(symlink("/opt", (g_base + "/rootfs/inside").c_str()), 0);
  write_file(g_base + "/work/file", "f");
  std::vector<LaunchSpec> hostile;
  for (const char* dest : {"/home/alice", "/var/tmp/job", "/evil/deeper/dir"}) {
    LaunchSpec s = spec_for_user();
    s.binds.push_back({.source = g_base + "/work", .destination = dest});
    hostile.push_back(s);
  }
  LaunchSpec file_bind = spec_for_user();
  file_bind.binds.push_back({.source = g_base + "/work/file", .destination = "/evil/file"});
  hostile.push_back(file_bind);
  LaunchSpec tmpfs = spec_for_user();
  tmpfs.binds.push_back({.source = "tmpfs", .destination = "/evil/scratch", .tmpfs = true});
  hostile.push_back(tmpfs);
  LaunchSpec generated = spec_for_user();
  generated.files.push_back({"/evil/hosts", "127.0.0.1 x\n"});
  hostile.push_back(generated);
  for (const auto& s : hostile) {
    int rc = in_container(s, [] { return 0; });
    ck_assert_int_eq(rc, 91);  // enter_container failed (not a skip, not a start)
    DIR* d = opendir(host.c_str());
    ck_assert_ptr_nonnull(d);
    int entries = 0;
    while (dirent* e = readdir(d)) entries += std::string(e->d_name) != "." && std::string(e->d_name) != "..";
    closedir(d);
    ck_assert_msg(entries == 0, "something was created in the host's %s", host.c_str());
  }
  LaunchSpec fine = spec_for_user();
  fine.binds.push_back({.source = g_base + "/work", .destination = "/inside/work"});
  fine.binds.push_back({.source = g_base + "/work", .destination = host + "/named"});
  int rc = in_container(fine, [] { return access("/inside/work/file", R_OK) == 0 ? 0 : 1; });
  ck_assert_int_eq(rc, 0);
  ck_assert_int_eq(access((host + "/named").c_str(), F_OK), 0);  // as the user wrote it
  std::string cmd = "rm -rf " + host;
  (void)!system(cmd.c_str());
}
END_TEST

Suite* make_suite(void) {
  if (!userns_available()) {
    printf("SKIPPED: unprivileged user namespaces are not available (user.max_user_namespaces)\n");
    exit(77);
  }
  Suite* s = suite_create("container");
  TCase* tc = tcase_create("userns");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, sees_the_image_and_not_the_host);
  tcase_add_test(tc, root_is_read_only_and_binds_are_writable);
  tcase_add_test(tc, writable_overlay_never_reaches_the_image);
  tcase_add_test(tc, remap_root_maps_the_user_to_zero);
  tcase_add_test(tc, missing_workdir_is_a_clear_error);
  tcase_add_test(tc, tasks_share_one_container_with_private_views);
  tcase_add_test(tc, mounts_made_in_a_task_reach_every_task_but_its_binds_do_not);
  tcase_add_test(tc, holder_reports_build_errors);
  tcase_add_test(tc, squashfs_image_is_mounted_with_the_users_files);
  tcase_add_test(tc, corrupt_squashfs_is_one_line_and_leaves_nothing);
  tcase_add_test(tc, a_squashfs_daemon_that_never_answers_is_a_bounded_error);
  tcase_add_test(tc, image_symlinks_never_create_on_the_host);
  suite_add_tcase(s, tc);
  return s;
}
