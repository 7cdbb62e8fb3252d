// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Squashfs images (enroot's format, what pyxis users have on disk): a squashfs made by mksquashfs
// imports as a one-layer image with enroot's /etc/environment as Env and /etc/rc as Entrypoint,
// under the same digest every time; the second import reads nothing (the memo); a corrupt file
// and a decompression bomb fail with one line and leave the cache as it was.
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "image/digest.h"
#include "image/import.h"
#include "image/import_squashfs.h"
#include "image_test_util.h"
// check.h defines macros (fail) that break later standard headers: include it last.
#include "check_main.h"

using namespace slipway::launcher;

static ImportOptions options(const Sandbox& sb) {
  ImportOptions o;
  o.cache_dir = sb.root + "/cache";
  return o;
}

static void run(const std::string& cmd) {
  ck_assert_msg(system(cmd.c_str()) == 0, "failed: %s", cmd.c_str());
}

// A tree in DIR/tree packed as DIR/image.sqsh (needs squashfs-tools, as the nodes need
// squashfs-tools-ng: contrib/install-deps.sh installs both).
static std::string make_squashfs(const std::string& dir, bool with_rc) {
  ck_assert_msg(access("/usr/bin/mksquashfs", X_OK) == 0 && access("/usr/bin/sqfs2tar", X_OK) == 0,
                "mksquashfs or sqfs2tar missing: run contrib/install-deps.sh");
  const std::string tree = dir + "/tree";
  run("mkdir -p " + tree + "/etc " + tree + "/bin " + tree + "/opt/locked");
  write_text(tree + "/etc/slipway-image", "sqsh\n");
  write_text(tree + "/etc/environment",
             "# enroot writes the image's Env here\nPATH=/usr/local/bin:/bin\n"
             "QUOTED=\"a b\"\nexport EXPORTED=yes\nFROM_HOST=${HOME}/x\n1BAD=no\n\n");
  if (with_rc) {
    write_text(tree + "/etc/rc", "#!/bin/sh\nexec \"$@\"\n");
    chmod((tree + "/etc/rc").c_str(), 0755);
  }
  run("ln -s busybox " + tree + "/bin/sh");
  write_text(tree + "/opt/locked/f", "x");
  chmod((tree + "/opt/locked").c_str(), 0500);  // the owner must still be able to remove it
  run("mksquashfs " + tree + " " + dir + "/image.sqsh -noappend -quiet -all-root >/dev/null");
  chmod((tree + "/opt/locked").c_str(), 0700);
  return dir + "/image.sqsh";
}

