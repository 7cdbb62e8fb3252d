// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Local image tests: an OCI layout directory written by the test, and the docker-archive and OCI
// archive skopeo makes from it, import into the cache under the manifest digest (the same digest
// every time); corrupt, incomplete and hostile local images fail with one clear line and publish
// nothing.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "image/digest.h"
#include "image/cache.h"
#include "image/import.h"
#include "image_test_util.h"
// check.h defines macros (fail) that break later standard headers: include it last.
#include "check_main.h"

using namespace slipway::launcher;

static const char* kConfigPrefix =
    R"({"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin","L=1"],"Cmd":["/bin/sh"]},)";

static void put_blob(const std::string& dir, const std::string& data) {
  write_text(dir + "/blobs/sha256/" + digest_hex(sha256_digest(data)), data);
}

// An OCI image layout in DIR with two layers (the second whites out a file of the first); returns
// the manifest digest.
static std::string write_layout(const std::string& dir, const std::string& label = "local",
                                int config_size_lie = 0) {
  mkdir(dir.c_str(), 0755);
  mkdir((dir + "/blobs").c_str(), 0755);
  mkdir((dir + "/blobs/sha256").c_str(), 0755);
  std::string l1 = TarBuilder(TarBuilder::Compression::kGzip)
                       .file("etc/slipway-image", label + "\n").file("old", "o")
                       .symlink("bin/sh", "busybox").finish();
  std::string l2 = TarBuilder(TarBuilder::Compression::kGzip).file(".wh.old", "").file("new", "n")
                       .finish();
  // diff_ids: the digests of the uncompressed layers (skopeo checks them for docker-archive).
  std::string u1 = TarBuilder().file("etc/slipway-image", label + "\n").file("old", "o")
                       .symlink("bin/sh", "busybox").finish();
  std::string u2 = TarBuilder().file(".wh.old", "").file("new", "n").finish();
  std::string config = std::string(kConfigPrefix) + R"("rootfs":{"type":"layers","diff_ids":[")" +
                       sha256_digest(u1) + R"(",")" + sha256_digest(u2) + R"("]}})";
  for (const auto& b : {config, l1, l2}) put_blob(dir, b);
  auto desc = [](const std::string& type, const std::string& data) {
    return R"({"mediaType":")" + type + R"(","digest":")" + sha256_digest(data) + R"(","size":)" +
           std::to_string(data.size()) + "}";
  };
  const std::string gz = "application/vnd.oci.image.layer.v1.tar+gzip";
  std::string manifest =
      std::string(R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":)") +
      R"({"mediaType":"application/vnd.oci.image.config.v1+json","digest":")" + sha256_digest(config) +
      R"(","size":)" + std::to_string(config.size() + config_size_lie) + "}" + R"(,"layers":[)" +
      desc(gz, l1) + "," + desc(gz, l2) + "]}";
  put_blob(dir, manifest);
  std::string entry = desc("application/vnd.oci.image.manifest.v1+json", manifest);
  entry.insert(entry.size() - 1, R"(,"annotations":{"org.opencontainers.image.ref.name":"latest"})");
  write_text(dir + "/index.json", R"({"schemaVersion":2,"manifests":[)" + entry + "]}");
  write_text(dir + "/oci-layout", R"({"imageLayoutVersion":"1.0.0"})");
  return sha256_digest(manifest);
}

static void check_rootfs(const ImportedImage& img) {
  ASSERT_SAME_STR(read_text(img.rootfs + "/etc/slipway-image"), "local\n");
  ASSERT_SAME_STR(read_text(img.rootfs + "/new"), "n");
  ck_assert(!path_exists(img.rootfs + "/old"));
  ck_assert(S_ISLNK(path_mode(img.rootfs + "/bin/sh")));
  ck_assert_int_eq(img.config.env.size(), 2);
}

static ImportOptions options(const Sandbox& sb) {
  ImportOptions o;
  o.cache_dir = sb.root + "/cache";
  return o;
}

static bool have_skopeo() { return access("/usr/bin/skopeo", X_OK) == 0; }

START_TEST(oci_layout_directory) {
  Sandbox sb;
  std::string layout = sb.base + "/outside/layout";  // beside the canary: read, never written
  std::string digest = write_layout(layout);
  auto img = import_image(*parse_image_ref("oci:" + layout), options(sb));
  ck_assert_msg(img.ok(), "%s", img.status().message().c_str());
  ASSERT_SAME_STR(img->manifest_digest, digest);
  ck_assert(!img->was_cached);
  check_rootfs(*img);
  auto again = import_image(*parse_image_ref(layout), options(sb));  // a plain path: a layout
  ck_assert(again.ok() && again->was_cached);
  ASSERT_SAME_STR(read_text(options(sb).cache_dir + "/images/" + digest_hex(digest) + "/name"),
                  layout + "\n");
  remove_all(layout);
  ck_assert(sb.surroundings_intact());
}
END_TEST

