// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Tests for save_snapshot() (--container-save): a two-layer image is imported into a fresh node
// cache through the real importer, changed through a REAL overlay mount (userxattr, in a user
// namespace, in a forked child) so the upper directory is what the kernel writes, saved, and the
// archive checked three ways: its JSON and blobs, Slipway's importer, and skopeo + umoci.
// Label: userns (skipped, code 77, where unprivileged user namespaces are off).
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "check_main.h"
#include "image/digest.h"
#include "image/image_ref.h"
#include "image/import.h"
#include "image/snapshot.h"

namespace sl = slipway::launcher;
using nlohmann::json;

namespace {

constexpr uid_t kUser = 65534;  // nobody: a real job's task is never root
constexpr time_t kDeepMtime = 1000000000;
std::string g_base;

void write_text(const std::string& path, const std::string& data) { std::ofstream(path) << data; }

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// --- Building the image: tars made with libarchive, an OCI layout, imported for real ---

struct TarEntry {
  std::string path;
  unsigned type;        // AE_IFREG, AE_IFDIR, AE_IFLNK
  std::string content;  // file data or symlink target
};

la_ssize_t append_out(archive*, void* out, const void* buf, size_t n) {
  static_cast<std::string*>(out)->append(static_cast<const char*>(buf), n);
  return static_cast<la_ssize_t>(n);
}

std::string make_tar(const std::vector<TarEntry>& entries) {
  std::string out;
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  archive_write_open2(a, &out, nullptr, append_out, nullptr, nullptr);
  for (const auto& t : entries) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, t.path.c_str());
    archive_entry_set_filetype(e, t.type);
    archive_entry_set_perm(e, t.type == AE_IFDIR ? 0755 : 0644);
    archive_entry_set_size(e, t.type == AE_IFREG ? static_cast<la_int64_t>(t.content.size()) : 0);
    if (t.type == AE_IFLNK) archive_entry_set_symlink(e, t.content.c_str());
    ck_assert_int_eq(archive_write_header(a, e), ARCHIVE_OK);
    if (t.type == AE_IFREG) archive_write_data(a, t.content.data(), t.content.size());
    archive_entry_free(e);
  }
  ck_assert_int_eq(archive_write_close(a), ARCHIVE_OK);
  archive_write_free(a);
  return out;
}

std::string gzip(const std::string& data) {
  std::string out;
  archive* a = archive_write_new();
  archive_write_set_format_raw(a);
  archive_write_add_filter_gzip(a);
  archive_write_set_bytes_in_last_block(a, 1);  // no zero padding after the gzip trailer
  archive_write_open2(a, &out, nullptr, append_out, nullptr, nullptr);
  archive_entry* e = archive_entry_new();
  archive_entry_set_filetype(e, AE_IFREG);
  archive_write_header(a, e);
  archive_write_data(a, data.data(), data.size());
  archive_entry_free(e);
  ck_assert_int_eq(archive_write_close(a), ARCHIVE_OK);
  archive_write_free(a);
  return out;
}

// Decompressed bytes of a (gzip) blob.
std::string gunzip(const std::string& data) {
  archive* a = archive_read_new();
  archive_read_support_format_raw(a);
  archive_read_support_filter_all(a);
  ck_assert_int_eq(archive_read_open_memory(a, data.data(), data.size()), ARCHIVE_OK);
  archive_entry* e;
  ck_assert_int_eq(archive_read_next_header(a, &e), ARCHIVE_OK);
  std::string out;
  char buf[65536];
  for (la_ssize_t n; (n = archive_read_data(a, buf, sizeof buf)) > 0;)
    out.append(buf, static_cast<size_t>(n));
  archive_read_free(a);
  return out;
}

std::string put_blob(const std::string& layout, const std::string& data) {
  std::string digest = sl::sha256_digest(data);
  write_text(layout + "/blobs/sha256/" + sl::digest_hex(digest), data);
  return digest;
}

json desc(const std::string& type, const std::string& digest, size_t size) {
  return {{"mediaType", type}, {"digest", digest}, {"size", size}};
}

