// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Layer unpack tests: normal content, OCI whiteouts, and the hostile-archive set. Every test runs
// in a Sandbox and checks that nothing outside the rootfs changed.
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/text.h"
#include "image/import.h"
#include "image/layer.h"
#include "image_test_util.h"
// check.h defines macros (fail) that break later standard headers: include it last.
#include "check_main.h"

using slipway::launcher::apply_layer;
using slipway::launcher::Status;
using slipway::launcher::UnpackBudget;
using slipway::launcher::UnpackStats;

static Status unpack(const Sandbox& sb, const std::string& tar, uint64_t max = 1ull << 30,
                    UnpackStats* stats = nullptr) {
  int fd = memfd_with(tar);
  UnpackBudget budget{max, 0};
  Status st = apply_layer(sb.rootfd, fd, budget, stats);
  close(fd);
  return st;
}

static Status unpack_with(const Sandbox& sb, const std::string& tar, UnpackBudget& budget) {
  int fd = memfd_with(tar);
  Status st = apply_layer(sb.rootfd, fd, budget);
  close(fd);
  return st;
}

#define ASSERT_OK(st)                                                   \
  do {                                                                  \
    Status s_ = (st);                                                   \
    ck_assert_msg(s_.ok(), "unexpected error: %s", s_.message().c_str()); \
  } while (0)
#define ASSERT_FAILS_WITH(st, needle)                                                     \
  do {                                                                                    \
    Status s_ = (st);                                                                     \
    ck_assert_msg(!s_.ok(), "expected an error containing '%s'", needle);                 \
    ck_assert_msg(s_.message().find(needle) != std::string::npos, "error '%s' lacks '%s'", \
                  s_.message().c_str(), needle);                                          \
  } while (0)

START_TEST(plain_layer_all_compressions) {
  for (auto c : {TarBuilder::Compression::kNone, TarBuilder::Compression::kGzip,
                 TarBuilder::Compression::kZstd}) {
    Sandbox sb;
    std::string tar = TarBuilder(c)
                          .dir("etc", 0755)
                          .file("etc/hostname", "box\n")
                          .file("bin/tool", "#!/bin/sh\n", 0755)  // parent not declared
                          .symlink("bin/alias", "tool")
                          .hardlink("bin/tool2", "bin/tool")
                          .dir("tmp", 01777)
                          .finish();
    ASSERT_OK(unpack(sb, tar));
    ck_assert_str_eq(read_text(sb.root + "/etc/hostname").c_str(), "box\n");
    ck_assert(S_ISLNK(path_mode(sb.root + "/bin/alias")));
    ck_assert_int_eq(path_mode(sb.root + "/bin/tool") & 07777, 0755);
    ck_assert_int_eq(path_mode(sb.root + "/tmp") & 07777, 01777);
    struct stat a, b;
    lstat((sb.root + "/bin/tool").c_str(), &a);
    lstat((sb.root + "/bin/tool2").c_str(), &b);
    ck_assert(a.st_ino == b.st_ino);
    ck_assert(sb.surroundings_intact());
  }
}
END_TEST

START_TEST(whiteouts_and_opaque_dirs) {
  Sandbox sb;
  ASSERT_OK(unpack(sb, TarBuilder()
                          .file("a/f1", "1")
                          .file("a/f2", "2")
                          .file("b/x", "x")
                          .file("c/y", "y")
                          .file("c/sub/deep", "d")
                          .file("d/old", "o")
                          .finish()));
  ASSERT_OK(unpack(sb, TarBuilder()
                          .file("a/.wh.f1", "")
                          .file(".wh.b", "")
                          .dir("c")
                          .file("c/.wh..wh..opq", "")
                          .file("c/z", "z")
                          .file("d/new", "n")  // same layer, before the opaque marker: kept
                          .file("d/.wh..wh..opq", "")
                          .file(".wh.nothing-there", "")
                          .finish()));
  ck_assert(!path_exists(sb.root + "/a/f1"));
  ck_assert(path_exists(sb.root + "/a/f2"));
  ck_assert(!path_exists(sb.root + "/a/.wh.f1"));
  ck_assert(!path_exists(sb.root + "/b"));
  ck_assert(!path_exists(sb.root + "/c/y"));
  ck_assert(!path_exists(sb.root + "/c/sub"));
  ck_assert(!path_exists(sb.root + "/c/.wh..wh..opq"));
  ck_assert_str_eq(read_text(sb.root + "/c/z").c_str(), "z");
  ck_assert(!path_exists(sb.root + "/d/old"));
  ck_assert_str_eq(read_text(sb.root + "/d/new").c_str(), "n");
  ck_assert(sb.surroundings_intact());
}
END_TEST

