// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Cache management behind `slipway images`, `slipway rm` and `slipway gc` (see cache.h): listing
// with sizes and last use, the in-use lock a running step holds, removal by atomic unpublish
// (rename into tmp/, then delete), LRU garbage collection and unreferenced-blob cleanup.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "image/cache.h"
#include "image/digest.h"
#include "image/fs_beneath.h"
#include "image/image_ref.h"
#include "image/import_squashfs.h"
#include "image/manifest.h"

namespace slipway::launcher {
namespace {

using InodeSet = std::set<std::pair<dev_t, ino_t>>;

// Disk use of the tree at REL beneath ROOTFD; never follows symlinks. Each directory is read
// whole and closed before its subdirectories, which are opened from ROOTFD by path (symlink-proof,
// open_dir_beneath): a tree of any depth costs two descriptors at a time.
uint64_t tree_bytes_at(int rootfd, const std::string& rel, InodeSet& seen) {
  int fd = -1;
  if (Result<UniqueFd> dir = open_dir_beneath(rootfd, rel, false); dir.ok())
    fd = ::openat(dir->get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = fd >= 0 ? ::fdopendir(fd) : nullptr;
  if (!d) {
    if (fd >= 0) ::close(fd);
    return 0;
  }
  uint64_t total = 0;
  std::vector<std::string> subdirs;
  while (dirent* e = ::readdir(d)) {
    if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..")) continue;
    struct stat st;
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == -1) continue;
    if (st.st_nlink > 1 && !S_ISDIR(st.st_mode) && !seen.insert({st.st_dev, st.st_ino}).second)
      continue;
    total += static_cast<uint64_t>(st.st_blocks) * 512;
    if (S_ISDIR(st.st_mode)) subdirs.push_back(e->d_name);
  }
  ::closedir(d);
  for (const std::string& sub : subdirs) total += tree_bytes_at(rootfd, rel.empty() ? sub : rel + "/" + sub, seen);
  return total;
}

uint64_t tree_bytes(int dirfd, InodeSet& seen) { return tree_bytes_at(dirfd, "", seen); }

Result<std::vector<std::string>> list_dir(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (!d) return Status::from_errno("read " + path, errno);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) names.push_back(e->d_name);
  ::closedir(d);
  return names;
}

// The first line of IMAGE_DIR/name ("" for images published before names were kept).
std::string read_name(const std::string& image_dir) {
  int fd = ::open((image_dir + "/name").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return "";
  char buf[4096];
  ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  std::string name(buf, n > 0 ? static_cast<size_t>(n) : 0);
  return name.substr(0, name.find('\n'));
}

// Never creates .inuse: between our lookup of IMAGE_DIR and the open, an rm may have moved the
// tree to tmp/ and be deleting it, and a file made there then would stop its last rmdir.
bool is_in_use(const std::string& image_dir) {
  auto lock = FileLock::acquire_existing(image_dir + "/.inuse", FileLock::Mode::kExclusive, false);
  return !lock.ok() && lock.status().error_number() == EWOULDBLOCK;
}

// Digests (hex) of the blobs the manifest in IMAGE_DIR references.
void referenced_blobs(const std::string& image_dir, std::set<std::string>& out) {
  int fd = ::open((image_dir + "/manifest.json").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  std::string body;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) body.append(buf, static_cast<size_t>(n));
  ::close(fd);
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object()) return;
  auto add = [&](const nlohmann::json& d) {
    if (d.is_object() && d.contains("digest") && d["digest"].is_string()) {
      std::string dg = d["digest"].get<std::string>();
      if (is_valid_digest(dg)) out.insert(dg.substr(7));
    }
  };
  if (j.contains("config")) add(j["config"]);
  if (j.contains("layers") && j["layers"].is_array())
    for (const auto& l : j["layers"]) add(l);
}

// Deletes blobs no published image references, unless an import holds hold_blobs(): then sets
// *DEFERRED and deletes nothing (the import's blobs are not referenced until it publishes).
Status remove_unreferenced_blobs(const NodeCache& cache, bool* deferred) {
  auto sweep = FileLock::acquire(cache.lock_path("blobs"), FileLock::Mode::kExclusive, false);
  if (!sweep.ok() && sweep.status().error_number() == EWOULDBLOCK) {
    if (deferred) *deferred = true;
    return Status();
  }
  SLIPWAY_TRY(sweep);
  auto images = list_dir(cache.root() + "/images");
  SLIPWAY_TRY(images);
  std::set<std::string> keep;
  for (const auto& hex : *images) referenced_blobs(cache.root() + "/images/" + hex, keep);
  const std::string dir = cache.root() + "/blobs/sha256";
  auto blobs = list_dir(dir);
  SLIPWAY_TRY(blobs);
  for (const auto& hex : *blobs)
    if (!keep.count(hex) && ::unlink((dir + "/" + hex).c_str()) == -1 && errno != ENOENT)
      return Status::from_errno("remove blob " + hex, errno);
  // The squashfs memos (import_squashfs.cc) of images no longer published go too.
  const std::set<std::string> published(images->begin(), images->end());
  const std::string memos = cache.root() + "/squashfs";
  auto names = list_dir(memos);
  if (!names.ok()) return Status();  // a cache from before squashfs images: nothing to do
  for (const auto& key : *names) {
    const std::string memo = memos + "/" + key;
    const std::string digest = squashfs_memo_digest(memo);
    if ((digest.empty() || !published.count(digest.substr(7))) &&
        ::unlink(memo.c_str()) == -1 && errno != ENOENT)
      return Status::from_errno("remove " + memo, errno);
  }
  return Status();
}

// Unpublishes and deletes one image, unless a step holds it (EBUSY). The remover holds the
// image's lock (locks/<hex>.lock, as importers do) until the tree is gone: that is how a sweep on
// any node tells a live remover's tmp/rm-<hex>.* from a dead one's, which a pid cannot do on a
// cache shared by nodes (another node's pid means nothing here). WAIT: for that lock (rm);
// without it (gc), an image whose lock is held is busy. The in-use lock is let go as soon as the
// image is unpublished: a step that opened .inuse just before waits for one rename, not for the
// deletion of the tree, and then finds the image gone (mark_in_use()).
Status unpublish(const NodeCache& cache, const std::string& digest, bool wait) {
  const std::string dir = cache.image_dir(digest), hex = digest.substr(7);
  if (::access((dir + "/config.json").c_str(), F_OK) == -1)
    return Status::error("image " + digest + " is not in the cache " + cache.root(), ENOENT);
  auto owner = FileLock::acquire(cache.lock_path(hex), FileLock::Mode::kExclusive, wait);
  if (!owner.ok() && owner.status().error_number() == EWOULDBLOCK)
    return Status::error("image " + digest + " is being imported or removed; retry later", EBUSY);
  SLIPWAY_TRY(owner);
  const std::string name = "rm-" + hex + "." + std::to_string(::getpid()) + "." + random_suffix();
  const std::string tmp = cache.tmp_dir() + "/" + name;
  {
    auto lock = FileLock::acquire(dir + "/.inuse", FileLock::Mode::kExclusive, false);
    if (!lock.ok() && lock.status().error_number() == ENOENT)  // removed while we waited
      return Status::error("image " + digest + " is not in the cache " + cache.root(), ENOENT);
    if (!lock.ok() && lock.status().error_number() == EWOULDBLOCK)
      return Status::error("image " + digest + " is in use by a running step; retry when it ends",
                           EBUSY);
    SLIPWAY_TRY(lock);
    SLIPWAY_SYS(::rename(dir.c_str(), tmp.c_str()), "unpublish " + dir);
  }
  UniqueFd tfd(::open(cache.tmp_dir().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!tfd.valid()) return Status::from_errno("open " + cache.tmp_dir(), errno);
  // A step's mark_in_use() that looked the image up just before the rename may still create
  // .inuse in the moved tree after we emptied it (once: its next lookup finds no image), and
  // the last rmdir then meets ENOTEMPTY. Nobody else writes there: go over the tree again.
  Status st;
  for (int pass = 0; pass < 3; ++pass) {
    st = remove_tree_at(tfd.get(), name.c_str());
    if (st.error_number() != ENOTEMPTY) break;
  }
  return st;
}

// The lock whose holder owns tmp/NAME: importers ("<key>.<pid>.<rand>") hold locks/<key>.lock
// while they work, removers ("rm-<hex>.<pid>.<rand>") locks/<hex>.lock until the tree is gone.
// Never the pid in the name: on a cache shared by nodes it may be another node's process.
std::string owner_lock_key(const std::string& name) {
  std::string key = name.substr(0, name.find('.'));
  return key.rfind("rm-", 0) == 0 ? key.substr(3) : key;
}

// Removes tmp/ entries whose owner is gone (nobody holds their owner's lock; we hold it while we
// remove them, so two sweeps, on this node or another, never remove one entry at once).
Status remove_dead_tmp(const NodeCache& cache) {
  auto names = list_dir(cache.tmp_dir());
  SLIPWAY_TRY(names);
  UniqueFd tfd(::open(cache.tmp_dir().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!tfd.valid()) return Status::from_errno("open " + cache.tmp_dir(), errno);
  for (const auto& name : *names) {
    auto lock = FileLock::acquire(cache.lock_path(owner_lock_key(name)),
                                  FileLock::Mode::kExclusive, false);
    if (!lock.ok()) continue;  // its owner works (or the lock cannot be had): leave it
    Status st = remove_tree_at(tfd.get(), name.c_str());
    if (!st.ok() && st.error_number() != ENOENT) return st;
  }
  return Status();
}

}  // namespace

namespace {

constexpr size_t kMaxImageJson = 8 << 20;  // manifest.json and config.json, as import reads them

// Blob DESC is in blobs/ with its size and sha256.
Status check_blob(const NodeCache& cache, const Descriptor& desc, const std::string& what) {
  const std::string path = cache.blob_path(desc.digest);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd.valid()) return Status::from_errno(what + " " + desc.digest + " is missing (" + path + ")", errno);
  struct stat st;
  SLIPWAY_SYS(::fstat(fd.get(), &st), path);
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != desc.size)
    return Status::error(what + " " + desc.digest + " has " + std::to_string(st.st_size) +
                             " bytes, not " + std::to_string(desc.size),
                         EBADMSG);
  auto digest = sha256_file(fd.get());
  SLIPWAY_TRY(digest);
  if (*digest != desc.digest)
    return Status::error(what + " " + desc.digest + " is damaged (its sha256 is " + *digest + ")", EBADMSG);
  return Status();
}

}  // namespace