// The lower image: layer 1 (gzip, Docker media type) and layer 2 (plain tar, OCI media type).
std::string make_layout(const std::string& layout) {
  for (const char* d : {"", "/blobs", "/blobs/sha256"}) mkdir((layout + d).c_str(), 0755);
  std::string tar1 = make_tar({{"bin", AE_IFDIR, ""},
                               {"bin/link", AE_IFLNK, "../etc/keep"},
                               {"etc", AE_IFDIR, ""},
                               {"etc/keep", AE_IFREG, "keep\n"},
                               {"etc/mod", AE_IFREG, "old\n"},
                               {"etc/gone", AE_IFREG, "gone\n"},
                               {"data", AE_IFDIR, ""},
                               {"data/a", AE_IFREG, "a\n"},
                               {"data/sub", AE_IFDIR, ""},
                               {"data/sub/b", AE_IFREG, "b\n"}});
  std::string tar2 = make_tar({{"opt", AE_IFDIR, ""}, {"opt/layer2", AE_IFREG, "2\n"}});
  std::string gz1 = gzip(tar1);
  json config = {
      {"architecture", "amd64"},
      {"os", "linux"},
      {"config", {{"Env", json::array({"PATH=/bin"})}, {"Cmd", json::array({"/bin/sh"})}}},
      {"rootfs",
       {{"type", "layers"},
        {"diff_ids", json::array({sl::sha256_digest(tar1), sl::sha256_digest(tar2)})}}}};
  std::string config_body = config.dump();
  json manifest = {{"schemaVersion", 2},
                   {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                   {"config", desc("application/vnd.oci.image.config.v1+json",
                                   put_blob(layout, config_body), config_body.size())},
                   {"layers", json::array({desc("application/vnd.docker.image.rootfs.diff.tar.gzip",
                                                put_blob(layout, gz1), gz1.size()),
                                           desc("application/vnd.oci.image.layer.v1.tar",
                                                put_blob(layout, tar2), tar2.size())})}};
  std::string manifest_body = manifest.dump();
  std::string digest = put_blob(layout, manifest_body);
  json index = {{"schemaVersion", 2},
                {"manifests", json::array({desc("application/vnd.oci.image.manifest.v1+json",
                                                digest, manifest_body.size())})}};
  write_text(layout + "/index.json", index.dump());
  write_text(layout + "/oci-layout", R"({"imageLayoutVersion":"1.0.0"})");
  return digest;
}

sl::ImportedImage import_ref(const std::string& text, const std::string& cache) {
  auto ref = sl::parse_image_ref(text);
  ck_assert_msg(ref.ok(), "%s", ref.ok() ? "" : ref.status().message().c_str());
  sl::ImportOptions opts;
  opts.cache_dir = cache;
  auto img = sl::import_image(*ref, opts);
  ck_assert_msg(img.ok(), "import %s: %s", text.c_str(),
                img.ok() ? "" : img.status().message().c_str());
  return *img;
}

// --- Changing the image through a real overlay ---

// Drops root for kUser. setuid() clears the dumpable flag, which makes /proc/self/uid_map
// root-owned (proc(5)); set it again so the user namespace's maps can be written.
int become_user() {
  if (setgroups(0, nullptr) || setgid(kUser) || setuid(kUser)) return -1;
  return prctl(PR_SET_DUMPABLE, 1);
}

bool write_proc(const char* file, const std::string& data) {
  int fd = open(file, O_WRONLY);
  bool ok = fd >= 0 && write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
  if (fd >= 0) close(fd);
  return ok;
}

// In a child: a user namespace (root inside mapped to us) and a mount namespace, the image rootfs
// under an overlay with userxattr as Slipway mounts it, and CHANGE run in the merged view.
// Returns the child's exit code: 0 done, 77 no user namespaces, else the failing step.
template <class F>
int in_overlay(const std::string& lower, const std::string& scratch, F change) {
  pid_t pid = fork();
  if (pid == 0) {
    uid_t uid = geteuid();
    gid_t gid = getegid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) _exit(77);
    if (!write_proc("/proc/self/setgroups", "deny") ||
        !write_proc("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1") ||
        !write_proc("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1"))
      _exit(70);
    if (mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(71);
    const std::string merged = scratch + "/merged";
    std::string opts = "lowerdir=" + lower + ",upperdir=" + scratch + "/upper,workdir=" + scratch +
                       "/work,userxattr";
    if (mount("overlay", merged.c_str(), "overlay", 0, opts.c_str()) != 0) _exit(72);
    _exit(change(merged));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// What a container typically does: add, modify, delete, replace a directory, link.
int make_changes(const std::string& m) {
  auto p = [&](const char* rel) { return m + "/" + rel; };
  write_text(p("etc/new"), "new\n");
  if (chmod(p("etc/new").c_str(), 04755) != 0) return 1;
  if (link(p("etc/new").c_str(), p("etc/new2").c_str()) != 0) return 2;
  write_text(p("etc/mod"), "changed\n");
  if (unlink(p("etc/gone").c_str()) != 0) return 3;  // a whiteout
  if (unlink(p("opt/layer2").c_str()) != 0) return 4;
  if (system(("rm -rf " + p("data")).c_str()) != 0) return 5;  // the directory is replaced:
  if (mkdir(p("data").c_str(), 0750) != 0) return 6;           // it becomes opaque
  write_text(p("data/fresh"), "fresh\n");
  if (symlink("/etc/passwd", p("etc/abs").c_str()) != 0) return 7;  // never followed
  if (mkfifo(p("fifo").c_str(), 0644) != 0) return 8;
  if (mkdir(p("newdir").c_str(), 0755) != 0 || mkdir(p("newdir/deep").c_str(), 0700) != 0) return 9;
  write_text(p("newdir/deep/f"), "deep\n");
  timespec t[2] = {{kDeepMtime, 0}, {kDeepMtime, 0}};
  if (utimensat(AT_FDCWD, p("newdir/deep/f").c_str(), t, 0) != 0) return 10;
  return 0;
}

// --- Reading trees and archives back ---

// "path kind[:content|->target]" for every entry under ROOT, sorted.
void list_tree(const std::string& root, const std::string& rel, std::set<std::string>& out) {
  DIR* d = opendir((root + "/" + rel).c_str());
  ck_assert_ptr_nonnull(d);
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    std::string path = rel.empty() ? name : rel + "/" + name;
    struct stat st;
    ck_assert_int_eq(lstat((root + "/" + path).c_str(), &st), 0);
    if (S_ISDIR(st.st_mode)) {
      out.insert(path + "/");
      list_tree(root, path, out);
    } else if (S_ISLNK(st.st_mode)) {
      char buf[256] = {};
      ck_assert_int_gt(readlink((root + "/" + path).c_str(), buf, sizeof buf - 1), 0);
      out.insert(path + " -> " + buf);
    } else if (S_ISFIFO(st.st_mode)) {
      out.insert(path + " fifo");
    } else {
      out.insert(path + " = " + read_text(root + "/" + path));
    }
  }
  closedir(d);
}

const std::set<std::string> kChangedTree = {"bin/",
                                            "bin/link -> ../etc/keep",
                                            "data/",
                                            "data/fresh = fresh\n",
                                            "etc/",
                                            "etc/abs -> /etc/passwd",
                                            "etc/keep = keep\n",
                                            "etc/mod = changed\n",
                                            "etc/new = new\n",
                                            "etc/new2 = new\n",
                                            "fifo fifo",
                                            "newdir/",
                                            "newdir/deep/",
                                            "newdir/deep/f = deep\n",
                                            "opt/"};

const std::set<std::string> kImageTree = {"bin/",
                                          "bin/link -> ../etc/keep",
                                          "data/",
                                          "data/a = a\n",
                                          "data/sub/",
                                          "data/sub/b = b\n",
                                          "etc/",
                                          "etc/gone = gone\n",
                                          "etc/keep = keep\n",
                                          "etc/mod = old\n",
                                          "opt/",
                                          "opt/layer2 = 2\n"};

std::string show(const std::set<std::string>& s) {
  std::string out;
  for (const auto& x : s) out += "[" + x + "] ";
  return out;
}

void check_tree(const std::string& root, const std::set<std::string>& want) {
  std::set<std::string> got;
  list_tree(root, "", got);
  ck_assert_msg(got == want, "tree %s:\n got  %s\n want %s", root.c_str(), show(got).c_str(),
                show(want).c_str());
}

// Modes, links and mtimes that a listing does not show.
void check_metadata(const std::string& root) {
  struct stat a, b, deep, data;
  ck_assert_int_eq(lstat((root + "/etc/new").c_str(), &a), 0);
  ck_assert_int_eq(lstat((root + "/etc/new2").c_str(), &b), 0);
  ck_assert_int_eq(a.st_mode & 07777, 0755);  // setuid dropped
  ck_assert(a.st_ino == b.st_ino);            // still one file
  ck_assert_int_eq(lstat((root + "/newdir/deep/f").c_str(), &deep), 0);
  ck_assert_int_eq(deep.st_mtim.tv_sec, kDeepMtime);
  ck_assert_int_eq(lstat((root + "/data").c_str(), &data), 0);
  ck_assert_int_eq(data.st_mode & 0777, 0750);
}

// Every regular file of an OCI archive by name.
std::map<std::string, std::string> read_archive(const std::string& path) {
  std::map<std::string, std::string> files;
  archive* a = archive_read_new();
  archive_read_support_format_tar(a);
  ck_assert_int_eq(archive_read_open_filename(a, path.c_str(), 65536), ARCHIVE_OK);
  archive_entry* e;
  while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
    ck_assert_int_eq(archive_entry_uid(e), 0);
    if (archive_entry_filetype(e) != AE_IFREG) continue;
    std::string data;
    char buf[65536];
    for (la_ssize_t n; (n = archive_read_data(a, buf, sizeof buf)) > 0;)
      data.append(buf, static_cast<size_t>(n));
    files[archive_entry_pathname(e)] = data;
  }
  archive_read_free(a);
  return files;
}

// Names of a layer tar's entries, with their uid:gid.
std::set<std::string> layer_entries(const std::string& tar) {
  std::set<std::string> out;
  archive* a = archive_read_new();
  archive_read_support_format_tar(a);
  ck_assert_int_eq(archive_read_open_memory(a, tar.data(), tar.size()), ARCHIVE_OK);
  archive_entry* e;
  while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
    ck_assert_int_eq(archive_entry_uid(e), 0);
    ck_assert_int_eq(archive_entry_gid(e), 0);
    out.insert(archive_entry_pathname(e));
  }
  archive_read_free(a);
  return out;
}

