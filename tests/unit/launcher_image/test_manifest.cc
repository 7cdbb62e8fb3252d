// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Manifest, index and config parsing (OCI and Docker media types, linux/amd64 selection, hostile
// fields), plus the registry auth pieces that need no network: WWW-Authenticate and credentials.
#include <string>

#include "image/manifest.h"
#include "image/manifest_handoff.h"
#include "image/registry_auth.h"
// check.h defines macros (fail) that break later standard headers: include it last.
#include "check_main.h"

using namespace slipway::launcher;

static std::string d(char c) { return "sha256:" + std::string(64, c); }

static std::string manifest_json(const std::string& layer_type, const std::string& extra = "") {
  return R"({"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json",)"
         R"("config":{"mediaType":"application/vnd.docker.container.image.v1+json","digest":")" +
         d('c') + R"(","size":1469},"layers":[{"mediaType":")" + layer_type + R"(","digest":")" +
         d('1') + R"(","size":100})" + extra + "]}";
}

START_TEST(docker_and_oci_manifests) {
  auto m = parse_manifest(manifest_json("application/vnd.docker.image.rootfs.diff.tar.gzip"));
  ck_assert_msg(m.ok(), "%s", m.status().message().c_str());
  ck_assert(m->config.digest == d('c') && m->config.size == 1469);
  ck_assert_int_eq(m->layers.size(), 1);
  ck_assert(m->layers[0].digest == d('1') && m->layers[0].size == 100);
  for (const char* t : {"application/vnd.oci.image.layer.v1.tar",
                        "application/vnd.oci.image.layer.v1.tar+zstd"})
    ck_assert(parse_manifest(manifest_json(t)).ok());
  ck_assert(!parse_manifest(manifest_json("application/vnd.oci.image.layer.v1.tar+bzip2")).ok());
  ck_assert(*manifest_kind(manifest_json("x")) == ManifestKind::kManifest);
  ck_assert(*manifest_kind("{}", "application/vnd.oci.image.index.v1+json; charset=utf-8") ==
            ManifestKind::kIndex);
}
END_TEST

START_TEST(hostile_manifests_rejected) {
  const std::string bad[] = {
      "not json",
      "[1,2]",
      R"({"schemaVersion":1,"fsLayers":[]})",
      R"({"schemaVersion":"2","config":{},"layers":[]})",
      manifest_json("application/vnd.oci.image.layer.v1.tar",
                    R"(,{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:../../etc","size":1})"),
      manifest_json("application/vnd.oci.image.layer.v1.tar",
                    R"(,{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":")" + d('2') + R"(","size":-5})"),
      manifest_json("application/vnd.oci.image.layer.v1.tar",
                    R"(,{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":")" + d('2') + R"("})"),
      R"({"schemaVersion":2,"config":{"digest":")" + d('c') + R"(","size":1}})",
  };
  for (const auto& b : bad) ck_assert_msg(!parse_manifest(b).ok(), "accepted: %s", b.c_str());
  auto s1 = manifest_kind(R"({"schemaVersion":1,"name":"x"})");
  ck_assert(!s1.ok() && s1.status().message().find("schema-1") != std::string::npos);
}
END_TEST

static std::string index_json(bool with_amd64) {
  std::string s = R"({"schemaVersion":2,"manifests":[)"
                  R"({"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":")" +
                  d('a') + R"(","size":10,"platform":{"os":"linux","architecture":"arm64","variant":"v8"}})";
  if (with_amd64)
    s += R"(,{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":")" + d('b') +
         R"(","size":11,"platform":{"os":"linux","architecture":"amd64"}})";
  s += R"(,{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":")" + d('e') +
       R"(","size":12,"platform":{"os":"windows","architecture":"amd64"}}]})";
  return s;
}

START_TEST(index_picks_linux_amd64) {
  ck_assert(*manifest_kind(index_json(true)) == ManifestKind::kIndex);
  auto p = pick_platform(index_json(true));
  ck_assert_msg(p.ok(), "%s", p.status().message().c_str());
  ck_assert(p->digest == d('b'));
  auto arm = pick_platform(index_json(true), "linux", "arm64");
  ck_assert(arm.ok() && arm->digest == d('a'));
  auto none = pick_platform(index_json(false));
  ck_assert(!none.ok());
  std::string msg = none.status().message();
  ck_assert_msg(msg == "image has no linux/amd64 variant (it has: linux/arm64, windows/amd64)", "%s",
                msg.c_str());
}
END_TEST