Status check_image(const NodeCache& cache, std::string_view manifest_digest) {
  const std::string digest(manifest_digest), dir = cache.image_dir(digest);
  const std::string fix = "; remove it ('slipway rm " + digest + "') and import it again";
  auto in_image = [&](const Status& st) { return Status::error("image " + digest + ": " + st.message() + fix, st.error_number()); };
  SLIPWAY_TRY(crypto_library().load());
  struct stat st;
  if (::stat((dir + "/rootfs").c_str(), &st) == -1 || !S_ISDIR(st.st_mode))
    return in_image(Status::error("rootfs/ is missing", ENOENT));
  auto manifest_body = read_file_limited(dir + "/manifest.json", kMaxImageJson);
  if (!manifest_body.ok()) return in_image(manifest_body.status());
  if (sha256_digest(*manifest_body) != digest)
    return in_image(Status::error("manifest.json does not match the image's digest", EBADMSG));
  auto manifest = parse_manifest(*manifest_body);
  if (!manifest.ok()) return in_image(manifest.status());
  auto config = read_file_limited(dir + "/config.json", kMaxImageJson);
  if (!config.ok()) return in_image(config.status());
  if (sha256_digest(*config) != manifest->config.digest)
    return in_image(Status::error("config.json is not the config " + manifest->config.digest +
                                      " its manifest names", EBADMSG));
  if (config->size() != manifest->config.size)
    return in_image(Status::error("config.json is " + std::to_string(config->size()) +
                                      " bytes, its manifest declares " +
                                      std::to_string(manifest->config.size),
                                  EBADMSG));
  for (size_t i = 0; i < manifest->layers.size(); ++i) {
    Status blob = check_blob(cache, manifest->layers[i], "layer " + std::to_string(i + 1) + " blob");
    if (!blob.ok()) return in_image(blob);
  }
  return Status();
}

