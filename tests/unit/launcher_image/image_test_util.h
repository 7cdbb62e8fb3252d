// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Helpers for the image tests: layer tarballs built in memory with libarchive's writer (so the
// hostile cases are made exactly as an attacker would), a temp "sandbox" directory with a rootfs
// and a sibling "outside" canary to prove nothing escaped, and small file helpers.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

struct archive;

class TarBuilder {
 public:
  enum class Compression { kNone, kGzip, kZstd };
  explicit TarBuilder(Compression c = Compression::kNone);
  ~TarBuilder();
  TarBuilder& file(const std::string& path, const std::string& data, mode_t mode = 0644);
  TarBuilder& dir(const std::string& path, mode_t mode = 0755);
  TarBuilder& symlink(const std::string& path, const std::string& target);
  TarBuilder& hardlink(const std::string& path, const std::string& target);
  TarBuilder& chardev(const std::string& path);
  TarBuilder& fifo(const std::string& path);
  std::string finish();

 private:
  void header(const std::string& path, unsigned type, mode_t mode, int64_t size,
              const std::string& link, bool hard);
  archive* a_;
  std::string out_;
};

// mkdtemp'd BASE with BASE/root (the unpack target) and BASE/outside/canary ("canary").
struct Sandbox {
  Sandbox();
  ~Sandbox();
  std::string base, root, outside;
  int rootfd = -1;
  // True when BASE holds only root/ and outside/, and outside/ only the untouched canary.
  bool surroundings_intact() const;
};

// A memfd holding DATA, positioned at 0.
int memfd_with(const std::string& data);
std::string read_text(const std::string& path);
bool path_exists(const std::string& path);  // lstat
mode_t path_mode(const std::string& path);  // lstat st_mode, 0 if missing
void write_text(const std::string& path, const std::string& data);
void remove_all(const std::string& path);
// Entries of directory PATH, without . and .. (-1 if it cannot be read).
int count_entries(const std::string& path);

// Compares std::strings in a Check test (ck_assert_str_eq wants C strings that outlive the macro).
#define ASSERT_SAME_STR(a, b)                                           \
  do {                                                                  \
    std::string a_ = (a), b_ = (b);                                     \
    ck_assert_msg(a_ == b_, "'%s' != '%s'", a_.c_str(), b_.c_str());     \
  } while (0)