START_TEST(skopeo_archives) {
  if (!have_skopeo()) {
    fprintf(stderr, "SKIP: skopeo is not installed\n");
    return;
  }
  Sandbox sb;
  std::string work = sb.base + "-work";
  mkdir(work.c_str(), 0700);
  std::string digest = write_layout(work + "/layout");
  std::string copy = "skopeo copy -q oci:" + work + "/layout:latest ";
  ck_assert(system((copy + "oci-archive:" + work + "/oci.tar").c_str()) == 0);
  ck_assert(system((copy + "docker-archive:" + work + "/docker.tar").c_str()) == 0);
  ck_assert(system(("gzip -k " + work + "/docker.tar").c_str()) == 0);
  auto oci = import_image(*parse_image_ref(work + "/oci.tar"), options(sb));
  ck_assert_msg(oci.ok(), "%s", oci.status().message().c_str());
  ASSERT_SAME_STR(oci->manifest_digest, digest);  // the manifest digest, as from the layout
  check_rootfs(*oci);
  auto docker = import_image(*parse_image_ref("docker-archive:" + work + "/docker.tar"), options(sb));
  ck_assert_msg(docker.ok(), "%s", docker.status().message().c_str());
  ck_assert(!docker->was_cached);
  check_rootfs(*docker);
  auto gz = import_image(*parse_image_ref(work + "/docker.tar.gz"), options(sb));
  ck_assert_msg(gz.ok(), "%s", gz.status().message().c_str());
  ck_assert(gz->was_cached);  // same content, same made-up manifest, same digest
  ASSERT_SAME_STR(gz->manifest_digest, docker->manifest_digest);
  remove_all(work);
  ck_assert_int_eq(count_entries(options(sb).cache_dir + "/tmp"), 0);
  ck_assert(sb.surroundings_intact());
}
END_TEST

START_TEST(corrupt_layer_in_layout_is_rejected) {
  Sandbox sb;
  std::string layout = sb.base + "-layout";
  std::string digest = write_layout(layout);
  // Flip a byte of the first layer: same size, other content.
  std::string blobs = layout + "/blobs/sha256/";
  std::string manifest = read_text(blobs + digest_hex(digest));
  const std::string before_hex = "tar+gzip\",\"digest\":\"sha256:";
  std::string layer_hex = manifest.substr(manifest.find(before_hex) + before_hex.size(), 64);
  std::string big = read_text(blobs + layer_hex);
  big[big.size() / 2] ^= 1;
  write_text(blobs + layer_hex, big);
  auto img = import_image(*parse_image_ref("oci:" + layout), options(sb));
  ck_assert(!img.ok());
  std::string msg = img.status().message();
  ck_assert_msg(msg.find(layout + "/blobs/sha256/" + layer_hex + " is not blob sha256:" +
                         layer_hex + " (digest sha256:") == 0, "%s", msg.c_str());
  ck_assert_msg(msg.find("; the image is corrupt: export it again") != std::string::npos, "%s",
                msg.c_str());
  ck_assert(!path_exists(options(sb).cache_dir + "/images/" + digest_hex(digest)));
  ck_assert(!path_exists(options(sb).cache_dir + "/blobs/sha256/" + layer_hex));
  remove_all(layout);
  ck_assert(sb.surroundings_intact());
}
END_TEST

START_TEST(missing_and_hostile_local_images) {
  Sandbox sb;
  auto missing = import_image(*parse_image_ref(sb.base + "/nope.tar"), options(sb));
  ck_assert(!missing.ok());
  ASSERT_SAME_STR(missing.status().message(),
                  "cannot open image '" + sb.base + "/nope.tar': No such file or directory; "
                  "check the path");
  std::string dir = sb.base + "-junk";
  mkdir(dir.c_str(), 0700);
  auto neither = import_image(*parse_image_ref(dir), options(sb));
  ck_assert(!neither.ok());
  ck_assert_msg(neither.status().message().find("is neither an OCI layout or archive") !=
                std::string::npos, "%s", neither.status().message().c_str());
  // A docker-archive whose manifest.json points outside the archive's tree.
  write_text(dir + "/manifest.json", R"([{"Config":"../../etc/passwd","Layers":[]}])");
  std::string tar = sb.base + "-hostile.tar";
  ck_assert(system(("tar -C " + dir + " -cf " + tar + " manifest.json").c_str()) == 0);
  auto hostile = import_image(*parse_image_ref(tar), options(sb));
  ck_assert(!hostile.ok());
  ck_assert_msg(hostile.status().message().find("climbs out") != std::string::npos, "%s",
                hostile.status().message().c_str());
  remove_all(dir);
  remove_all(tar);
  ck_assert(sb.surroundings_intact());
}
END_TEST