json parse_json(const std::string& s) {
  json j = json::parse(s, nullptr, false);
  ck_assert_msg(!j.is_discarded(), "bad JSON: %s", s.c_str());
  return j;
}

// Runs ARGV, its stdout into *OUT; returns the exit status.
int run(const std::vector<std::string>& argv, std::string* out = nullptr) {
  int fds[2];
  if (pipe(fds) != 0) return -1;  // no ck_assert: make_suite() runs this outside any test
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  std::string data;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;)
    data.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (out) *out = data;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool has_tool(const char* name) {
  return run({"sh", "-c", std::string("command -v ") + name}) == 0;
}

// --- Fixture ---

struct World {
  std::string cache, image_digest, rootfs, scratch, upper, out_dir, archive;
};
World g;

void setup(void) {
  // As a job's task: never root. The test's own files are then the user's, like the cache.
  if (geteuid() == 0) ck_assert_int_eq(become_user(), 0);
  char tmpl[] = "/tmp/slw-snapshot-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(tmpl));
  g_base = tmpl;
  setenv("HOME", g_base.c_str(), 1);  // skopeo and umoci keep their state there
  setenv("TMPDIR", g_base.c_str(), 1);
  g.cache = g_base + "/cache";
  std::string digest = make_layout(g_base + "/layout");
  sl::ImportedImage img = import_ref(g_base + "/layout", g.cache);
  ck_assert_str_eq(img.manifest_digest.c_str(), digest.c_str());
  g.image_digest = digest;
  g.rootfs = img.rootfs;
  g.scratch = g_base + "/scratch";
  g.upper = g.scratch + "/upper";
  for (const char* d : {"", "/upper", "/work", "/merged"}) mkdir((g.scratch + d).c_str(), 0755);
  g.out_dir = g_base + "/out";
  mkdir(g.out_dir.c_str(), 0755);
  g.archive = g.out_dir + "/saved.tar";
}

