// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// import_image() for squashfs files, enroot's image format: what pyxis users have on disk (from
// `enroot import` or pyxis's own --container-save). The file is turned into a one-layer OCI image
// and imported like any other, so the layer goes through the same hostile-input unpack
// (layer.h) and the same atomic publish:
//   1. sqfs2tar (squashfs-tools-ng), run as the calling user with its output size limited,
//      writes the filesystem as a tar into tmp/; its sha256 is the layer's digest;
//   2. the config comes from enroot's runtime files in the image (enroot's doc/image-format.md):
//      Env from /etc/environment (NAME=VALUE lines), Entrypoint ["/etc/rc"] when it exists;
//   3. build_and_publish() unpacks it under images/<manifest hex>/; the tar stays as its layer
//      blob (for --container-save), until the image is removed.
// A memo, squashfs/<key>, maps the file (device, inode, size, mtime, ctime) to the manifest
// digest, so a cached squashfs image starts without reading the file again.
#include "image/import_squashfs.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/run_tool.h"
#include "common/text.h"
#include "image/archive_lazy.h"
#include "image/digest.h"
#include "image/import_build.h"
#include "image/oci_writer.h"

namespace slipway::launcher {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxEnvironmentFile = 64 << 10;
// The memo key of the file behind FD: changes whenever the file is replaced or modified. Plain
// hex (no hash), so that finding a cached image loads no crypto library; no '.', which separates
// a tmp/ entry's key from its owner (cache_admin.cc, remove_dead_tmp).
std::string memo_key(const struct stat& st) {
  char key[160];
  std::snprintf(key, sizeof key, "%llx-%llx-%llx-%llx-%09ld-%llx-%09ld",
                static_cast<unsigned long long>(st.st_dev), static_cast<unsigned long long>(st.st_ino),
                static_cast<unsigned long long>(st.st_size),
                static_cast<unsigned long long>(st.st_mtim.tv_sec), st.st_mtim.tv_nsec,
                static_cast<unsigned long long>(st.st_ctim.tv_sec), st.st_ctim.tv_nsec);
  return key;
}

std::string memo_path(const NodeCache& cache, const std::string& key) {
  return cache.root() + "/squashfs/" + key;
}

std::string read_memo(const NodeCache& cache, const std::string& key) {
  return squashfs_memo_digest(memo_path(cache, key));
}

Status write_memo(const NodeCache& cache, const std::string& key, const std::string& digest) {
  return write_file_atomic(memo_path(cache, key), digest + "\n");
}

std::string archive_why(archive* a) {
  const char* m = archive_error_string(a);
  return m ? m : "unknown error";
}

// Env and Entrypoint from enroot's runtime files in the tar at FD.
Result<ImageConfig> enroot_config(int fd, const std::string& image) {
  struct ArchiveFree {
    void operator()(archive* a) const { archive_read_free(a); }
  };
  std::unique_ptr<archive, ArchiveFree> a(archive_read_new());
  if (!a) return Status::error("libarchive: out of memory", ENOMEM);
  archive_read_support_format_tar(a.get());
  if (::lseek(fd, 0, SEEK_SET) == -1 ||
      archive_read_open_fd(a.get(), fd, 64 << 10) != ARCHIVE_OK)
    return Status::error("image '" + image + "': cannot read its tar: " + archive_why(a.get()), EIO);
  ImageConfig config;
  archive_entry* e = nullptr;
  int rc;
  // A warning (say, a name not valid in this locale) is no reason to stop, as in layer.cc.
  while ((rc = archive_read_next_header(a.get(), &e)) == ARCHIVE_OK || rc == ARCHIVE_WARN) {
    std::string_view name = archive_entry_pathname(e) ? archive_entry_pathname(e) : "";
    while (name.starts_with("./") || name.starts_with("/")) name.remove_prefix(name[0] == '.' ? 2 : 1);
    if (archive_entry_filetype(e) != AE_IFREG) continue;
    if (name == "etc/rc") config.entrypoint = {"/etc/rc"};
    if (name != "etc/environment") continue;
    if (archive_entry_size(e) > static_cast<la_int64_t>(kMaxEnvironmentFile))
      return Status::error("image '" + image + "': /etc/environment is larger than 64 KiB", EFBIG);
    std::string text(static_cast<size_t>(std::max<la_int64_t>(0, archive_entry_size(e))), '\0');
    for (size_t got = 0; got < text.size();) {
      la_ssize_t n = archive_read_data(a.get(), text.data() + got, text.size() - got);
      if (n <= 0) return Status::error("image '" + image + "': cannot read /etc/environment", EIO);
      got += static_cast<size_t>(n);
    }
    config.env = parse_environment_file(text);
  }
  if (rc != ARCHIVE_EOF)
    return Status::error("image '" + image + "': cannot read its tar: " + archive_why(a.get()), EIO);
  return config;
}

}  // namespace

