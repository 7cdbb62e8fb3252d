// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Node cache management: listing with sizes and LRU order, the in-use lock, rm (refused while in
// use), gc --keep SIZE (LRU, skips images in use, drops unreferenced blobs and dead leftovers);
// a cache shared by nodes (no decision by pid, readers never wait for a removal, directories
// above the cache that others could rename it in are refused).
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "image/cache.h"
#include "image/import.h"
#include "image/import_build.h"
#include "image_test_util.h"
// check.h defines macros (fail) that break later standard headers: include it last.
#include "check_main.h"

using namespace slipway::launcher;

static std::string hex(char c) { return std::string(64, c); }

// A fake published image: rootfs with one file of BYTES, a manifest naming blob B, last use T.
static void publish(const NodeCache& c, char id, size_t bytes, char blob, time_t t) {
  std::string dir = c.root() + "/images/" + hex(id);
  mkdir(dir.c_str(), 0700);
  mkdir((dir + "/rootfs").c_str(), 0755);
  write_text(dir + "/rootfs/data", std::string(bytes, 'x'));
  write_text(dir + "/config.json", "{}");
  write_text(dir + "/manifest.json", R"({"schemaVersion":2,"config":{"digest":"sha256:)" +
                                         hex(blob) + R"(","size":1},"layers":[]})");
  write_text(c.root() + "/blobs/sha256/" + hex(blob), "blob");
  timeval tv[2] = {{t, 0}, {t, 0}};
  utimes(dir.c_str(), tv);
}

START_TEST(list_rm_and_in_use) {
  Sandbox sb;
  NodeCache c(sb.root + "/cache");
  ck_assert(c.ensure_layout().ok());
  ck_assert_int_eq(path_mode(c.root()) & 0777, 0700);
  publish(c, 'a', 100000, '1', 2000);
  publish(c, 'b', 10, '2', 1000);
  auto list = list_images(c);
  ck_assert(list.ok() && list->size() == 2);
  ck_assert((*list)[0].manifest_digest == "sha256:" + hex('b'));  // least recently used first
  // Listing writes nothing: no .inuse is made where an rm may be deleting the tree meanwhile.
  ck_assert(!(*list)[0].in_use && !path_exists(c.image_dir("sha256:" + hex('b')) + "/.inuse"));
  ck_assert_uint_ge((*list)[1].bytes, 100000);
  {
    auto held = mark_in_use(c, "sha256:" + hex('a'));
    ck_assert(held.ok());
    ck_assert(list_images(c)->back().in_use);
    Status busy = remove_image(c, "sha256:" + hex('a'));
    ck_assert(!busy.ok() && busy.error_number() == EBUSY);
  }
  ck_assert(remove_image(c, "sha256:" + hex('a')).ok());
  ck_assert(!path_exists(c.image_dir("sha256:" + hex('a'))));
  ck_assert(!path_exists(c.blob_path("sha256:" + hex('1'))));
  ck_assert(path_exists(c.blob_path("sha256:" + hex('2'))));
  ck_assert(remove_image(c, "sha256:" + hex('a')).error_number() == ENOENT);
  ck_assert(!mark_in_use(c, "sha256:" + hex('a')).ok());
  ck_assert(sb.surroundings_intact());
}
END_TEST

START_TEST(gc_keeps_recent_and_in_use) {
  Sandbox sb;
  NodeCache c(sb.root + "/cache");
  ck_assert(c.ensure_layout().ok());
  publish(c, 'a', 200000, '1', 1000);  // oldest, but in use
  publish(c, 'b', 200000, '2', 2000);
  publish(c, 'c', 200000, '3', 3000);  // newest
  mkdir((c.tmp_dir() + "/" + hex('d') + ".1.dead").c_str(), 0700);  // dead importer leftovers
  auto held = mark_in_use(c, "sha256:" + hex('a'));
  ck_assert(held.ok());
  auto r = gc_images(c, 450000);
  ck_assert_msg(r.ok(), "%s", r.status().message().c_str());
  ck_assert_int_eq(r->removed, 1);
  ck_assert(path_exists(c.image_dir("sha256:" + hex('a'))));
  ck_assert(!path_exists(c.image_dir("sha256:" + hex('b'))));
  ck_assert(path_exists(c.image_dir("sha256:" + hex('c'))));
  ck_assert(!path_exists(c.blob_path("sha256:" + hex('2'))));
  ck_assert(!path_exists(c.tmp_dir() + "/" + hex('d') + ".1.dead"));
  ck_assert_uint_le(r->kept_bytes, 450000);
}
END_TEST