START_TEST(environment_file_lines) {
  auto env = parse_environment_file(
      "A=1\n  B = 2\n# C=3\nexport D=4\nE=\"five\"\nF='six'\nG=${HOME}\n9H=x\nI-J=y\n=z\nK=\r\nL");
  std::vector<std::string> want = {"A=1", "D=4", "E=five", "F=six", "K="};
  ck_assert_int_eq(env.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_SAME_STR(env[i], want[i]);
}
END_TEST

START_TEST(squashfs_imports_with_enroot_config) {
  Sandbox sb;
  std::string work = sb.base + "-work";
  mkdir(work.c_str(), 0700);
  std::string sqsh = make_squashfs(work, true);
  auto ref = parse_image_ref(sqsh);
  ck_assert(ref.ok());
  auto img = import_image(*ref, options(sb));
  ck_assert_msg(img.ok(), "%s", img.status().message().c_str());
  ck_assert(!img->was_cached);
  ASSERT_SAME_STR(read_text(img->rootfs + "/etc/slipway-image"), "sqsh\n");
  ck_assert(S_ISLNK(path_mode(img->rootfs + "/bin/sh")));
  ck_assert((path_mode(img->rootfs + "/opt/locked") & 0700) == 0700);
  std::vector<std::string> env = {"PATH=/usr/local/bin:/bin", "QUOTED=a b", "EXPORTED=yes"};
  ck_assert_int_eq(img->config.env.size(), env.size());
  for (size_t i = 0; i < env.size(); ++i) ASSERT_SAME_STR(img->config.env[i], env[i]);
  ck_assert_int_eq(img->config.entrypoint.size(), 1);
  ASSERT_SAME_STR(img->config.entrypoint[0], "/etc/rc");
  // The tar it went through is the layer blob (for --container-save), and tmp/ is empty.
  ck_assert_int_eq(count_entries(sb.root + "/cache/blobs/sha256"), 1);
  ck_assert_int_eq(count_entries(sb.root + "/cache/tmp"), 0);
  ck_assert_int_eq(count_entries(sb.root + "/cache/squashfs"), 1);

  // The memo names the image; the next import finds it there, without converting the file again
  // (which would take the file's squashfs lock: its lock file would be back).
  const std::string memo_dir = sb.root + "/cache/squashfs";
  ck_assert(system(("grep -qx '" + img->manifest_digest + "' " + memo_dir + "/*").c_str()) == 0);
  run("rm " + sb.root + "/cache/locks/squashfs-*.lock");
  auto again = import_image(*ref, options(sb));
  ck_assert_msg(again.ok(), "%s", again.status().message().c_str());
  ck_assert(again->was_cached);
  ASSERT_SAME_STR(again->manifest_digest, img->manifest_digest);
  ck_assert(system(("ls " + sb.root + "/cache/locks/squashfs-*.lock >/dev/null 2>&1").c_str()) != 0);

  // Touched (new mtime, same bytes): read again, same digest, still one image.
  run("touch -d '2001-01-01' " + sqsh);
  auto touched = import_image(*ref, options(sb));
  ck_assert_msg(touched.ok(), "%s", touched.status().message().c_str());
  ASSERT_SAME_STR(touched->manifest_digest, img->manifest_digest);
  ck_assert_int_eq(count_entries(sb.root + "/cache/images"), 1);

  // Other bytes, other image.
  write_text(work + "/tree/etc/slipway-image", "changed\n");
  run("mksquashfs " + work + "/tree " + sqsh + " -noappend -quiet -all-root >/dev/null");
  auto changed = import_image(*ref, options(sb));
  ck_assert_msg(changed.ok(), "%s", changed.status().message().c_str());
  ck_assert(changed->manifest_digest != img->manifest_digest);
  ASSERT_SAME_STR(read_text(changed->rootfs + "/etc/slipway-image"), "changed\n");
  remove_all(work);
  ck_assert(sb.surroundings_intact());
}
END_TEST

// To be mounted: nothing goes into the cache; the config is read from the file all the same, and
// the identity (what records keep) finds the same image again, blanks in the path included.
START_TEST(squashfs_to_mount_reads_its_config_and_touches_no_cache) {
  Sandbox sb;
  std::string work = sb.base + "-work";
  mkdir(work.c_str(), 0700);
  const std::string sqsh = work + "/my image%.sqsh";
  ck_assert_int_eq(rename(make_squashfs(work, true).c_str(), sqsh.c_str()), 0);
  ImportOptions o = options(sb);
  o.mount_squashfs = true;
  auto img = import_image(*parse_image_ref(sqsh), o);
  ck_assert_msg(img.ok(), "%s", img.status().message().c_str());
  ASSERT_SAME_STR(img->squashfs, sqsh);
  ck_assert(img->rootfs.empty());
  ASSERT_SAME_STR(img->manifest_digest, squashfs_identity(sqsh));
  ck_assert(img->manifest_digest.find(' ') == std::string::npos);
  std::vector<std::string> env = {"PATH=/usr/local/bin:/bin", "QUOTED=a b", "EXPORTED=yes"};
  ck_assert_int_eq(img->config.env.size(), env.size());
  for (size_t i = 0; i < env.size(); ++i) ASSERT_SAME_STR(img->config.env[i], env[i]);
  ck_assert_int_eq(img->config.entrypoint.size(), 1);
  for (const char* d : {"/images", "/blobs/sha256", "/tmp", "/squashfs"})
    ck_assert_int_eq(count_entries(sb.root + "/cache" + d), 0);
  auto found = find_recorded_image(NodeCache(o.cache_dir), img->manifest_digest);
  ck_assert_msg(found.ok(), "%s", found.status().message().c_str());
  ASSERT_SAME_STR(found->squashfs, sqsh);
  ck_assert_int_eq(found->config.env.size(), env.size());
  // Gone: the record names the file in its error.
  run("rm '" + sqsh + "'");
  auto gone = find_recorded_image(NodeCache(o.cache_dir), img->manifest_digest);
  ck_assert(!gone.ok());
  ck_assert_msg(gone.status().message().find("squashfs image '" + sqsh + "': No such file") == 0, "%s",
                gone.status().message().c_str());
  remove_all(work);
  ck_assert(sb.surroundings_intact());
}
END_TEST

START_TEST(squashfs_without_rc_has_no_entrypoint) {
  Sandbox sb;
  std::string work = sb.base + "-work";
  mkdir(work.c_str(), 0700);
  auto img = import_image(*parse_image_ref(make_squashfs(work, false)), options(sb));
  ck_assert_msg(img.ok(), "%s", img.status().message().c_str());
  ck_assert(img->config.entrypoint.empty());
  remove_all(work);
}
END_TEST

START_TEST(corrupt_squashfs_and_bombs_publish_nothing) {
  Sandbox sb;
  std::string work = sb.base + "-work";
  mkdir(work.c_str(), 0700);
  std::string sqsh = make_squashfs(work, false);
  // Cut after the superblock: the magic is there, the tables it points to are not. Found
  // before any tool runs, whether the file would be mounted or unpacked.
  run("cp " + sqsh + " " + work + "/whole.sqsh && truncate -s 100 " + sqsh);
  for (bool mount : {false, true}) {
    ImportOptions o = options(sb);
    o.mount_squashfs = mount;
    auto cut = import_image(*parse_image_ref(sqsh), o);
    ck_assert(!cut.ok());
    ck_assert_msg(cut.status().message().find("squashfs image '" + sqsh + "' is truncated: 100 bytes of the ") == 0,
                  "%s", cut.status().message().c_str());
  }
  // Whole length, tables zeroed: sqfs2tar (unpack) and rdsquashfs (mount) say what is wrong.
  run("cp " + work + "/whole.sqsh " + sqsh + " && dd if=/dev/zero of=" + sqsh +
      " bs=1 seek=$(( $(od -An -t u8 -j 40 -N 8 " + sqsh + ") - 300 )) count=300 conv=notrunc status=none");
  for (bool mount : {false, true}) {
    ImportOptions o = options(sb);
    o.mount_squashfs = mount;
    auto bad = import_image(*parse_image_ref(sqsh), o);
    ck_assert(!bad.ok());
    const std::string want = "cannot read squashfs image '" + sqsh + (mount ? "': rdsquashfs: " : "': sqfs2tar: ");
    ck_assert_msg(bad.status().message().find(want) == 0 && bad.status().message().find('\n') == std::string::npos,
                  "%s", bad.status().message().c_str());
  }
  ck_assert_int_eq(count_entries(sb.root + "/cache/images"), 0);
  ck_assert_int_eq(count_entries(sb.root + "/cache/tmp"), 0);
  ck_assert_int_eq(count_entries(sb.root + "/cache/squashfs"), 0);

  // 80 MiB of zeros compress to almost nothing; the unpack limit stops sqfs2tar's output.
  run("mkdir -p " + work + "/bomb && head -c 83886080 /dev/zero >" + work + "/bomb/zeros");
  run("mksquashfs " + work + "/bomb " + work + "/bomb.sqsh -noappend -quiet >/dev/null");
  ImportOptions small = options(sb);
  small.bounds.max_image_bytes = 1 << 20;
  auto bomb = import_image(*parse_image_ref(work + "/bomb.sqsh"), small);
  ck_assert(!bomb.ok());
  ck_assert_msg(bomb.status().message().find("unpack limit") != std::string::npos, "%s",
                bomb.status().message().c_str());
  ck_assert_int_eq(count_entries(sb.root + "/cache/images"), 0);
  ck_assert_int_eq(count_entries(sb.root + "/cache/tmp"), 0);
  ck_assert_int_eq(count_entries(sb.root + "/cache/blobs/sha256"), 0);
  remove_all(work);
  ck_assert(sb.surroundings_intact());
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("import_squashfs");
  TCase* tc = tcase_create("squashfs");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, environment_file_lines);
  tcase_add_test(tc, squashfs_imports_with_enroot_config);
  tcase_add_test(tc, squashfs_without_rc_has_no_entrypoint);
  tcase_add_test(tc, squashfs_to_mount_reads_its_config_and_touches_no_cache);
  tcase_add_test(tc, corrupt_squashfs_and_bombs_publish_nothing);
  suite_add_tcase(s, tc);
  return s;
}