std::string squashfs_memo_digest(const std::string& memo_file) {
  auto text = read_file_limited(memo_file, 128);
  if (!text.ok()) return "";
  std::string d = text->substr(0, text->find('\n'));
  return is_valid_digest(d) ? d : "";
}

bool is_squashfs(int fd) {
  char magic[4] = {};
  return ::pread(fd, magic, sizeof magic, 0) == sizeof magic && std::memcmp(magic, "hsqs", 4) == 0;
}

std::vector<std::string> parse_environment_file(std::string_view text) {
  std::vector<std::string> env;
  for (std::string_view line : split(text, '\n')) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.starts_with("export ")) line.remove_prefix(7);
    size_t eq = line.find('=');
    if (line.empty() || line[0] == '#' || eq == std::string_view::npos || eq == 0) continue;
    std::string_view name = line.substr(0, eq), value = line.substr(eq + 1);
    bool valid_name = !(name[0] >= '0' && name[0] <= '9');
    for (char c : name)
      valid_name = valid_name && (c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                                  (c >= '0' && c <= '9'));
    if (!valid_name) continue;
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
        value.back() == value.front())
      value = value.substr(1, value.size() - 2);
    // enroot substitutes ${VAR} from the host's environment at start; an image cannot know the
    // job's values, so such lines are left out rather than kept half-expanded.
    if (value.find("${") != std::string_view::npos) continue;
    env.push_back(std::string(name) + "=" + std::string(value));
  }
  return env;
}

std::string squashfs_damage(const std::string& image, int fd) {
  // The superblock (squashfs 4.0): bytes_used, the filesystem's length, at offset 40.
  unsigned char sb[96];
  struct stat st;
  if (::pread(fd, sb, sizeof sb, 0) != sizeof sb || ::fstat(fd, &st) == -1)
    return "squashfs image '" + image + "' is truncated (no whole superblock); copy it again";
  uint64_t used = 0;
  for (int i = 7; i >= 0; --i) used = (used << 8) | sb[40 + i];
  const uint16_t major = static_cast<uint16_t>(sb[28] | (sb[29] << 8));
  if (major != 4)
    return "squashfs image '" + image + "' is squashfs version " + std::to_string(major) +
           ", not 4; write it again with mksquashfs 4";
  if (static_cast<uint64_t>(st.st_size) < used)
    return "squashfs image '" + image + "' is truncated: " + std::to_string(st.st_size) +
           " bytes of the " + std::to_string(used) + " its superblock names; copy it again";
  return "";
}