START_TEST(cache_must_be_ours) {
  Sandbox sb;
  std::string open_dir = sb.root + "/shared";
  mkdir(open_dir.c_str(), 0777);
  chmod(open_dir.c_str(), 0777);
  Status st = NodeCache(open_dir).ensure_layout();
  ck_assert(!st.ok() && st.message().find("writable by others") != std::string::npos);
  ck_assert(!NodeCache("relative/dir").ensure_layout().ok());
  ck_assert(default_cache_dir(1234) == "/var/tmp/slipway-1234");
}
END_TEST


START_TEST(find_image_by_digest_prefix_or_name) {
  Sandbox sb;
  NodeCache c(sb.root + "/cache");
  ck_assert(c.ensure_layout().ok());
  publish(c, 'a', 10, '1', 1000);
  publish(c, 'b', 10, '2', 2000);
  write_text(c.image_dir("sha256:" + hex('a')) + "/name", "reg:5000/x/busybox:latest\n");
  ck_assert(*find_image(c, "sha256:" + hex('b')) == "sha256:" + hex('b'));
  ck_assert(*find_image(c, "aaaaaa") == "sha256:" + hex('a'));
  ck_assert(*find_image(c, "sha256:bbbbbbbb") == "sha256:" + hex('b'));
  ck_assert(*find_image(c, "x/busybox", "reg:5000/x/busybox:latest") == "sha256:" + hex('a'));
  ck_assert(list_images(c)->back().name == "reg:5000/x/busybox:latest" ||
            list_images(c)->front().name == "reg:5000/x/busybox:latest");
  ck_assert_int_eq(find_image(c, "aaa").status().error_number(), ENOENT);  // too short a prefix
  ck_assert_int_eq(find_image(c, "cccccc").status().error_number(), ENOENT);
  publish(c, 'e', 10, '3', 3000);
  std::string e2 = "sha256:" + std::string(63, 'e') + "f";
  mkdir(c.image_dir(e2).c_str(), 0700);
  write_text(c.image_dir(e2) + "/config.json", "{}");
  Result<std::string> two = find_image(c, "eeeeee");
  ck_assert(!two.ok() && two.status().error_number() == EINVAL);
  ck_assert_msg(two.status().message().find("matches 2 cached images") != std::string::npos, "%s",
                two.status().message().c_str());
}
END_TEST

START_TEST(sizes) {
  ck_assert_uint_eq(*parse_size("0"), 0);
  ck_assert_uint_eq(*parse_size("4096"), 4096);
  ck_assert_uint_eq(*parse_size("10K"), 10240);
  ck_assert_uint_eq(*parse_size("500M"), 500ull << 20);
  ck_assert_uint_eq(*parse_size("20G"), 20ull << 30);
  ck_assert_uint_eq(*parse_size("20GiB"), 20ull << 30);
  ck_assert_uint_eq(*parse_size("1.5T"), 3ull << 39);
  ck_assert_uint_eq(*parse_size("7g"), 7ull << 30);
  for (const char* bad : {"", "G", "-1", "10X", "10GG", "1e3", "99999999999999999999999T"})
    ck_assert_msg(!parse_size(bad).ok(), "'%s' parsed", bad);
}
END_TEST

START_TEST(import_bounds) {
  ImportBounds b;
  ck_assert_uint_eq(b.max_image_bytes, 64ull << 30);
  ck_assert(b.max_layer_ratio == 20 && b.min_free_bytes == 1ull << 30);
  ck_assert(parse_import_bound(b, "max_image_size", "10G").ok() && b.max_image_bytes == 10ull << 30);
  ck_assert(parse_import_bound(b, "min_free_space", "512M").ok() && b.min_free_bytes == 512ull << 20);
  ck_assert(parse_import_bound(b, "max_layer_ratio", "250").ok() && b.max_layer_ratio == 250);
  ck_assert(parse_import_bound(b, "max_layer_ratio", "0").ok() && b.max_layer_ratio == 0);
  Status st = parse_import_bound(b, "max_image_size", "lots");
  ASSERT_SAME_STR(st.message(), "max_image_size='lots' is not a size (like 64G or 500M)");
  ck_assert(!parse_import_bound(b, "max_image_size", "0").ok());
  ck_assert(!parse_import_bound(b, "max_layer_ratio", "-3").ok());
  ck_assert(!parse_import_bound(b, "max_layer_ratio", "x").ok());
  ck_assert(!parse_import_bound(b, "max_layers", "3").ok());
}
END_TEST

