// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Implementation of the image-test helpers (see image_test_util.h).
#include "image_test_util.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "image/fs_beneath.h"

namespace {
la_ssize_t append_cb(archive*, void* user, const void* buf, size_t n) {
  static_cast<std::string*>(user)->append(static_cast<const char*>(buf), n);
  return static_cast<la_ssize_t>(n);
}

std::set<std::string> list_dir(const std::string& path) {
  std::set<std::string> names;
  DIR* d = opendir(path.c_str());
  if (!d) return names;
  while (dirent* e = readdir(d))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) names.insert(e->d_name);
  closedir(d);
  return names;
}
}  // namespace

TarBuilder::TarBuilder(Compression c) : a_(archive_write_new()) {
  archive_write_set_format_pax_restricted(a_);
  if (c == Compression::kGzip) archive_write_add_filter_gzip(a_);
  if (c == Compression::kZstd) archive_write_add_filter_zstd(a_);
  archive_write_set_bytes_in_last_block(a_, 1);
  archive_write_open(a_, &out_, nullptr, append_cb, nullptr);
}

TarBuilder::~TarBuilder() {
  if (a_) archive_write_free(a_);
}

void TarBuilder::header(const std::string& path, unsigned type, mode_t mode, int64_t size,
                        const std::string& link, bool hard) {
  archive_entry* e = archive_entry_new();
  archive_entry_set_pathname(e, path.c_str());
  archive_entry_set_filetype(e, type);
  archive_entry_set_perm(e, mode);
  archive_entry_set_size(e, size);
  archive_entry_set_mtime(e, 1700000000, 0);
  if (!link.empty()) {
    if (hard) archive_entry_set_hardlink(e, link.c_str());
    else archive_entry_set_symlink(e, link.c_str());
  }
  if (type == AE_IFCHR) archive_entry_set_rdev(e, makedev(1, 3));
  archive_write_header(a_, e);
  archive_entry_free(e);
}

TarBuilder& TarBuilder::file(const std::string& path, const std::string& data, mode_t mode) {
  header(path, AE_IFREG, mode, static_cast<int64_t>(data.size()), "", false);
  archive_write_data(a_, data.data(), data.size());
  return *this;
}
TarBuilder& TarBuilder::dir(const std::string& path, mode_t mode) {
  header(path, AE_IFDIR, mode, 0, "", false);
  return *this;
}
TarBuilder& TarBuilder::symlink(const std::string& path, const std::string& target) {
  header(path, AE_IFLNK, 0777, 0, target, false);
  return *this;
}
TarBuilder& TarBuilder::hardlink(const std::string& path, const std::string& target) {
  header(path, AE_IFREG, 0644, 0, target, true);
  return *this;
}
TarBuilder& TarBuilder::chardev(const std::string& path) {
  header(path, AE_IFCHR, 0666, 0, "", false);
  return *this;
}
TarBuilder& TarBuilder::fifo(const std::string& path) {
  header(path, AE_IFIFO, 0644, 0, "", false);
  return *this;
}
std::string TarBuilder::finish() {
  archive_write_close(a_);
  archive_write_free(a_);
  a_ = nullptr;
  return out_;
}

Sandbox::Sandbox() {
  char tmpl[] = "/tmp/slipway-image-test-XXXXXX";
  base = mkdtemp(tmpl);
  root = base + "/root";
  outside = base + "/outside";
  mkdir(root.c_str(), 0755);
  mkdir(outside.c_str(), 0755);
  write_text(outside + "/canary", "canary");
  rootfd = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

Sandbox::~Sandbox() {
  if (rootfd >= 0) close(rootfd);
  remove_all(base);
}

bool Sandbox::surroundings_intact() const {
  struct stat st;
  if (list_dir(base) != std::set<std::string>{"root", "outside"}) return false;
  if (list_dir(outside) != std::set<std::string>{"canary"}) return false;
  if (lstat((outside + "/canary").c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1)
    return false;
  return read_text(outside + "/canary") == "canary";
}

int memfd_with(const std::string& data) {
  int fd = memfd_create("layer", MFD_CLOEXEC);
  if (write(fd, data.data(), data.size()) != static_cast<ssize_t>(data.size())) abort();
  lseek(fd, 0, SEEK_SET);
  return fd;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool path_exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

mode_t path_mode(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 ? st.st_mode : 0;
}

void write_text(const std::string& path, const std::string& data) {
  std::ofstream f(path);
  f << data;
}

void remove_all(const std::string& path) {
  int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  (void)slipway::launcher::remove_tree_at(fd, path.c_str() + 1);
  close(fd);
}

int count_entries(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (!d) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
  closedir(d);
  return n;
}