START_TEST(upper_file_does_not_change_other_hard_links) {
  Sandbox sb;
  ASSERT_OK(unpack(sb, TarBuilder().file("one", "old").hardlink("two", "one").finish()));
  ASSERT_OK(unpack(sb, TarBuilder().file("one", "new").finish()));
  ck_assert_str_eq(read_text(sb.root + "/one").c_str(), "new");
  ck_assert_str_eq(read_text(sb.root + "/two").c_str(), "old");
}
END_TEST

START_TEST(type_changes_across_layers) {
  Sandbox sb;
  ASSERT_OK(unpack(sb, TarBuilder().file("x/inner", "i").file("y", "file").finish()));
  ASSERT_OK(unpack(sb, TarBuilder().file("x", "now a file").dir("y").file("y/z", "z").finish()));
  ck_assert(S_ISREG(path_mode(sb.root + "/x")));
  ck_assert(S_ISDIR(path_mode(sb.root + "/y")));
  ck_assert_str_eq(read_text(sb.root + "/y/z").c_str(), "z");
}
END_TEST

START_TEST(dotdot_traversal_rejected) {
  for (const char* p : {"../outside/evil", "a/../../outside/evil", "./../outside/canary"}) {
    Sandbox sb;
    ASSERT_FAILS_WITH(unpack(sb, TarBuilder().file(p, "pwned").finish()), "'..'");
    ck_assert(sb.surroundings_intact());
  }
}
END_TEST

START_TEST(absolute_paths_stay_inside) {
  Sandbox sb;
  std::string abs = sb.outside + "/evil";
  ASSERT_OK(unpack(sb, TarBuilder().file("/abs/file", "a").file(abs, "x").finish()));
  ck_assert_str_eq(read_text(sb.root + "/abs/file").c_str(), "a");
  ck_assert_str_eq(read_text(sb.root + abs).c_str(), "x");
  ck_assert(sb.surroundings_intact());
}
END_TEST

START_TEST(symlink_then_write_same_layer) {
  for (std::string target : {std::string("../outside"), std::string("/")}) {
    Sandbox sb;
    if (target == "/") target = sb.outside;  // absolute, pointing at the real outside dir
    std::string tar = TarBuilder().symlink("link", target).file("link/evil", "pwned").finish();
    ASSERT_FAILS_WITH(unpack(sb, tar), "symlink");
    ck_assert(sb.surroundings_intact());
  }
}
END_TEST

START_TEST(symlink_then_write_across_layers) {
  Sandbox sb;
  ASSERT_OK(unpack(sb, TarBuilder().dir("usr").symlink("usr/lib", sb.outside).finish()));
  ASSERT_FAILS_WITH(unpack(sb, TarBuilder().file("usr/lib/evil", "pwned").finish()), "symlink");
  ASSERT_FAILS_WITH(unpack(sb, TarBuilder().dir("usr/lib/d").finish()), "symlink");
  ASSERT_FAILS_WITH(unpack(sb, TarBuilder().file("usr/lib/.wh.canary", "").finish()), "symlink");
  ck_assert(sb.surroundings_intact());
}
END_TEST

START_TEST(file_over_symlink_replaces_the_link) {
  Sandbox sb;
  ASSERT_OK(unpack(sb, TarBuilder().symlink("f", "../outside/canary").finish()));
  ASSERT_OK(unpack(sb, TarBuilder().file("f", "mine").finish()));
  ck_assert(S_ISREG(path_mode(sb.root + "/f")));
  ck_assert_str_eq(read_text(sb.root + "/f").c_str(), "mine");
  ASSERT_OK(unpack(sb, TarBuilder().symlink("g", sb.outside).dir("g").finish()));
  ck_assert(S_ISDIR(path_mode(sb.root + "/g")));
  ck_assert(sb.surroundings_intact());
}
END_TEST