// An image whose rootfs is 1,500 levels deep (and a dead import's leftover as deep): sized,
// listed, swept and removed with at most 64 descriptors (sizes used one descriptor pair per
// level, and undercounted silently past the limit; removal failed with EMFILE).
static void deep_tree(const std::string& top, int levels) {
  std::string path = top;
  for (int i = 0; i < levels; ++i) {
    path += "/d";
    mkdir(path.c_str(), 0755);
  }
  write_text(path + "/bottom", std::string(100000, 'b'));
}

START_TEST(deep_trees_with_few_descriptors) {
  Sandbox sb;
  NodeCache c(sb.root + "/cache");
  ck_assert(c.ensure_layout().ok());
  publish(c, 'a', 10, '1', 1000);
  deep_tree(c.image_dir("sha256:" + hex('a')) + "/rootfs", 1500);
  std::string leftover = c.tmp_dir() + "/" + hex('d') + ".1.dead";
  mkdir(leftover.c_str(), 0700);
  deep_tree(leftover, 1500);
  rlimit few{64, 64};
  ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &few), 0);
  auto list = list_images(c);
  ck_assert(list.ok() && list->size() == 1);
  ck_assert_uint_ge((*list)[0].bytes, 100000 + 1500 * 4096);
  auto r = gc_images(c, uint64_t{1} << 40);
  ck_assert_msg(r.ok(), "%s", r.status().message().c_str());
  ck_assert(!path_exists(leftover));
  Status st = remove_image(c, "sha256:" + hex('a'));
  ck_assert_msg(st.ok(), "%s", st.message().c_str());
  ck_assert(!path_exists(c.image_dir("sha256:" + hex('a'))));
  ck_assert(sb.surroundings_intact());
}
END_TEST

// A tmp/ entry named with a pid this node cannot see (another node's, on a shared cache) whose
// owner holds its lock is left alone by gc; once the lock is free it is a leftover and goes.
START_TEST(gc_judges_leftovers_by_lock_never_by_pid) {
  Sandbox sb;
  NodeCache c(sb.root + "/cache");
  ck_assert(c.ensure_layout().ok());
  const std::string removing = c.tmp_dir() + "/rm-" + hex('a') + ".999999999.0123456789abcdef";
  const std::string importing = c.tmp_dir() + "/" + hex('b') + ".999999999.0123456789abcdef";
  const std::string blob = c.tmp_dir() + "/blob-" + hex('c') + ".999999999.0123456789abcdef";
  for (const auto& d : {removing, importing}) mkdir(d.c_str(), 0700);
  write_text(blob, "half");
  {
    auto remover = FileLock::acquire(c.lock_path(hex('a')), FileLock::Mode::kExclusive);
    auto importer = FileLock::acquire(c.lock_path(hex('b')), FileLock::Mode::kExclusive);
    auto fetcher = FileLock::acquire(c.lock_path("blob-" + hex('c')), FileLock::Mode::kExclusive);
    ck_assert(remover.ok() && importer.ok() && fetcher.ok());
    auto r = gc_images(c, 0);
    ck_assert_msg(r.ok(), "%s", r.status().message().c_str());
    ck_assert_msg(path_exists(removing), "gc removed a live remover's tree (pid not visible here)");
    ck_assert(path_exists(importing) && path_exists(blob));
  }
  ck_assert(gc_images(c, 0).ok());
  ck_assert(!path_exists(removing) && !path_exists(importing) && !path_exists(blob));
  // An importer holding the image's lock sweeps a dead remover's leftovers of that image too.
  mkdir(removing.c_str(), 0700);
  ck_assert(c.remove_stale_tmp(hex('a')).ok());
  ck_assert(!path_exists(removing));
}
END_TEST

