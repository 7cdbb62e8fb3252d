// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Import tests against a docker-registry started on 127.0.0.1 by each test: pull and cache,
// index resolution, error messages (404, refused connection, auth, digest mismatch, hostile
// layer), concurrent importers in several processes, and recovery from a dead importer's leftovers.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "image/digest.h"
#include "image/import.h"
#include "image/manifest_handoff.h"
#include "image/registry.h"
#include "image_test_util.h"
#include "test_registry.h"
// check.h defines macros (fail) that break later standard headers: include it last.
#include "check_main.h"

using namespace slipway::launcher;

static const char* kConfig =
    R"({"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin","A=1"],)"
    R"("Cmd":["/bin/sh"],"WorkingDir":"/w","User":"1000"},"rootfs":{"type":"layers"}})";

// A sandbox with a registry whose files live in a sibling directory of the canary.
struct Env {
  Sandbox sb;
  std::string regdir = sb.base + "-registry";
  TestRegistry* reg = nullptr;
  explicit Env(const std::string& htpasswd = "") {
    mkdir(regdir.c_str(), 0700);
    reg = new TestRegistry(regdir, htpasswd);
  }
  ~Env() {
    delete reg;
    remove_all(regdir);
  }
  ImportOptions options() const {
    ImportOptions o;
    o.cache_dir = sb.base + "/root/cache";
    o.registry.insecure_registries = {reg->host()};
    o.registry.max_retries = 1;
    return o;
  }
  ImageRef ref(const std::string& text) const {
    return *parse_image_ref(reg->host() + "/" + text);
  }
  std::string push_two_layers(const std::string& repo) {
    std::string l1 = TarBuilder(TarBuilder::Compression::kGzip)
                         .file("etc/os-release", "ID=test\n").file("bin/sh", "elf", 0755)
                         .file("old", "o").finish();
    std::string l2 = TarBuilder(TarBuilder::Compression::kZstd)
                         .file(".wh.old", "").file("w/new", "n").finish();
    return reg->push_image(repo, "v1", kConfig, {l1, l2});
  }
  // Pushes an OCI index of (manifest digest, architecture) entries, all linux, under TAG.
  bool push_index(const std::string& repo, const std::string& tag,
                  const std::vector<std::pair<std::string, std::string>>& entries) {
    std::string idx = R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[)";
    for (size_t i = 0; i < entries.size(); ++i)
      idx += std::string(i ? "," : "") +
             R"({"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":")" +
             entries[i].first + R"(","size":1,"platform":{"os":"linux","architecture":")" +
             entries[i].second + R"("}})";
    idx += "]}";
    return !reg->push_manifest(repo, tag, idx, "application/vnd.oci.image.index.v1+json").empty();
  }
};

#define SKIP_WITHOUT_REGISTRY(env)                                              \
  do {                                                                          \
    if (!(env).reg->started()) {                                                \
      fprintf(stderr, "SKIP: /usr/bin/docker-registry is not installed\n");     \
      return;                                                                   \
    }                                                                           \
  } while (0)

START_TEST(import_then_cached) {
  Env env;
  SKIP_WITHOUT_REGISTRY(env);
  std::string digest = env.push_two_layers("x/y");
  ck_assert(!digest.empty());
  auto img = import_image(env.ref("x/y:v1"), env.options());
  ck_assert_msg(img.ok(), "%s", img.status().message().c_str());
  ASSERT_SAME_STR(img->manifest_digest, digest);
  ck_assert(!img->was_cached);
  ASSERT_SAME_STR(read_text(img->rootfs + "/etc/os-release").c_str(), "ID=test\n");
  ASSERT_SAME_STR(read_text(img->rootfs + "/w/new").c_str(), "n");
  ck_assert(!path_exists(img->rootfs + "/old"));
  ck_assert_int_eq(img->config.env.size(), 2);
  ASSERT_SAME_STR(img->config.cmd[0].c_str(), "/bin/sh");
  ASSERT_SAME_STR(img->config.working_dir.c_str(), "/w");
  ASSERT_SAME_STR(img->config.user.c_str(), "1000");
  int manifests = env.reg->count_requests("/manifests/");
  ImageRef pinned = env.ref("x/y:v1");
  pinned.digest = digest;
  auto again = import_image(pinned, env.options());
  ck_assert(again.ok() && again->was_cached);
  ASSERT_SAME_STR(again->rootfs, img->rootfs);
  ck_assert_int_eq(env.reg->count_requests("/manifests/"), manifests);  // no request at all
  ck_assert(env.sb.surroundings_intact());
}
END_TEST