START_TEST(hard_link_out_rejected) {
  Sandbox sb;
  ASSERT_FAILS_WITH(unpack(sb, TarBuilder().hardlink("h", "../outside/canary").finish()),
                    "outside the image root");
  ASSERT_FAILS_WITH(unpack(sb, TarBuilder().hardlink("h", sb.outside + "/canary").finish()),
                    "not a file earlier in the image");
  ASSERT_FAILS_WITH(
      unpack(sb, TarBuilder().symlink("l", sb.outside).hardlink("h", "l/canary").finish()),
      "symlink");
  ck_assert(!path_exists(sb.root + "/h"));
  ck_assert(sb.surroundings_intact());  // canary still has one link
}
END_TEST

START_TEST(devices_skipped_fifos_kept) {
  Sandbox sb;
  UnpackStats stats;
  ASSERT_OK(unpack(sb, TarBuilder().chardev("dev/mem").fifo("run/pipe").finish(), 1 << 20, &stats));
  ck_assert(!path_exists(sb.root + "/dev/mem"));
  ck_assert(S_ISFIFO(path_mode(sb.root + "/run/pipe")));
  ck_assert_int_eq(stats.skipped_devices, 1);
  ck_assert(sb.surroundings_intact());
}
END_TEST

START_TEST(setuid_and_setgid_dropped) {
  Sandbox sb;
  UnpackStats stats;
  ASSERT_OK(unpack(sb, TarBuilder().dir("d", 02775).file("d/su", "x", 04755).file("sg", "y", 02711)
                          .file("ro", "z", 0000).finish(), 1 << 20, &stats));
  ck_assert_int_eq(path_mode(sb.root + "/d/su") & 07777, 0755);
  ck_assert_int_eq(path_mode(sb.root + "/sg") & 07777, 0711);
  ck_assert_int_eq(path_mode(sb.root + "/d") & 07777, 0775);
  ck_assert_int_eq(path_mode(sb.root + "/ro") & 07777, 0600);  // owner can always read it
  ck_assert_int_eq(stats.dropped_setid, 3);
}
END_TEST

// Rewrites the size field of the first header to DECLARED and fixes the checksum (ustar layout).
static std::string with_declared_size(std::string tar, size_t declared) {
  char field[12];
  snprintf(field, sizeof field, "%011zo", declared);
  memcpy(&tar[124], field, 11);
  memset(&tar[148], ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < 512; ++i) sum += static_cast<unsigned char>(tar[i]);
  snprintf(field, sizeof field, "%06o", sum);
  memcpy(&tar[148], field, 7);
  return tar;
}

START_TEST(entry_larger_than_declared_rejected) {
  Sandbox sb;
  std::string tar = TarBuilder().file("big", std::string(4096, 'X')).finish();
  ck_assert(tar.compare(0, 3, "big") == 0);  // plain ustar header first, no pax header
  ASSERT_FAILS_WITH(unpack(sb, with_declared_size(tar, 10)), "corrupt");
  ck_assert(sb.surroundings_intact());
}
END_TEST

START_TEST(truncated_layer_rejected) {
  Sandbox sb;
  std::string tar = TarBuilder().file("a", std::string(100000, 'a')).finish();
  ASSERT_FAILS_WITH(unpack(sb, tar.substr(0, 50000)), "runcated");
  std::string gz = TarBuilder(TarBuilder::Compression::kGzip).file("a", std::string(300000, 'a'))
                       .file("b", "b").finish();
  Sandbox sb2;
  ASSERT_FAILS_WITH(unpack(sb2, gz.substr(0, gz.size() / 2)), "corrupt");
}
END_TEST

START_TEST(decompression_bomb_rejected) {
  Sandbox sb;
  std::string gz = TarBuilder(TarBuilder::Compression::kGzip)
                       .file("zeros", std::string(4 << 20, '\0')).finish();
  ck_assert_uint_lt(gz.size(), 64 << 10);
  ASSERT_FAILS_WITH(unpack(sb, gz, 1 << 20), "decompression bomb");
  ck_assert(sb.surroundings_intact());
}
END_TEST

START_TEST(garbage_layer_rejected) {
  Sandbox sb;
  ASSERT_FAILS_WITH(unpack(sb, std::string(3000, '\x7f')), "corrupt");
  ck_assert(sb.surroundings_intact());
}
END_TEST