// A step that opened .inuse just before an rm waits for the rename, not for the deletion of the
// tree: the remover lets go of .inuse once the image is unpublished (mark_in_use() then sees it
// gone and the step imports again).
START_TEST(rm_lets_go_of_readers_before_deleting) {
  Sandbox sb;
  NodeCache c(sb.root + "/cache");
  ck_assert(c.ensure_layout().ok());
  publish(c, 'a', 10, '1', 1000);
  const std::string dir = c.image_dir("sha256:" + hex('a'));
  for (int i = 0; i < 100; ++i) {  // 10,000 files: their deletion takes long enough to watch
    const std::string sub = dir + "/rootfs/d" + std::to_string(i);
    mkdir(sub.c_str(), 0755);
    for (int k = 0; k < 100; ++k) write_text(sub + "/f" + std::to_string(k), "x");
  }
  write_text(dir + "/.inuse", "");
  int reader = open((dir + "/.inuse").c_str(), O_RDONLY | O_CLOEXEC);
  ck_assert_int_ge(reader, 0);
  Status removed;
  std::thread rm([&] { removed = remove_image(c, "sha256:" + hex('a')); });
  while (path_exists(dir)) std::this_thread::yield();
  const bool deleting = count_entries(c.tmp_dir()) == 1;  // the tree is being deleted
  bool got = false;  // the shared lock, while the tree was still there after we got it
  while (count_entries(c.tmp_dir()) == 1)
    if (flock(reader, LOCK_SH | LOCK_NB) == 0) {
      got = count_entries(c.tmp_dir()) == 1;
      break;
    }
  rm.join();
  ck_assert_msg(removed.ok(), "%s", removed.message().c_str());
  ck_assert_msg(deleting, "the tree was deleted before we could look: make it bigger");
  ck_assert_msg(got, "a reader waits for the deletion of the removed image's tree");
  close(reader);
  ck_assert_int_eq(count_entries(c.tmp_dir()), 0);
}
END_TEST

// The directories above a cache: another user who can rename entries in one could swap the
// cache for a tree of theirs. Refused with one line naming the directory, the cause and the fix,
// and nothing is created beneath it; a sticky one (/tmp, a site's 1777 cache_dir) is fine.
START_TEST(parents_others_may_write_are_refused) {
  Sandbox sb;
  const std::string open_dir = sb.root + "/site";
  mkdir(open_dir.c_str(), 0700);
  chmod(open_dir.c_str(), 0777);
  NodeCache c(open_dir + "/1001");
  Status st = c.ensure_layout();
  ck_assert(!st.ok() && st.error_number() == EPERM);
  ASSERT_SAME_STR(st.message(), "cache directory " + c.root() + " is inside " + open_dir +
                                    ", which others may write without the sticky bit (mode 0777: "
                                    "they could replace the cache); chmod +t " + open_dir +
                                    " (as /tmp is) or choose another cache directory");
  ck_assert(!path_exists(c.root()));
  ck_assert(c.make_root().message() == st.message() && !path_exists(c.root()));
  ck_assert_msg(!c.is_trusted(), "an existing cache under it is not trusted either");
  mkdir(c.root().c_str(), 0700);
  ck_assert(!c.is_trusted() && !c.check_trusted().ok());
  rmdir(c.root().c_str());
  // Through a symlink: judged where it leads too.
  const std::string link = sb.root + "/link";
  ck_assert_int_eq(symlink(open_dir.c_str(), link.c_str()), 0);
  ck_assert(!NodeCache(link + "/deeper/cache").ensure_layout().ok());
  ck_assert(!path_exists(open_dir + "/deeper"));
  // Sticky: everyone's directory, each user's entries their own.
  chmod(open_dir.c_str(), 01777);
  st = c.ensure_layout();
  ck_assert_msg(st.ok(), "%s", st.message().c_str());
  ck_assert(c.is_trusted());
  if (geteuid() != 0) return;  // chown below needs root
  // Another user's directory (not root's, not ours) above the cache.
  const std::string theirs = sb.root + "/theirs";
  mkdir(theirs.c_str(), 0755);
  ck_assert_int_eq(chown(theirs.c_str(), geteuid() + 4321, getegid()), 0);
  st = NodeCache(theirs + "/cache").ensure_layout();
  ck_assert(!st.ok() && st.message().find(", which belongs to uid " + std::to_string(geteuid() + 4321)) != std::string::npos);
  ck_assert(!path_exists(theirs + "/cache"));
}
END_TEST