Result<std::vector<CachedImage>> list_images(const NodeCache& cache) {
  auto names = list_dir(cache.root() + "/images");
  SLIPWAY_TRY(names);
  std::vector<CachedImage> out;
  for (const auto& hex : *names) {
    CachedImage img;
    img.manifest_digest = "sha256:" + hex;
    if (!is_valid_digest(img.manifest_digest)) continue;
    const std::string dir = cache.root() + "/images/" + hex;
    struct stat st;
    if (::stat(dir.c_str(), &st) == -1) continue;  // removed meanwhile
    img.last_use = st.st_mtim.tv_sec;
    int fd = ::open((dir + "/rootfs").c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      InodeSet seen;
      img.bytes = tree_bytes(fd, seen);
      ::close(fd);
    }
    img.in_use = is_in_use(dir);
    img.name = read_name(dir);
    out.push_back(std::move(img));
  }
  std::sort(out.begin(), out.end(),
            [](const CachedImage& a, const CachedImage& b) { return a.last_use < b.last_use; });
  return out;
}

Result<FileLock> mark_in_use(const NodeCache& cache, std::string_view digest) {
  const std::string dir = cache.image_dir(digest);
  auto lock = FileLock::acquire(dir + "/.inuse", FileLock::Mode::kShared);
  if (!lock.ok() && lock.status().error_number() == ENOENT)
    return Status::error("image " + std::string(digest) + " is not in the cache", ENOENT);
  SLIPWAY_TRY(lock);
  // gc or rm may have unpublished the image between our open and flock: the lock is then on a
  // file in tmp/, and the image must be imported again. Another import may even have published
  // the digest anew meanwhile: its .inuse is another file, which our lock does not hold.
  if (!lock->is_at(dir + "/.inuse") || ::access((dir + "/config.json").c_str(), F_OK) == -1)
    return Status::error("image " + std::string(digest) + " was removed from the cache", ENOENT);
  return lock;
}