// A legal tree 1,500 levels deep (paths stay under PATH_MAX), branching below level 40, with a
// directory lacking u+w: the importer makes it, and a whiteout in the next layer removes it with
// at most 64 descriptors open (it used to keep one per level and fail with EMFILE).
START_TEST(deep_tree_whiteout_with_few_descriptors) {
  Sandbox sb;
  TarBuilder layer;
  std::string path = "top";
  for (int level = 0; level < 1500; ++level) {
    path += "/d";
    if (level % 100 == 0) layer.file(path + "-file", "x");
    if (level == 40) {
      for (const char* branch : {"/a", "/b", "/c"}) {
        std::string side = path + branch;
        for (int k = 0; k < 50; ++k) side += "/s";
        layer.file(side + "/leaf", "leaf");
      }
    }
    if (level == 700) layer.dir(path, 0500);
  }
  layer.file(path + "/bottom", "b");
  ASSERT_OK(unpack(sb, layer.finish()));
  ck_assert(path_exists(sb.root + "/" + path + "/bottom"));
  rlimit few{64, 64};
  ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &few), 0);
  ASSERT_OK(unpack(sb, TarBuilder().file(".wh.top", "").finish()));
  ck_assert(!path_exists(sb.root + "/top"));
  ck_assert_int_eq(count_entries(sb.root), 0);
  ck_assert(sb.surroundings_intact());
}
END_TEST

// A site's bounds: a layer inflating past max_layer_ratio (48 MiB of zeros in a few KiB of gzip,
// with ratio 2 allowing 32 MiB: counted from 16 MiB up), and a filesystem with less free than
// min_free_space.
START_TEST(layer_ratio_and_free_space_bounds) {
  Sandbox sb;
  std::string gz = TarBuilder(TarBuilder::Compression::kGzip)
                       .file("zeros", std::string(48 << 20, '\0')).finish();
  int fd = memfd_with(gz);
  UnpackBudget ratio;
  ratio.max_ratio = 2;
  ASSERT_FAILS_WITH(apply_layer(sb.rootfd, fd, ratio), "unpack to more than 32.0 MiB (max_layer_ratio=2, SLIPWAY_MAX_LAYER_RATIO)");
  close(fd);
  UnpackBudget none;  // ratio 0: no bound
  ASSERT_OK(unpack_with(sb, gz, none));
  struct statvfs vfs;
  ck_assert_int_eq(statvfs(sb.root.c_str(), &vfs), 0);
  UnpackBudget full;
  full.min_free_bytes = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize + 1;  // more than the disk
  ASSERT_FAILS_WITH(unpack_with(sb, TarBuilder().file("x", "x").finish(), full),
                    (" it must keep (min_free_space=" + slipway::launcher::human_bytes(full.min_free_bytes) +
                     ", SLIPWAY_MIN_FREE_SPACE)").c_str());
  ck_assert(sb.surroundings_intact());
}
END_TEST

// A gzip member of DATA (libarchive's gzip filter over the raw format).
static std::string gzip_member(const std::string& data) {
  archive* a = archive_write_new();
  archive_write_add_filter_gzip(a);
  archive_write_set_format_raw(a);
  std::string buf(data.size() + (64 << 10), '\0');
  size_t used = 0;
  archive_write_open_memory(a, buf.data(), buf.size(), &used);
  archive_entry* e = archive_entry_new();
  archive_entry_set_filetype(e, AE_IFREG);
  archive_write_header(a, e);
  archive_write_data(a, data.data(), data.size());
  archive_write_close(a);
  archive_write_free(a);
  archive_entry_free(e);
  return buf.substr(0, used);
}