// The overlay's work dir holds a mode-000 directory: make everything removable first.
void teardown(void) { (void)!system(("chmod -R u+rwx " + g_base + "; rm -rf " + g_base).c_str()); }

sl::SnapshotRequest request() { return {g.cache, g.image_digest, g.upper, g.archive}; }

void change_for_real() {
  int rc = in_overlay(g.rootfs, g.scratch, make_changes);
  ck_assert_msg(rc == 0, "overlay change step %d failed", rc);
}

std::vector<std::string> dir_names(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = d ? readdir(d) : nullptr)
    if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") names.push_back(e->d_name);
  if (d) closedir(d);
  return names;
}

// The archive's index, manifest and config, with every blob checked against its name.
struct Saved {
  std::map<std::string, std::string> files;
  json index, manifest, config;
  std::string manifest_body;
  std::string blob(const std::string& digest) { return files["blobs/sha256/" + digest.substr(7)]; }
};

Saved load_saved(const std::string& path) {
  Saved s;
  s.files = read_archive(path);
  ck_assert_msg(s.files.count("oci-layout") && s.files.count("index.json"), "not a layout");
  for (const auto& [name, data] : s.files)
    if (name.rfind("blobs/sha256/", 0) == 0)
      ck_assert_msg(sl::sha256_digest(data) == "sha256:" + name.substr(13), "%s", name.c_str());
  s.index = parse_json(s.files["index.json"]);
  ck_assert_int_eq(s.index["manifests"].size(), 1);
  s.manifest_body = s.blob(s.index["manifests"][0]["digest"]);
  s.manifest = parse_json(s.manifest_body);
  s.config = parse_json(s.blob(s.manifest["config"]["digest"]));
  return s;
}

}  // namespace