Result<std::string> find_image(const NodeCache& cache, std::string_view text,
                               std::string_view canonical) {
  if (is_valid_digest(text)) return std::string(text);
  auto images = list_images(cache);
  SLIPWAY_TRY(images);
  std::string_view hex = text.substr(0, 7) == "sha256:" ? text.substr(7) : text;
  bool is_prefix = hex.size() >= 6 && hex.find_first_not_of("0123456789abcdef") == std::string::npos;
  std::vector<std::string> found;
  for (const auto& img : *images) {
    bool by_digest = is_prefix && img.manifest_digest.compare(7, hex.size(), hex) == 0;
    bool by_name = !img.name.empty() && (img.name == text || img.name == canonical);
    if (by_digest || by_name) found.push_back(img.manifest_digest);
  }
  if (found.size() == 1) return found[0];
  if (found.empty())
    return Status::error("no image '" + std::string(text) + "' in the cache " + cache.root() +
                             "; see 'slipway images'", ENOENT);
  return Status::error("'" + std::string(text) + "' matches " + std::to_string(found.size()) +
                           " cached images; give the digest (see 'slipway images')", EINVAL);
}

Result<uint64_t> parse_size(std::string_view text) {
  const Status bad = Status::error("bad size '" + std::string(text) +
                                   "'; write a number with an optional unit, e.g. 500M or 20G",
                                   EINVAL);
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0 || i > 20) return bad;
  char* end = nullptr;
  std::string number(text.substr(0, i));
  double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size()) return bad;
  std::string_view unit = text.substr(i);
  int shift = 0;
  if (!unit.empty()) {
    static constexpr std::string_view kUnits = "KMGT";
    size_t u = kUnits.find(static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0]))));
    if (u == std::string_view::npos && unit != "B") return bad;
    if (u != std::string_view::npos) shift = 10 * static_cast<int>(u + 1);
    std::string_view rest = unit.substr(1);
    if (u != std::string_view::npos && rest != "" && rest != "B" && rest != "i" && rest != "iB")
      return bad;
  }
  double bytes = value * static_cast<double>(uint64_t{1} << shift);
  if (bytes >= 1.8e19) return bad;
  return static_cast<uint64_t>(bytes);
}

Status remove_image(const NodeCache& cache, std::string_view digest, bool* blobs_deferred) {
  if (!is_valid_digest(digest))
    return Status::error("'" + std::string(digest) + "' is not a sha256 digest", EINVAL);
  SLIPWAY_TRY(unpublish(cache, std::string(digest), true));
  return remove_unreferenced_blobs(cache, blobs_deferred);
}

Result<FileLock> hold_blobs(const NodeCache& cache) {
  return FileLock::acquire(cache.lock_path("blobs"), FileLock::Mode::kShared);
}

Result<GcResult> gc_images(const NodeCache& cache, uint64_t keep_bytes) {
  auto images = list_images(cache);
  SLIPWAY_TRY(images);
  GcResult r;
  for (const auto& img : *images) r.kept_bytes += img.bytes;
  for (const auto& img : *images) {  // least recently used first
    if (r.kept_bytes <= keep_bytes) break;
    if (img.in_use) continue;
    Status st = unpublish(cache, img.manifest_digest, false);
    // A step started using it, or another gc or rm removed it, meanwhile.
    if (!st.ok() && (st.error_number() == EBUSY || st.error_number() == ENOENT)) continue;
    SLIPWAY_TRY(st);
    ++r.removed;
    r.freed_bytes += img.bytes;
    r.kept_bytes -= img.bytes;
  }
  SLIPWAY_TRY(remove_unreferenced_blobs(cache, &r.blobs_deferred));
  SLIPWAY_TRY(remove_dead_tmp(cache));
  return r;
}

}  // namespace slipway::launcher