START_TEST(index_resolves_to_amd64) {
  Env env;
  SKIP_WITHOUT_REGISTRY(env);
  std::string amd = env.push_two_layers("multi/arch");
  std::string arm = env.reg->push_image("multi/arch", "arm", kConfig, {});
  ck_assert(env.push_index("multi/arch", "latest", {{arm, "arm64"}, {amd, "amd64"}}));
  auto d = resolve_digest(env.ref("multi/arch"), env.options().registry);
  ck_assert_msg(d.ok(), "%s", d.status().message().c_str());
  ASSERT_SAME_STR(d->c_str(), amd.c_str());
  auto img = import_image(env.ref("multi/arch:latest"), env.options());
  ck_assert_msg(img.ok(), "%s", img.status().message().c_str());
  ASSERT_SAME_STR(img->manifest_digest, amd);
}
END_TEST

// A tag resolved again costs a HEAD, not a GET (a pull, for Docker Hub's rate limit), while the
// tag names what it named; a moved tag, or a damaged memo, costs the GETs again.
START_TEST(tag_resolved_again_with_head_only) {
  Env env;
  SKIP_WITHOUT_REGISTRY(env);
  std::string first = env.push_two_layers("t/memo");
  const std::string m = "/v2/t/memo/manifests/";
  auto img = import_image(env.ref("t/memo:v1"), env.options());
  ck_assert_msg(img.ok(), "%s", img.status().message().c_str());
  ck_assert_int_eq(env.reg->count_requests(m, "GET"), 1);
  ck_assert_int_eq(env.reg->count_requests(m, "HEAD"), 0);
  auto again = import_image(env.ref("t/memo:v1"), env.options());
  ck_assert_msg(again.ok() && again->was_cached, "%s", again.status().message().c_str());
  ASSERT_SAME_STR(again->manifest_digest, first);
  ck_assert_int_eq(env.reg->count_requests(m, "GET"), 1);
  ck_assert_int_eq(env.reg->count_requests(m, "HEAD"), 1);
  // The tag moves: HEAD names another digest, so the manifest is fetched.
  std::string moved = env.reg->push_image("t/memo", "v1", kConfig, {});
  auto next = import_image(env.ref("t/memo:v1"), env.options());
  ck_assert_msg(next.ok(), "%s", next.status().message().c_str());
  ASSERT_SAME_STR(next->manifest_digest, moved);
  ck_assert_int_eq(env.reg->count_requests(m, "GET"), 2);
  // A memo whose manifest does not match its digest is not used (not even for a HEAD).
  ck_assert(system(("for f in " + env.options().cache_dir + "/tags/*; do echo x >>$f; done").c_str()) == 0);
  const int heads = env.reg->count_requests(m, "HEAD");
  auto damaged = import_image(env.ref("t/memo:v1"), env.options());
  ck_assert_msg(damaged.ok(), "%s", damaged.status().message().c_str());
  ASSERT_SAME_STR(damaged->manifest_digest, moved);
  ck_assert_int_eq(env.reg->count_requests(m, "GET"), 3);
  ck_assert_int_eq(env.reg->count_requests(m, "HEAD"), heads);
  ck_assert(env.sb.surroundings_intact());
}
END_TEST

// A tag naming an index: the memo keeps the index's digest (what HEAD says) and the amd64
// manifest it led to; the second resolution is one HEAD, no GET of either.
START_TEST(index_tag_resolved_again_with_head_only) {
  Env env;
  SKIP_WITHOUT_REGISTRY(env);
  std::string amd = env.push_two_layers("t/idx");
  ck_assert(env.push_index("t/idx", "multi", {{amd, "amd64"}}));
  const std::string m = "/v2/t/idx/manifests/";
  auto img = import_image(env.ref("t/idx:multi"), env.options());
  ck_assert_msg(img.ok(), "%s", img.status().message().c_str());
  ASSERT_SAME_STR(img->manifest_digest, amd);
  const int gets = env.reg->count_requests(m, "GET");
  ck_assert_int_eq(gets, 2);  // the index, then its amd64 manifest
  auto again = import_image(env.ref("t/idx:multi"), env.options());
  ck_assert_msg(again.ok() && again->was_cached, "%s", again.status().message().c_str());
  ASSERT_SAME_STR(again->manifest_digest, amd);
  ck_assert_int_eq(env.reg->count_requests(m, "GET"), gets);
  ck_assert_int_eq(env.reg->count_requests(m, "HEAD"), 1);
}
END_TEST