// A FIFO in a layer blob's place, or in index.json's: refused at once with a line naming it (an
// import used to block forever reading it). Nothing is left in the cache.
START_TEST(fifo_in_layout_is_refused_without_blocking) {
  Sandbox sb;
  for (const char* which : {"layer", "index"}) {
    std::string layout = sb.base + "-fifo-" + which;
    std::string digest = write_layout(layout);
    std::string victim = layout + "/index.json";
    if (std::string(which) == "layer") {
      std::string manifest = read_text(layout + "/blobs/sha256/" + digest_hex(digest));
      const std::string before_hex = "tar+gzip\",\"digest\":\"sha256:";
      victim = layout + "/blobs/sha256/" + manifest.substr(manifest.find(before_hex) + before_hex.size(), 64);
    }
    ck_assert_int_eq(unlink(victim.c_str()), 0);
    ck_assert_int_eq(mkfifo(victim.c_str(), 0644), 0);
    alarm(20);  // a hang fails the test instead of blocking it
    auto img = import_image(*parse_image_ref("oci:" + layout), options(sb));
    alarm(0);
    ck_assert(!img.ok());
    ASSERT_SAME_STR(img.status().message(), victim + " is not a regular file (a FIFO); the image "
                                            "is corrupt: export it again");
    ck_assert(!path_exists(options(sb).cache_dir + "/images/" + digest_hex(digest)));
    remove_all(layout);
  }
  ck_assert(sb.surroundings_intact());
}
END_TEST

// Imports racing `gc --keep 0` and `rm` from other processes for a few seconds: every import
// succeeds (gc and rm used to delete the blobs an import had just copied, and it failed with
// "No such file or directory"), and afterwards every image passes check_image and tmp/ is empty.
static bool run_for(double seconds, const std::function<bool()>& body) {
  timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  do {
    if (!body()) return false;
    clock_gettime(CLOCK_MONOTONIC, &now);
  } while (static_cast<double>(now.tv_sec - start.tv_sec) +
               static_cast<double>(now.tv_nsec - start.tv_nsec) / 1e9 < seconds);
  return true;
}

START_TEST(imports_race_gc_and_rm) {
  Sandbox sb;
  std::vector<std::string> refs;
  for (const char* label : {"one", "two", "three"}) {
    std::string layout = sb.base + "-race-" + label;
    write_layout(layout, label);
    refs.push_back("oci:" + layout);
  }
  ImportOptions opts = options(sb);
  NodeCache cache(opts.cache_dir);
  ck_assert(cache.ensure_layout().ok());
  std::vector<std::function<bool()>> roles;
  for (int i = 0; i < 3; ++i)
    roles.push_back([&, i, n = 0]() mutable {
      auto img = import_image(*parse_image_ref(refs[(i + n++) % refs.size()]), opts);
      if (!img.ok()) fprintf(stderr, "importer %d: %s\n", i, img.status().message().c_str());
      return img.ok();
    });
  roles.push_back([&] {
    auto r = gc_images(cache, 0);
    if (!r.ok()) fprintf(stderr, "gc: %s\n", r.status().message().c_str());
    return r.ok();
  });
  roles.push_back([&] {
    auto images = list_images(cache);
    for (const auto& img : images.ok() ? *images : std::vector<CachedImage>{}) {
      Status st = remove_image(cache, img.manifest_digest);
      if (!st.ok() && st.error_number() != ENOENT && st.error_number() != EBUSY) {
        fprintf(stderr, "rm: %s\n", st.message().c_str());
        return false;
      }
    }
    return true;
  });
  std::vector<pid_t> pids;
  for (auto& role : roles) {
    pid_t pid = fork();
    if (pid == 0) _exit(run_for(4.0, role) ? 0 : 1);
    pids.push_back(pid);
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    waitpid(pids[i], &status, 0);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "role %zu failed (see stderr)", i);
  }
  for (const auto& ref : refs) ck_assert(import_image(*parse_image_ref(ref), opts).ok());
  auto images = list_images(cache);
  ck_assert(images.ok() && images->size() == refs.size());
  for (const auto& img : *images) {
    Status st = check_image(cache, img.manifest_digest);
    ck_assert_msg(st.ok(), "%s", st.message().c_str());
  }
  auto r = gc_images(cache, uint64_t{1} << 40);
  ck_assert(r.ok() && !r->blobs_deferred);
  ck_assert_int_eq(count_entries(cache.tmp_dir()), 0);
  for (const auto& ref : refs) remove_all(ref.substr(4));
  ck_assert(sb.surroundings_intact());
}
END_TEST