START_TEST(kernel_writes_whiteouts_and_opaque_dirs) {
  change_for_real();
  // What this kernel wrote for a deleted lower file: a 0/0 character device (or, on kernels
  // that cannot mknod it, an empty file with the overlay.whiteout xattr).
  struct stat st;
  ck_assert_int_eq(lstat((g.upper + "/etc/gone").c_str(), &st), 0);
  char v[8] = {};
  bool chardev = S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0);
  bool xattr_file = S_ISREG(st.st_mode) && st.st_size == 0 &&
                    lgetxattr((g.upper + "/etc/gone").c_str(), "user.overlay.whiteout", v, 8) >= 0;
  ck_assert_msg(chardev || xattr_file, "etc/gone in the upper dir is neither kind of whiteout");
  ck_assert_int_eq(lgetxattr((g.upper + "/data").c_str(), "user.overlay.opaque", v, sizeof v), 1);
  ck_assert_int_eq(v[0], 'y');
}
END_TEST

START_TEST(saved_archive_keeps_the_layers_and_adds_the_changes) {
  change_for_real();
  auto st = sl::save_snapshot(request());
  ck_assert_msg(st.ok(), "%s", st.message().c_str());
  ck_assert(dir_names(g.out_dir) == std::vector<std::string>{"saved.tar"});  // no temp left
  Saved s = load_saved(g.archive);
  json orig =
      parse_json(read_text(g.cache + "/images/" + g.image_digest.substr(7) + "/manifest.json"));
  const json& layers = s.manifest["layers"];
  ck_assert(s.manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json");
  ck_assert_int_eq(layers.size(), 3);
  for (int i = 0; i < 2; ++i) {  // the original blobs, unchanged
    ck_assert(layers[i]["digest"] == orig["layers"][i]["digest"]);
    ck_assert(layers[i]["size"] == orig["layers"][i]["size"]);
  }
  ck_assert(layers[0]["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip");
  ck_assert(layers[2]["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip");
  std::string tar = gunzip(s.blob(layers[2]["digest"]));
  const json& ids = s.config["rootfs"]["diff_ids"];
  ck_assert_int_eq(ids.size(), 3);
  ck_assert(ids[2] == sl::sha256_digest(tar));
  ck_assert(s.config["history"].back()["created_by"] == "slipway --container-save");
  ck_assert(s.config["config"]["Cmd"][0] == "/bin/sh");  // the runtime config is kept
  ck_assert(s.index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] ==
            "latest");
  std::set<std::string> entries = layer_entries(tar);
  for (const char* name : {"etc/.wh.gone", "opt/.wh.layer2", "data/.wh..wh..opq", "etc/new2"})
    ck_assert_msg(entries.count(name), "layer lacks %s: %s", name, show(entries).c_str());
  ck_assert(!entries.count("etc/gone") && !entries.count("etc/keep"));  // only the changes
}
END_TEST

START_TEST(slipway_imports_the_saved_container) {
  change_for_real();
  auto st = sl::save_snapshot(request());
  ck_assert_msg(st.ok(), "%s", st.message().c_str());
  sl::ImportedImage img = import_ref("oci-archive:" + g.archive, g_base + "/cache2");
  check_tree(img.rootfs, kChangedTree);
  check_metadata(img.rootfs);
  ck_assert(img.config.cmd == std::vector<std::string>{"/bin/sh"});
}
END_TEST

START_TEST(skopeo_and_umoci_accept_the_archive) {
  change_for_real();
  auto st = sl::save_snapshot(request());
  ck_assert_msg(st.ok(), "%s", st.message().c_str());
  std::string raw;
  ck_assert_int_eq(run({"skopeo", "inspect", "--raw", "oci-archive:" + g.archive}, &raw), 0);
  ck_assert(raw == load_saved(g.archive).manifest_body);
  const std::string layout = g_base + "/copied";
  ck_assert_int_eq(
      run({"skopeo", "copy", "--quiet", "oci-archive:" + g.archive, "oci:" + layout + ":latest"}),
      0);
  const std::string bundle = g_base + "/bundle";
  ck_assert_int_eq(run({"umoci", "unpack", "--rootless", "--image", layout + ":latest", bundle}),
                   0);
  check_tree(bundle + "/rootfs", kChangedTree);
  check_metadata(bundle + "/rootfs");
}
END_TEST

START_TEST(empty_upper_saves_the_image_as_it_was) {
  auto st = sl::save_snapshot(request());
  ck_assert_msg(st.ok(), "%s", st.message().c_str());
  Saved s = load_saved(g.archive);
  ck_assert_int_eq(s.manifest["layers"].size(), 2);  // no empty layer
  ck_assert_int_eq(s.config["rootfs"]["diff_ids"].size(), 2);
  ck_assert(s.config["history"].back()["empty_layer"] == true);
  sl::ImportedImage img = import_ref("oci-archive:" + g.archive, g_base + "/cache2");
  check_tree(img.rootfs, kImageTree);
}
END_TEST

START_TEST(symlinks_in_the_upper_dir_are_never_followed) {
  // Made by hand: a symlinked directory and a symlink to a host file, as a container could.
  ck_assert_int_eq(symlink("/etc", (g.upper + "/hostetc").c_str()), 0);
  ck_assert_int_eq(symlink("/etc/passwd", (g.upper + "/pw").c_str()), 0);
  auto st = sl::save_snapshot(request());
  ck_assert_msg(st.ok(), "%s", st.message().c_str());
  Saved s = load_saved(g.archive);
  std::string tar = gunzip(s.blob(s.manifest["layers"][2]["digest"]));
  ck_assert(layer_entries(tar) == (std::set<std::string>{"hostetc", "pw"}));
  ck_assert(tar.find("root:x:0:0") == std::string::npos);  // /etc/passwd's content is not in it
}
END_TEST

START_TEST(errors_leave_nothing_behind) {
  write_text(g.archive, "previous");
  write_text(g.upper + "/.wh.evil", "");  // a name no OCI layer can carry as a file
  auto st = sl::save_snapshot(request());
  ck_assert(!st.ok());
  ck_assert_int_eq(st.error_number(), EINVAL);
  ck_assert_msg(st.message().find(".wh.evil") != std::string::npos &&
                    st.message().find("rename it") != std::string::npos,
                "%s", st.message().c_str());
  ck_assert(dir_names(g.out_dir) == std::vector<std::string>{"saved.tar"});
  ck_assert(read_text(g.archive) == "previous");  // untouched

  sl::SnapshotRequest r = request();
  r.manifest_digest = "sha256:" + std::string(64, 'a');
  st = sl::save_snapshot(r);
  ck_assert(!st.ok());
  ck_assert_int_eq(st.error_number(), ENOENT);
  ck_assert_msg(st.message().find("node cache") != std::string::npos, "%s", st.message().c_str());
  r = request();
  r.output_path = g_base + "/no/such/dir/x.tar";
  ck_assert(!sl::save_snapshot(r).ok());
  r.output_path = g.out_dir;
  ck_assert_int_eq(sl::save_snapshot(r).error_number(), EISDIR);
  ck_assert(dir_names(g.out_dir) == std::vector<std::string>{"saved.tar"});
}
END_TEST

START_TEST(damaged_cache_is_reported) {
  json m =
      parse_json(read_text(g.cache + "/images/" + g.image_digest.substr(7) + "/manifest.json"));
  const std::string blob =
      g.cache + "/blobs/sha256/" + m["layers"][1]["digest"].get<std::string>().substr(7);
  std::string data = read_text(blob);
  data[0] ^= 1;  // same size, other content
  write_text(blob, data);
  auto st = sl::save_snapshot(request());
  ck_assert_int_eq(st.error_number(), EBADMSG);
  ck_assert_msg(st.message().find("slipway rm " + g.image_digest) != std::string::npos, "%s",
                st.message().c_str());
  ck_assert(dir_names(g.out_dir).empty());
  unlink(blob.c_str());
  st = sl::save_snapshot(request());
  ck_assert_int_eq(st.error_number(), ENOENT);
  ck_assert(dir_names(g.out_dir).empty());
}
END_TEST

namespace {

// Whether an unprivileged process may create a user namespace and mount an overlay in it; if
// not, the whole executable reports "skipped" to CTest (exit 77) instead of failing or passing.
bool userns_overlay_available() {
  pid_t pid = fork();
  if (pid == 0) {
    if (geteuid() == 0 && become_user() != 0) _exit(2);
    char tmpl[] = "/tmp/slw-snapprobe-XXXXXX";
    if (!mkdtemp(tmpl)) _exit(2);
    std::string b = tmpl;
    for (const char* d : {"/lower", "/s", "/s/upper", "/s/work", "/s/merged"})
      mkdir((b + d).c_str(), 0755);
    int rc = in_overlay(b + "/lower", b + "/s", [](const std::string&) { return 0; });
    (void)!system(("chmod -R u+rwx " + b + "; rm -rf " + b).c_str());
    _exit(rc == 0 ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

Suite* make_suite(void) {
  if (!userns_overlay_available()) {
    printf("SKIPPED: unprivileged user namespaces or overlayfs in them are not available\n");
    exit(77);
  }
  Suite* s = suite_create("snapshot");
  TCase* tc = tcase_create("userns");
  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, kernel_writes_whiteouts_and_opaque_dirs);
  tcase_add_test(tc, saved_archive_keeps_the_layers_and_adds_the_changes);
  tcase_add_test(tc, slipway_imports_the_saved_container);
  tcase_add_test(tc, empty_upper_saves_the_image_as_it_was);
  tcase_add_test(tc, symlinks_in_the_upper_dir_are_never_followed);
  tcase_add_test(tc, errors_leave_nothing_behind);
  tcase_add_test(tc, damaged_cache_is_reported);
  if (has_tool("skopeo") && has_tool("umoci")) {
    tcase_add_test(tc, skopeo_and_umoci_accept_the_archive);
  } else {
    printf("SKIPPED: skopeo_and_umoci_accept_the_archive (skopeo or umoci not installed)\n");
  }
  suite_add_tcase(s, tc);
  return s;
}