// The bounds' defaults stop a gzip bomb early: one 4 GiB file of zeros in ~4 MiB of gzip (a
// ustar header, then 4096 gzip members of 1 MiB of zeros each, as gzip -c appends them), is
// refused by the default max_layer_ratio after at most 400 MiB of writes, not 4 GiB.
START_TEST(default_bounds_stop_a_gzip_bomb_early) {
  Sandbox sb;
  std::string h(512, '\0');
  std::memcpy(&h[0], "bomb", 4);
  std::snprintf(&h[100], 8, "%07o", 0644);
  std::snprintf(&h[108], 8, "%07o", 0);
  std::snprintf(&h[116], 8, "%07o", 0);
  std::snprintf(&h[124], 12, "%011llo", 4ull << 30);
  std::snprintf(&h[136], 12, "%011o", 0);
  h[156] = '0';
  std::memcpy(&h[257], "ustar", 6);
  std::memcpy(&h[263], "00", 2);
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(&h[148], 8, "%06o", sum);
  std::string bomb = gzip_member(h);
  const std::string mib = gzip_member(std::string(1 << 20, '\0'));
  for (int i = 0; i < 4096; ++i) bomb += mib;
  bomb += gzip_member(std::string(1024, '\0'));
  ck_assert(bomb.size() < (8u << 20));
  slipway::launcher::ImportBounds defaults;
  UnpackBudget budget;
  budget.max_bytes = defaults.max_image_bytes;
  budget.max_ratio = defaults.max_layer_ratio;
  ASSERT_FAILS_WITH(unpack_with(sb, bomb, budget), "(max_layer_ratio=20, SLIPWAY_MAX_LAYER_RATIO)");
  ck_assert_msg(budget.used <= (400ull << 20), "%llu bytes written",
                static_cast<unsigned long long>(budget.used));
}
END_TEST

