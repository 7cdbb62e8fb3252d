// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Layer unpack tests: normal content, OCI whiteouts, and the hostile-archive set. Every test runs
// in a Sandbox and checks that nothing outside the rootfs changed.
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

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
  return s;
}