START_TEST(image_config) {
  auto c = parse_image_config(
      R"({"architecture":"amd64","config":{"Env":["PATH=/usr/bin","X=1"],"Entrypoint":["/e"],)"
      R"("Cmd":null,"WorkingDir":"/work","User":"nobody"}})");
  ck_assert_msg(c.ok(), "%s", c.status().message().c_str());
  ck_assert_int_eq(c->env.size(), 2);
  ck_assert(c->entrypoint.size() == 1 && c->entrypoint[0] == "/e");
  ck_assert(c->cmd.empty());
  ck_assert(c->working_dir == "/work" && c->user == "nobody");
  ck_assert(parse_image_config(R"({"architecture":"amd64"})").ok());
  ck_assert(!parse_image_config(R"({"config":{"Env":"PATH=/bin"}})").ok());
  ck_assert(!parse_image_config(R"({"config":{"Cmd":[1,2]}})").ok());
}
END_TEST

START_TEST(www_authenticate) {
  auto c = parse_www_authenticate(
      R"(Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/ubuntu:pull")");
  ck_assert(c.ok() && c->scheme == "bearer");
  ck_assert(c->params["realm"] == "https://auth.docker.io/token");
  ck_assert(c->params["service"] == "registry.docker.io");
  ck_assert(c->params["scope"] == "repository:library/ubuntu:pull");
  auto b = parse_www_authenticate(R"(Basic realm="a \"quoted\" realm", charset=UTF-8)");
  ck_assert(b.ok() && b->scheme == "basic");
  ck_assert(b->params["realm"] == "a \"quoted\" realm" && b->params["charset"] == "UTF-8");
  ck_assert(!parse_www_authenticate("").ok());
  ck_assert(!parse_www_authenticate(R"(Bearer realm="unterminated)").ok());
}
END_TEST

// The token server's answer: "token", else "access_token" (Docker's and OAuth2's names).
START_TEST(token_answer) {
  ck_assert(parse_token_answer(R"({"token":"abc","expires_in":300})") == "abc");
  ck_assert(parse_token_answer(R"({"access_token":"xyz"})") == "xyz");
  ck_assert(parse_token_answer(R"({"token":"","access_token":"xyz"})") == "xyz");
  ck_assert(parse_token_answer(R"({"token":42})").empty());
  ck_assert(parse_token_answer(R"(["token"])").empty());
  ck_assert(parse_token_answer("not json").empty());
}
END_TEST

START_TEST(credentials_file) {
  auto c = parse_credentials(
      "# site registry\nmachine 10.77.0.1:5000 login alice password s3cret\n"
      "machine nvcr.io\n  login $oauthtoken\n  password abc\ndefault login anon password x\n");
  ck_assert_msg(c.ok(), "%s", c.status().message().c_str());
  ck_assert(find_credentials(*c, "10.77.0.1:5000").login == "alice");
  ck_assert(find_credentials(*c, "nvcr.io").password == "abc");
  ck_assert(find_credentials(*c, "nvcr.io:443").login == "$oauthtoken");
  ck_assert(find_credentials(*c, "elsewhere").login == "anon");
  ck_assert(!parse_credentials("machine h login").ok());
  ck_assert(!parse_credentials("machine h user bob").ok());
  auto missing = read_credentials_file("/nonexistent/slipway/credentials");
  ck_assert(missing.ok() && missing->empty());
}
END_TEST


START_TEST(manifest_handoff_base64) {
  for (std::string body : {std::string("a"), std::string("ab"), std::string("abc"),
                           std::string("{\"schemaVersion\":2}"), std::string("\0\xff\x10", 3)}) {
    std::string enc = encode_manifest_handoff(body);
    ck_assert_int_eq(enc.size() % 4, 0);
    auto dec = decode_manifest_handoff(enc);
    ck_assert(dec.ok() && *dec == body);
  }
  ck_assert_str_eq(encode_manifest_handoff("hello").c_str(), "aGVsbG8=");
  ck_assert(encode_manifest_handoff("").empty());
  ck_assert(encode_manifest_handoff(std::string(kMaxHandoffBytes + 1, 'x')).empty());
  ck_assert(!encode_manifest_handoff(std::string(kMaxHandoffBytes, 'x')).empty());
  for (const char* bad : {"aGVsbG8", "aGV=bG8=", "a===", "aGVs*G8=", "=AAA"})
    ck_assert_msg(!decode_manifest_handoff(bad).ok(), "%s decoded", bad);
  ck_assert(!decode_manifest_handoff(std::string((kMaxHandoffBytes / 3 + 8) * 4, 'A')).ok());
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("manifest");
  TCase* tc = tcase_create("parse");
  tcase_add_test(tc, docker_and_oci_manifests);
  tcase_add_test(tc, hostile_manifests_rejected);
  tcase_add_test(tc, index_picks_linux_amd64);
  tcase_add_test(tc, image_config);
  tcase_add_test(tc, www_authenticate);
  tcase_add_test(tc, token_answer);
  tcase_add_test(tc, credentials_file);
  tcase_add_test(tc, manifest_handoff_base64);
  suite_add_tcase(s, tc);
  return s;
}