START_TEST(not_found_is_one_clear_line) {
  Env env;
  SKIP_WITHOUT_REGISTRY(env);
  auto img = import_image(env.ref("nope"), env.options());
  ck_assert(!img.ok());
  std::string want = "image '" + env.reg->host() + "/nope:latest' not found on registry " +
                     env.reg->host() + " (HTTP 404); check the name";
  ASSERT_SAME_STR(img.status().message(), want);
}
END_TEST

START_TEST(unreachable_registry_fails_fast) {
  Sandbox sb;
  std::string host = "127.0.0.1:" + std::to_string(free_port());
  RegistryOptions o;
  o.insecure_registries = {host};
  auto t0 = std::chrono::steady_clock::now();
  auto d = resolve_digest(*parse_image_ref(host + "/a/b"), o);
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ck_assert(!d.ok());
  std::string want = "cannot reach registry " + host +
                     ": Connection refused; check the address and that the registry is up";
  ASSERT_SAME_STR(d.status().message(), want);
  ck_assert(secs < 2.0);
}
END_TEST

START_TEST(corrupted_blob_is_rejected_and_not_cached) {
  Env env;
  SKIP_WITHOUT_REGISTRY(env);
  std::string layer = TarBuilder(TarBuilder::Compression::kGzip).file("f", "data").finish();
  std::string ldigest = sha256_digest(layer);
  ck_assert(!env.reg->push_image("bad/blob", "v1", kConfig, {layer}).empty());
  std::string hex = digest_hex(ldigest);
  std::string data = env.reg->storage() + "/docker/registry/v2/blobs/sha256/" + hex.substr(0, 2) +
                     "/" + hex + "/data";
  std::string bytes = read_text(data);
  bytes[bytes.size() / 2] ^= 1;  // same size, other content
  write_text(data, bytes);
  auto img = import_image(env.ref("bad/blob:v1"), env.options());
  ck_assert(!img.ok());
  std::string msg = img.status().message();
  ck_assert_msg(msg.find("blob " + ldigest + " of image '" + env.reg->host() +
                         "/bad/blob:v1' has digest sha256:") == 0, "%s", msg.c_str());
  ck_assert_msg(msg.find("(expected " + ldigest + "); the registry or a proxy corrupted it") !=
                std::string::npos, "%s", msg.c_str());
  std::string cache = env.options().cache_dir;
  ck_assert(!path_exists(cache + "/blobs/sha256/" + hex));
  ck_assert(!path_exists(cache + "/images/" + digest_hex(sha256_digest(""))));
  ck_assert(env.sb.surroundings_intact());
}
END_TEST

START_TEST(hostile_layer_fails_import_cleanly) {
  Env env;
  SKIP_WITHOUT_REGISTRY(env);
  std::string layer = TarBuilder(TarBuilder::Compression::kGzip)
                          .symlink("lib", "../../outside").file("lib/evil", "x").finish();
  std::string digest = env.reg->push_image("evil/img", "v1", kConfig, {layer});
  auto img = import_image(env.ref("evil/img:v1"), env.options());
  ck_assert(!img.ok());
  std::string msg = img.status().message();
  ck_assert_msg(msg.find("image '" + env.reg->host() + "/evil/img:v1', layer 1/1") == 0, "%s",
                msg.c_str());
  ck_assert_msg(msg.find("corrupt or malicious") != std::string::npos, "%s", msg.c_str());
  std::string cache = env.options().cache_dir;
  ck_assert(!path_exists(cache + "/images/" + digest_hex(digest)));
  ck_assert(!path_exists(cache + "/tmp/" + digest_hex(digest) + "." + std::to_string(getpid())));
  ck_assert(env.sb.surroundings_intact());
}
END_TEST