namespace {

// Runs rdsquashfs ARGS on the squashfs at FD; its output, nullopt where the file is absent or not
// a regular file there, or the error.
Result<std::optional<std::string>> read_squashfs(const std::string& image, int fd,
                                                 const std::vector<std::string>& args) {
  const std::string tool = find_tool("rdsquashfs");
  if (tool.empty())
    return Status::error("image '" + image + "' is a squashfs file (enroot's format); reading it "
                         "needs rdsquashfs: install squashfs-tools-ng on the nodes",
                         ENOENT);
  UniqueFd out(::memfd_create("slipway-rdsquashfs", MFD_CLOEXEC));
  if (!out.valid()) return Status::from_errno("memfd_create", errno);
  std::vector<std::string> argv = {tool};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("/proc/self/fd/" + std::to_string(fd));
  std::string why = run_tool(argv, out.get(), fd, kMaxEnvironmentFile + 1);
  if (why.starts_with(argv.back() + ": ")) why.erase(0, argv.back().size() + 2);  // its input
  while (!why.empty() && why.back() == '.') why.pop_back();
  if (why.find("no such file or directory") != std::string::npos ||
      why.find("not a regular file") != std::string::npos)
    return std::optional<std::string>();
  if (!why.empty())
    return Status::error("cannot read squashfs image '" + image + "': rdsquashfs: " + why, EBADMSG);
  struct stat st;
  if (::fstat(out.get(), &st) == -1) return Status::from_errno("fstat", errno);
  if (static_cast<uint64_t>(st.st_size) > kMaxEnvironmentFile)
    return Status::error("image '" + image + "': " + args.back() + " says more than 64 KiB", EFBIG);
  std::string text(static_cast<size_t>(st.st_size), '\0');
  if (::pread(out.get(), text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    return Status::from_errno("read rdsquashfs's output", errno);
  return std::optional<std::string>(std::move(text));
}

}  // namespace

Result<ImportedImage> squashfs_image_to_mount(const std::string& image, int fd) {
  ImportedImage img;
  img.squashfs = image;
  if (image.empty() || image[0] != '/') {
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) return Status::from_errno("getcwd", errno);
    img.squashfs = std::string(cwd) + "/" + image;
  }
  img.manifest_digest = squashfs_identity(img.squashfs);
  img.was_cached = true;
  // enroot's runtime files, as enroot_config() reads them from the tar.
  auto env = read_squashfs(image, fd, {"-c", "/etc/environment"});
  SLIPWAY_TRY(env);
  if (*env) img.config.env = parse_environment_file(**env);
  auto rc = read_squashfs(image, fd, {"-s", "/etc/rc"});
  SLIPWAY_TRY(rc);
  if (*rc && (*rc)->find("Inode type: file\n") != std::string::npos) img.config.entrypoint = {"/etc/rc"};
  return img;
}

std::string squashfs_identity(const std::string& path) {
  std::string id = "squashfs:";
  for (unsigned char c : path) {
    if (std::isalnum(c) || std::strchr("/._+-", c)) {
      id += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      id += hex;
    }
  }
  return id;
}

Result<ImportedImage> find_recorded_image(const NodeCache& cache, std::string_view identity) {
  if (!identity.starts_with("squashfs:")) return find_cached_image(cache, identity);
  std::string path;
  for (size_t i = 9; i < identity.size(); ++i) {
    const auto hex = [&](size_t j) { return std::isxdigit(static_cast<unsigned char>(identity[j])); };
    if (identity[i] == '%' && i + 2 < identity.size() && hex(i + 1) && hex(i + 2)) {
      path += static_cast<char>(std::stoi(std::string(identity.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      path += identity[i];
    }
  }
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  struct stat st;
  if (!fd.valid() || ::fstat(fd.get(), &st) == -1)
    return Status::error("squashfs image '" + path + "': " + strerror(errno), errno);
  if (!S_ISREG(st.st_mode) || !is_squashfs(fd.get()))
    return Status::error("squashfs image '" + path + "' is no longer a squashfs file", EINVAL);
  if (std::string why = squashfs_damage(path, fd.get()); !why.empty())
    return Status::error(why, EBADMSG);
  return squashfs_image_to_mount(path, fd.get());
}

Result<ImportedImage> import_squashfs_image(const std::string& image, int fd,
                                            const ImportOptions& opts, Progress& progress) {
  struct stat st;
  SLIPWAY_SYS(::fstat(fd, &st), "stat " + image);
  NodeCache cache(opts.cache_dir);
  const std::string key = memo_key(st);
  if (std::string d = read_memo(cache, key); !d.empty())
    if (auto img = cached_and_touched(cache, d); img.ok()) return img;
  SLIPWAY_TRY(archive_library().load());
  SLIPWAY_TRY(crypto_library().load());
  const std::string sqfs2tar = find_tool("sqfs2tar");
  if (sqfs2tar.empty())
    return Status::error("image '" + image + "' is a squashfs file (enroot's format); reading it "
                         "needs sqfs2tar: install squashfs-tools-ng on the nodes",
                         ENOENT);
  const std::string lock_key = "squashfs-" + key;
  auto lock = FileLock::acquire(cache.lock_path(lock_key), FileLock::Mode::kExclusive);
  SLIPWAY_TRY(lock);
  auto blobs = hold_blobs(cache);  // no gc or rm sweeps our blobs before we publish
  SLIPWAY_TRY(blobs);
  if (std::string d = read_memo(cache, key); !d.empty())  // imported meanwhile
    if (auto img = cached_and_touched(cache, d); img.ok()) return img;
  SLIPWAY_TRY(cache.remove_stale_tmp(lock_key));

  progress.report("converting " + image + " (squashfs) to a layer");
  const std::string tar = cache.tmp_dir() + "/" + lock_key + "." + std::to_string(::getpid()) +
                          "." + random_suffix() + ".tar";
  UniqueFd out(::open(tar.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!out.valid()) return Status::from_errno("create " + tar, errno);
  struct Unlink {
    std::string path;
    ~Unlink() { ::unlink(path.c_str()); }
  } remove_tar{tar};
  // The file is read through /proc/self/fd: the path the user gave is opened once, by us.
  const std::string input = "/proc/self/fd/" + std::to_string(fd);
  // The tar is larger than what it unpacks to by its headers (512 bytes or more per entry), which
  // apply_layer's budget counts the same way: twice the budget only keeps the disk safe.
  std::string why = run_tool({sqfs2tar, "--no-xattr", input}, out.get(), fd,
                             2 * opts.bounds.max_image_bytes + (64ull << 20));
  if (why.starts_with(input + ": ")) why.erase(0, input.size() + 2);  // it names its input
  while (!why.empty() && why.back() == '.') why.pop_back();
  if (!why.empty()) {
    const int err = why.find("unpack limit") != std::string::npos         ? EFBIG
                    : why.find("No space left") != std::string::npos      ? ENOSPC
                    : why.find("Disk quota exceeded") != std::string::npos ? EDQUOT
                                                                           : EBADMSG;
    return with_fix(Status::error("cannot read squashfs image '" + image + "': sqfs2tar: " + why, err),
                    cache);
  }

  Sha256 hash;
  uint64_t size = 0;
  std::vector<char> buf(1 << 20);
  for (off_t at = 0;;) {
    ssize_t n = ::pread(out.get(), buf.data(), buf.size(), at);
    if (n < 0) return Status::from_errno("read " + tar, errno);
    if (n == 0) break;
    hash.update(buf.data(), static_cast<size_t>(n));
    at += n;
    size += static_cast<uint64_t>(n);
  }
  const std::string layer_digest = hash.finish();
  auto config = enroot_config(out.get(), image);
  SLIPWAY_TRY(config);

  BuildPlan plan;
  plan.image = image;
  plan.config_body = oci_config({layer_digest}, config->env, config->entrypoint);
  plan.config = std::move(*config);
  plan.manifest_body = oci_manifest(
      {.digest = sha256_digest(plan.config_body), .size = plan.config_body.size()},
      {{.media_type = std::string(media::kOciLayerTar), .digest = layer_digest, .size = size}});
  plan.manifest_digest = sha256_digest(plan.manifest_body);
  auto manifest = parse_manifest(plan.manifest_body);
  SLIPWAY_TRY(manifest);
  plan.manifest = std::move(*manifest);
  // The image lock of the manifest digest, as every other importer of that digest takes it.
  plan.lock_key = digest_hex(plan.manifest_digest);
  auto image_lock = FileLock::acquire(cache.lock_path(plan.lock_key), FileLock::Mode::kExclusive);
  SLIPWAY_TRY(image_lock);
  auto img = cached_and_touched(cache, plan.manifest_digest);
  if (!img.ok()) {
    SLIPWAY_TRY(cache.remove_stale_tmp(plan.lock_key));
    // The tar becomes the image's layer blob, kept as a registry image's layers are kept:
    // --container-save writes it into the archive it makes (snapshot.h). It costs the image's
    // size again on disk; `slipway rm` and `slipway gc` remove it with the image.
    const std::string blob = cache.blob_path(layer_digest);
    const bool made = ::access(blob.c_str(), F_OK) != 0;  // else the same bytes are there
    if (made) SLIPWAY_SYS(::rename(tar.c_str(), blob.c_str()), "rename " + tar + " to " + blob);
    LayerFetch present = [](size_t, size_t) { return Status(); };
    img = build_and_publish(cache, plan, present, 1, opts, progress);
    if (!img.ok() && made) ::unlink(blob.c_str());
    SLIPWAY_TRY(img);
  }
  // Without the memo the next run reads the file again, and still finds the image: not an error.
  (void)write_memo(cache, key, plan.manifest_digest);
  return img;
}

}  // namespace slipway::launcher