// The cache root itself: group- or other-writable, or another user's, is refused in one line.
START_TEST(root_others_may_write_is_refused) {
  Sandbox sb;
  const std::string root = sb.root + "/cache";
  mkdir(root.c_str(), 0700);
  chmod(root.c_str(), 0770);
  Status st = NodeCache(root).ensure_layout();
  ASSERT_SAME_STR(st.message(), "cache directory " + root + " is writable by others (mode 0770); chmod 700 " + root);
  ck_assert_int_eq(count_entries(root), 0);
  chmod(root.c_str(), 0700);
  if (geteuid() != 0) return;  // chown below needs root
  ck_assert_int_eq(chown(root.c_str(), geteuid() + 4321, getegid()), 0);
  st = NodeCache(root).ensure_layout();
  ck_assert(!st.ok() && st.message().find("belongs to uid " + std::to_string(geteuid() + 4321)) != std::string::npos);
  ck_assert_int_eq(count_entries(root), 0);
}
END_TEST

// A wait for a blob another import is fetching is bounded by the waiter's own limits: with
// registry_timeout=1 it gives up after about a second, with registry_min_rate=1K over 1 s once the
// other's download stopped growing; the blob is never fetched twice meanwhile.
START_TEST(blob_waiters_have_a_deadline) {
  Sandbox sb;
  NodeCache cache(sb.base + "/cache");
  ck_assert(cache.ensure_layout().ok());
  const Descriptor d{"application/vnd.oci.image.layer.v1.tar+gzip", "sha256:" + hex('b'), 4};
  auto held = FileLock::acquire(cache.lock_path("blob-" + hex('b')), FileLock::Mode::kExclusive);
  ck_assert(held.ok());
  write_text(cache.tmp_dir() + "/blob-" + hex('b') + ".1.x", "st");  // the other's stalled file
  int fills = 0;
  auto fill = [&](int) { ++fills; return Status(); };
  for (int by_rate = 0; by_rate < 2; ++by_rate) {
    const auto in_1s = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    BlobWait wait = by_rate ? BlobWait{std::chrono::steady_clock::time_point::max(), "", 1024, 1}
                            : BlobWait{in_1s, "registry_timeout=1, SLIPWAY_REGISTRY_TIMEOUT", 0, 30};
    auto start = std::chrono::steady_clock::now();
    Status st = ensure_blob(cache, d, fill, wait);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ck_assert_int_eq(st.error_number(), ETIMEDOUT);
    ck_assert_msg(st.message().find("blob sha256:" + hex('b') + ", which another import on this "
                                    "node is fetching") != std::string::npos, "%s", st.message().c_str());
    ck_assert_msg(st.message().find(by_rate ? "less than registry_min_rate=1.0 KiB/s"
                                            : "(registry_timeout=1, SLIPWAY_REGISTRY_TIMEOUT)") !=
                      std::string::npos, "%s", st.message().c_str());
    ck_assert_msg(secs >= 0.9 && secs < 5, "waited %.1f s", secs);
  }
  ck_assert_int_eq(fills, 0);
  *held = FileLock();  // the other import is done: the next one fills it
  ck_assert(ensure_blob(cache, d, [&](int fd) { ++fills; return Status(write(fd, "blob", 4) == 4 ? Status() : Status::error("w")); },
                        BlobWait{std::chrono::steady_clock::now() + std::chrono::seconds(1),
                                 "registry_timeout=1", 1024, 1}).ok());
  ck_assert_int_eq(fills, 1);
}
END_TEST