START_TEST(concurrent_importers_do_one_import) {
  Env env;
  SKIP_WITHOUT_REGISTRY(env);
  std::string big = TarBuilder(TarBuilder::Compression::kGzip)
                        .file("big", std::string(8 << 20, 'b')).finish();
  std::string digest = env.reg->push_image("con/cur", "v1", kConfig, {big});
  std::string dead_tmp = env.options().cache_dir + "/tmp/" + digest_hex(digest) + ".1.dead";
  ck_assert(env.options().cache_dir.size() > 0);
  ck_assert(NodeCache(env.options().cache_dir).ensure_layout().ok());
  mkdir(dead_tmp.c_str(), 0700);  // leftovers of a killed importer
  write_text(dead_tmp + "/junk", "j");
  constexpr int kProcs = 6;
  pid_t pids[kProcs];
  for (int i = 0; i < kProcs; ++i) {
    pids[i] = fork();
    if (pids[i] == 0) {
      auto img = import_image(env.ref("con/cur:v1"), env.options());
      _exit(!img.ok() ? 2 : img->was_cached ? 0 : 1);
    }
  }
  int imported = 0;
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) != 2);
    imported += WEXITSTATUS(status);
  }
  ck_assert_int_eq(imported, 1);
  ck_assert_int_eq(env.reg->count_requests("/blobs/" + sha256_digest(big)), 1);
  ck_assert(!path_exists(dead_tmp));
  ck_assert_int_eq(read_text(env.options().cache_dir + "/images/" + digest_hex(digest) +
                             "/rootfs/big").size(), 8 << 20);
}
END_TEST

START_TEST(basic_auth_with_and_without_credentials) {
  Sandbox pw;
  std::string htpasswd = pw.base + "/htpasswd";
  std::string cmd = "htpasswd -Bbn alice s3cret > " + htpasswd + " 2>/dev/null";
  if (system(cmd.c_str()) != 0) {
    fprintf(stderr, "SKIP: htpasswd (apache2-utils) is not installed\n");
    return;
  }
  Env env(htpasswd);
  SKIP_WITHOUT_REGISTRY(env);
  env.reg->set_push_credentials("alice", "s3cret");
  ck_assert(!env.push_two_layers("priv/img").empty());
  ImportOptions o = env.options();
  auto anon = import_image(env.ref("priv/img:v1"), o);
  ck_assert(!anon.ok());
  ck_assert_msg(anon.status().message().find("needs credentials (HTTP 401)") != std::string::npos,
                "%s", anon.status().message().c_str());
  o.registry.credentials_file = pw.base + "/creds";
  write_text(o.registry.credentials_file, "machine " + env.reg->host() + " login alice password nope\n");
  auto wrong = import_image(env.ref("priv/img:v1"), o);
  ck_assert(!wrong.ok());
  std::string want = "registry " + env.reg->host() + " refused credentials for 'priv/img' (HTTP 401); check " +
                     o.registry.credentials_file;
  ASSERT_SAME_STR(wrong.status().message(), want);
  write_text(o.registry.credentials_file, "machine 127.0.0.1 login alice password s3cret\n");
  auto ok = import_image(env.ref("priv/img:v1"), o);
  ck_assert_msg(ok.ok(), "%s", ok.status().message().c_str());
}
END_TEST


START_TEST(handed_off_manifest_means_no_manifest_request) {
  Env env;
  SKIP_WITHOUT_REGISTRY(env);
  std::string digest = env.push_two_layers("hand/off");
  auto fm = resolve_manifest(env.ref("hand/off:v1"), env.options().registry);  // srun's request
  ck_assert_msg(fm.ok(), "%s", fm.status().message().c_str());
  ASSERT_SAME_STR(fm->digest, digest);
  auto body = decode_manifest_handoff(encode_manifest_handoff(fm->body));  // through the env
  ck_assert(body.ok());
  ImageRef pinned = env.ref("hand/off:v1");
  pinned.digest = digest;
  ImportOptions o = env.options();
  o.manifest = *body;
  int before = env.reg->count_requests("/manifests/");
  auto img = import_image(pinned, o);
  ck_assert_msg(img.ok(), "%s", img.status().message().c_str());
  ck_assert(!img->was_cached);
  ASSERT_SAME_STR(read_text(img->rootfs + "/w/new"), "n");
  ck_assert_int_eq(env.reg->count_requests("/manifests/"), before);
  // Bytes that are not the pinned manifest are ignored: the node asks the registry.
  ImportOptions lying = env.options();
  lying.cache_dir += "-2";
  lying.manifest = R"({"schemaVersion":2,"config":{},"layers":[]})";
  auto again = import_image(pinned, lying);
  ck_assert_msg(again.ok(), "%s", again.status().message().c_str());
  ASSERT_SAME_STR(again->manifest_digest, digest);
  ck_assert_int_eq(env.reg->count_requests("/manifests/"), before + 1);
}
END_TEST