// check_image names what is wrong: a damaged layer blob, then a missing one.
START_TEST(check_finds_damaged_and_missing_blobs) {
  Sandbox sb;
  std::string layout = sb.base + "-check";
  std::string digest = write_layout(layout);
  ImportOptions opts = options(sb);
  NodeCache cache(opts.cache_dir);
  ck_assert(import_image(*parse_image_ref("oci:" + layout), opts).ok());
  ck_assert(check_image(cache, digest).ok());
  std::string manifest = read_text(cache.image_dir(digest) + "/manifest.json");
  const std::string before_hex = "tar+gzip\",\"digest\":\"sha256:";
  std::string layer = "sha256:" + manifest.substr(manifest.find(before_hex) + before_hex.size(), 64);
  std::string blob = read_text(cache.blob_path(layer));
  blob[blob.size() / 2] ^= 1;
  write_text(cache.blob_path(layer), blob);
  Status st = check_image(cache, digest);
  ck_assert(!st.ok());
  ck_assert_msg(st.message().find("image " + digest + ": layer 1 blob " + layer + " is damaged (its sha256 is sha256:") == 0,
                "%s", st.message().c_str());
  ck_assert_msg(st.message().find("; remove it ('slipway rm " + digest + "') and import it again") != std::string::npos,
                "%s", st.message().c_str());
  unlink(cache.blob_path(layer).c_str());
  st = check_image(cache, digest);
  ck_assert_msg(st.message().find("layer 1 blob " + layer + " is missing") != std::string::npos, "%s", st.message().c_str());
  remove_all(layout);
  ck_assert(sb.surroundings_intact());
}
END_TEST

// A config blob whose size in the manifest lies (its digest right) is refused by the import, as a
// registry's would be, and `slipway check` finds such an image in a cache too.
START_TEST(config_size_lie_is_refused) {
  Sandbox sb;
  std::string layout = sb.base + "-lie";
  write_layout(layout, "local", 7);
  auto img = import_image(*parse_image_ref("oci:" + layout), options(sb));
  ck_assert(!img.ok());
  const std::string msg = img.status().message();
  ck_assert_msg(msg.find(" bytes, its descriptor declares ") != std::string::npos &&
                    msg.find("; the image is corrupt: export it again") != std::string::npos,
                "%s", msg.c_str());
  remove_all(layout);
  // In a cache: the true image, published again under a manifest that lies about its config.
  std::string digest = write_layout(layout);
  ImportOptions o = options(sb);
  auto good = import_image(*parse_image_ref("oci:" + layout), o);
  ck_assert_msg(good.ok(), "%s", good.status().message().c_str());
  NodeCache cache(o.cache_dir);
  std::string manifest = read_text(cache.image_dir(digest) + "/manifest.json");
  const std::string config_size = R"(","size":)";
  size_t at = manifest.find(config_size) + config_size.size();
  size_t end = manifest.find('}', at);
  manifest.replace(at, end - at, std::to_string(std::stoull(manifest.substr(at, end - at)) + 7));
  const std::string lying = sha256_digest(manifest);
  ck_assert_int_eq(rename(cache.image_dir(digest).c_str(), cache.image_dir(lying).c_str()), 0);
  write_text(cache.image_dir(lying) + "/manifest.json", manifest);
  Status st = check_image(cache, lying);
  ck_assert_msg(!st.ok() && st.message().find("config.json is ") != std::string::npos &&
                    st.message().find(" bytes, its manifest declares ") != std::string::npos,
                "%s", st.message().c_str());
  remove_all(layout);
}
END_TEST

// A 6 KB path as the image: one line that names it once, with the cause and the fix.
START_TEST(long_path_is_named_once) {
  Sandbox sb;
  const std::string path = "/" + std::string(6000, 'a');
  auto img = import_image(*parse_image_ref(path), options(sb));
  ck_assert(!img.ok());
  const std::string msg = import_failed(path, img.status()).message();
  ck_assert_msg(msg == "failed to import docker image: " + path + ": cannot open it: File name too "
                       "long; the path is longer than the system allows", "%s", msg.substr(6000).c_str());
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("import_local");
  TCase* tc = tcase_create("local");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, oci_layout_directory);
  tcase_add_test(tc, skopeo_archives);
  tcase_add_test(tc, corrupt_layer_in_layout_is_rejected);
  tcase_add_test(tc, missing_and_hostile_local_images);
  tcase_add_test(tc, fifo_in_layout_is_refused_without_blocking);
  tcase_add_test(tc, imports_race_gc_and_rm);
  tcase_add_test(tc, check_finds_damaged_and_missing_blobs);
  tcase_add_test(tc, config_size_lie_is_refused);
  tcase_add_test(tc, long_path_is_named_once);
  suite_add_tcase(s, tc);
  return s;
}