// Cache squatting: another user who makes /var/tmp/slipway-<uid> first (a directory of theirs, a
// symlink) blocks nobody. The plugin, as root, moves it aside (nothing read or removed) and makes
// the user's own 0700 directory; `slipway` commands of the user fall back to a private
// /var/tmp/slipway-<uid>.XXXXXX, the same one each time, saying so in one line. Needs root (chown,
// setuid): as any other user it checks nothing.
START_TEST(squatted_default_cache) {
  if (geteuid() != 0) return;
  Sandbox sb;
  const uid_t user = 45000, squatter = 45001;
  const std::string parent = sb.root + "/vartmp";
  mkdir(parent.c_str(), 0700);
  chmod(parent.c_str(), 01777);
  const std::string mine = parent + "/slipway-" + std::to_string(user);
  mkdir(mine.c_str(), 0700);
  chmod(mine.c_str(), 0777);
  write_text(mine + "/planted", "x");
  ck_assert_int_eq(chown(mine.c_str(), squatter, squatter), 0);
  auto note = claim_user_cache(parent, user, user);
  ck_assert_msg(note.ok(), "%s", note.status().message().c_str());
  ck_assert_msg(note->find(mine + " was made by uid 45001 (mode 0777), not for uid 45000: moved "
                           "aside to " + mine + ".squatted-") == 0, "%s", note->c_str());
  struct stat st;
  ck_assert_int_eq(lstat(mine.c_str(), &st), 0);
  ck_assert(S_ISDIR(st.st_mode) && st.st_uid == user && (st.st_mode & 0777) == 0700);
  ck_assert_int_eq(count_entries(mine), 0);
  ck_assert(read_text(note->substr(note->rfind(' ') + 1) + "/planted") == "x");  // kept, aside
  ck_assert(claim_user_cache(parent, user, user).value() == "");  // now fine as it is
  // A symlink to elsewhere: moved aside too, nothing made where it pointed.
  const std::string link = parent + "/slipway-" + std::to_string(squatter);
  ck_assert_int_eq(symlink(sb.outside.c_str(), link.c_str()), 0);
  ck_assert(!claim_user_cache(parent, squatter, squatter).value().empty());
  ck_assert(lstat(link.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == squatter);
  ck_assert(sb.surroundings_intact());
  // `slipway` as the user, /var/tmp/slipway-<uid> another's: a private fallback, reused.
  const std::string def = default_cache_dir(user);
  mkdir(def.c_str(), 0755);
  ck_assert_int_eq(chown(def.c_str(), squatter, squatter), 0);
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    if (setgid(user) || setuid(user)) _exit(1);
    std::string n1, n2;
    std::string a = user_default_cache_dir(&n1), b = user_default_cache_dir(&n2);
    std::string out = a + "\n" + b + "\n" + n1 + "\n";
    (void)!write(fds[1], out.data(), out.size());
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  const std::string a = out.substr(0, out.find('\n'));
  const std::string rest = out.substr(out.find('\n') + 1);
  const std::string b = rest.substr(0, rest.find('\n'));
  const std::string said = rest.substr(rest.find('\n') + 1);
  bool private_dir = lstat(a.c_str(), &st) == 0 && st.st_uid == user && (st.st_mode & 0777) == 0700;
  ::rmdir(a.c_str());
  ::rmdir(def.c_str());
  ck_assert_msg(a.rfind(def + ".", 0) == 0 && a == b && private_dir, "%s", out.c_str());
  ck_assert_msg(said == def + " belongs to uid 45001, not you: using " + a + " instead (set "
                "SLIPWAY_CACHE_DIR to choose another; root may remove " + def + ")\n", "%s", said.c_str());
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("cache");
  TCase* tc = tcase_create("admin");
  tcase_add_test(tc, list_rm_and_in_use);
  tcase_add_test(tc, gc_keeps_recent_and_in_use);
  tcase_add_test(tc, deep_trees_with_few_descriptors);
  tcase_add_test(tc, cache_must_be_ours);
  tcase_add_test(tc, find_image_by_digest_prefix_or_name);
  tcase_add_test(tc, sizes);
  tcase_add_test(tc, import_bounds);
  suite_add_tcase(s, tc);
  TCase* shared = tcase_create("shared");
  tcase_add_test(shared, gc_judges_leftovers_by_lock_never_by_pid);
  tcase_add_test(shared, rm_lets_go_of_readers_before_deleting);
  tcase_add_test(shared, parents_others_may_write_are_refused);
  tcase_add_test(shared, root_others_may_write_is_refused);
  tcase_add_test(shared, blob_waiters_have_a_deadline);
  tcase_add_test(shared, squatted_default_cache);
  tcase_set_timeout(shared, 60);
  suite_add_tcase(s, shared);
  return s;
}