START_TEST(many_layers_fetched_in_parallel_apply_in_order) {
  Env env;
  SKIP_WITHOUT_REGISTRY(env);
  std::vector<std::string> layers;
  for (int i = 0; i < 7; ++i)  // each layer rewrites "top" and whiteouts the previous marker
    layers.push_back(TarBuilder(TarBuilder::Compression::kGzip)
                         .file("top", "layer " + std::to_string(i))
                         .file("m" + std::to_string(i), std::string(300000 * (i + 1), 'x'))
                         .file(i ? ".wh.m" + std::to_string(i - 1) : "first", "")
                         .finish());
  std::string digest = env.reg->push_image("par/img", "v1", kConfig, layers);
  ImportOptions o = env.options();
  o.parallel_downloads = 4;
  int lines = 0;
  o.progress = [&](std::string_view) { ++lines; };
  auto img = import_image(env.ref("par/img:v1"), o);
  ck_assert_msg(img.ok(), "%s", img.status().message().c_str());
  ASSERT_SAME_STR(read_text(img->rootfs + "/top"), "layer 6");
  for (int i = 0; i < 6; ++i) ck_assert(!path_exists(img->rootfs + "/m" + std::to_string(i)));
  ck_assert_int_eq(read_text(img->rootfs + "/m6").size(), 300000 * 7);
  for (const auto& l : layers) ck_assert_int_eq(env.reg->count_requests("/blobs/" + sha256_digest(l)), 1);
  ck_assert_int_le(lines, 2);  // none in the first second, then at most one a second
  ck_assert_int_eq(count_entries(o.cache_dir + "/tmp"), 0);
}
END_TEST

START_TEST(failed_layer_download_publishes_nothing) {
  Env env;
  SKIP_WITHOUT_REGISTRY(env);
  std::string l1 = TarBuilder(TarBuilder::Compression::kGzip).file("a", "1").finish();
  std::string l2 = TarBuilder(TarBuilder::Compression::kGzip).file("b", "2").finish();
  std::string digest = env.reg->push_image("gone/blob", "v1", kConfig, {l1, l2});
  std::string hex = digest_hex(sha256_digest(l2));
  remove_all(env.reg->storage() + "/docker/registry/v2/blobs/sha256/" + hex.substr(0, 2) + "/" + hex);
  auto img = import_image(env.ref("gone/blob:v1"), env.options());
  ck_assert(!img.ok());
  ck_assert_msg(img.status().message().find("blob " + sha256_digest(l2)) != std::string::npos,
                "%s", img.status().message().c_str());
  std::string cache = env.options().cache_dir;
  ck_assert(!path_exists(cache + "/images/" + digest_hex(digest)));
  ck_assert(!path_exists(cache + "/blobs/sha256/" + hex));
  ck_assert(env.sb.surroundings_intact());
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("import");
  TCase* tc = tcase_create("registry");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, import_then_cached);
  tcase_add_test(tc, index_resolves_to_amd64);
  tcase_add_test(tc, tag_resolved_again_with_head_only);
  tcase_add_test(tc, index_tag_resolved_again_with_head_only);
  tcase_add_test(tc, not_found_is_one_clear_line);
  tcase_add_test(tc, unreachable_registry_fails_fast);
  tcase_add_test(tc, corrupted_blob_is_rejected_and_not_cached);
  tcase_add_test(tc, hostile_layer_fails_import_cleanly);
  tcase_add_test(tc, concurrent_importers_do_one_import);
  tcase_add_test(tc, basic_auth_with_and_without_credentials);
  tcase_add_test(tc, handed_off_manifest_means_no_manifest_request);
  tcase_add_test(tc, many_layers_fetched_in_parallel_apply_in_order);
  tcase_add_test(tc, failed_layer_download_publishes_nothing);
  suite_add_tcase(s, tc);
  return s;
}