// Real layers pass the default max_layer_ratio (20, counted from 16 MiB) with room to spare, while
// a bomb does not. Recorded shapes: the bytes the unpack counts (file data + 512 per entry) against
// the gzip blob's size, measured on the project's torch images (contrib/images; the libtorch layer
// is 15 shared libraries) and on CUDA: the CUDA 13.0 libraries of the build host (cuBLAS/cuBLASLt,
// cuDNN 9, cuFFT, NCCL, cuSPARSE, cuSOLVER, cuRAND, NVRTC: /usr/local/cuda-13.0, one tar of
// 2.8 GB, gzip -6), nvidia/cuda:11.8.0-devel-ubuntu20.04 (2.92 GB compressed, 7.37 GB unpacked, as
// Docker Hub and `docker images` show it: moby/moby#46425) taken as one layer, and the issue's
// 3 GB layer of shared libraries at 4:1, above anything measured. Then the same rule on real bytes:
// a layer of samples of the shared libraries on this host (CUDA's when present) is unpacked with
// the defaults, and its measured ratio, applied to a 3 GB layer, stays 4 times below the bound.
START_TEST(real_layer_shapes_pass_the_default_ratio) {
  using slipway::launcher::layer_unpack_allowance;
  const double ratio = slipway::launcher::ImportBounds{}.max_layer_ratio;
  struct Shape { const char* what; uint64_t compressed, unpacked; };
  const Shape real[] = {
      {"torch (1.13) base layer", 244612648, 690815412},      // 2.82:1
      {"torch (1.13) libtorch", 43155830, 134381952},          // 3.11:1
      {"torch (1.13) python", 50100935, 182175130},            // 3.64:1, the highest measured
      {"torch-trixie (2.6) base layer", 189654947, 518181542}, // 2.73:1
      {"torch-trixie (2.6) libtorch", 87747295, 283102736},    // 3.23:1
      {"torch-trixie (2.6) python", 63408755, 216305698},      // 3.41:1
      {"torch-forky base layer", 174078113, 505993121},        // 2.91:1
      {"torch-forky libtorch", 100608558, 324905280},          // 3.23:1
      {"torch-forky python", 82617731, 281017825},             // 3.40:1
      {"CUDA 13.0 libraries", 1850297131, 2793635840},         // 1.51:1
      {"nvidia/cuda:11.8.0-devel as one layer", 2920000000, 7370000000},  // 2.52:1
      {"3 GB of shared libraries at 4:1", 3000000000, 12000000000},
  };
  for (const Shape& l : real)
    ck_assert_msg(l.unpacked <= layer_unpack_allowance(l.compressed, ratio), "%s refused", l.what);
  // A 20 MB gzip bomb (gzip's ~1030:1 on zeros: 20.6 GB) stops within 400 MB of writes.
  ck_assert_uint_eq(layer_unpack_allowance(20000000, ratio), 400000000);
  ck_assert_uint_eq(layer_unpack_allowance(1000, ratio), 20ull * (16 << 20));  // small: 320 MiB
  ck_assert(layer_unpack_allowance(3000000000, 0) == UINT64_MAX);

  // Real bytes: 1 MiB samples at 0, 1/4, 1/2 and 3/4 of each shared library, up to 24 MiB.
  std::vector<std::pair<std::string, std::string>> samples;
  size_t total = 0;
  std::string from;  // the directories sampled
  for (const char* dir : {"/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/local/cuda-13.0/lib",
                          "/usr/lib/x86_64-linux-gnu", "/usr/lib64"}) {
    DIR* d = opendir(dir);
    if (!d) continue;
    while (dirent* e = readdir(d)) {
      const std::string path = std::string(dir) + "/" + e->d_name;
      struct stat st;
      if (total >= (24u << 20) || std::string(e->d_name).find(".so") == std::string::npos ||
          lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < (4 << 20))
        continue;
      int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      for (int q = 0; q < 4; ++q) {
        std::string chunk(1 << 20, '\0');
        ssize_t n = pread(fd, chunk.data(), chunk.size(), st.st_size / 4 * q);
        if (n <= 0) continue;
        chunk.resize(static_cast<size_t>(n));
        total += chunk.size();
        samples.emplace_back(std::string(e->d_name) + "." + std::to_string(q), std::move(chunk));
      }
      if (from.find(dir) == std::string::npos) from += std::string(from.empty() ? "" : ", ") + dir;
      close(fd);
    }
    closedir(d);
    if (total >= (24u << 20)) break;
  }
  if (total < (16u << 20)) {
    fprintf(stderr, "SKIP (real bytes): fewer than 16 MiB of shared libraries on this host\n");
    return;
  }
  TarBuilder tar(TarBuilder::Compression::kGzip);
  for (const auto& [name, data] : samples) tar.file("usr/lib/" + name, data, 0755);
  const std::string gz = tar.finish();
  Sandbox sb;
  const slipway::launcher::ImportBounds defaults;
  UnpackBudget budget;
  budget.max_bytes = defaults.max_image_bytes;
  budget.max_ratio = defaults.max_layer_ratio;
  ASSERT_OK(unpack_with(sb, gz, budget));
  const double measured = static_cast<double>(budget.layer_used) / static_cast<double>(gz.size());
  fprintf(stderr, "shared libraries sampled (%s): %.1f MiB, gzip %.1f MiB: %.2f:1\n", from.c_str(),
          static_cast<double>(total) / (1 << 20), static_cast<double>(gz.size()) / (1 << 20), measured);
  ck_assert_msg(measured * 4 <= ratio, "real shared libraries measure %.2f:1", measured);
  const uint64_t cuda_layer = 3000000000;
  ck_assert(static_cast<uint64_t>(measured * static_cast<double>(cuda_layer)) <=
            layer_unpack_allowance(cuda_layer, ratio));
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("layer");
  TCase* tc = tcase_create("unpack");
  tcase_add_test(tc, plain_layer_all_compressions);
  tcase_add_test(tc, whiteouts_and_opaque_dirs);
  tcase_add_test(tc, upper_file_does_not_change_other_hard_links);
  tcase_add_test(tc, type_changes_across_layers);
  tcase_add_test(tc, deep_tree_whiteout_with_few_descriptors);
  suite_add_tcase(s, tc);
  TCase* h = tcase_create("hostile");
  tcase_add_test(h, dotdot_traversal_rejected);
  tcase_add_test(h, absolute_paths_stay_inside);
  tcase_add_test(h, symlink_then_write_same_layer);
  tcase_add_test(h, symlink_then_write_across_layers);
  tcase_add_test(h, file_over_symlink_replaces_the_link);
  tcase_add_test(h, hard_link_out_rejected);
  tcase_add_test(h, devices_skipped_fifos_kept);
  tcase_add_test(h, setuid_and_setgid_dropped);
  tcase_add_test(h, entry_larger_than_declared_rejected);
  tcase_add_test(h, truncated_layer_rejected);
  tcase_add_test(h, decompression_bomb_rejected);
  tcase_add_test(h, layer_ratio_and_free_space_bounds);
  tcase_add_test(h, default_bounds_stop_a_gzip_bomb_early);
  tcase_add_test(h, garbage_layer_rejected);
  suite_add_tcase(s, h);
  TCase* r = tcase_create("real");  // gzips 24 MiB: seconds on a loaded machine
  tcase_set_timeout(r, 30);
  tcase_add_test(r, real_layer_shapes_pass_the_default_ratio);
  suite_add_tcase(s, r);
  return s;
}
