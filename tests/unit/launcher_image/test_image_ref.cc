// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Image reference parsing: Docker Hub short names, registries with ports, tags and digests,
// docker:// and local paths, and the invalid forms that must be refused with a reason.
#include <string>

#include "image/image_ref.h"
#include "image/registry.h"
// check.h defines macros (fail) that break later standard headers: include it last.
#include "check_main.h"

using slipway::launcher::ImageRef;
using slipway::launcher::parse_image_ref;
using slipway::launcher::RefDefaults;

static const std::string kHex(64, 'a');

static std::string canon(const std::string& text, const RefDefaults& d = {}) {
  auto r = parse_image_ref(text, d);
  return r.ok() ? r->str() : "ERROR: " + r.status().message();
}

#define EXPECT_CANON(text, want)                                                         \
  do {                                                                                   \
    std::string got_ = canon(text);                                                      \
    ck_assert_msg(got_ == (want), "'%s' -> '%s', want '%s'", std::string(text).c_str(),  \
                  got_.c_str(), std::string(want).c_str());                              \
  } while (0)

START_TEST(docker_hub_short_names) {
  EXPECT_CANON("ubuntu", "registry-1.docker.io/library/ubuntu:latest");
  EXPECT_CANON("ubuntu:22.04", "registry-1.docker.io/library/ubuntu:22.04");
  EXPECT_CANON("user/img", "registry-1.docker.io/user/img:latest");
  EXPECT_CANON("docker.io/ubuntu", "registry-1.docker.io/library/ubuntu:latest");
  EXPECT_CANON("index.docker.io/user/img:t", "registry-1.docker.io/user/img:t");
  EXPECT_CANON("docker://ubuntu", "registry-1.docker.io/library/ubuntu:latest");
  auto r = parse_image_ref("nvcr.io/nvidia/pytorch:24.01-py3");
  ck_assert(r.ok());
  ck_assert_str_eq(r->registry.c_str(), "nvcr.io");
  ck_assert_str_eq(r->repository.c_str(), "nvidia/pytorch");
  ck_assert_str_eq(r->tag.c_str(), "24.01-py3");
  ck_assert(r->kind == ImageRef::Kind::kRegistry);
}
END_TEST

START_TEST(registries_tags_digests) {
  EXPECT_CANON("host:5000/a/b:t@sha256:" + kHex, "host:5000/a/b:t@sha256:" + kHex);
  EXPECT_CANON("host:5000/a/b@sha256:" + kHex, "host:5000/a/b@sha256:" + kHex);
  EXPECT_CANON("localhost/x", "localhost/x:latest");
  EXPECT_CANON("localhost:5000/x", "localhost:5000/x:latest");
  EXPECT_CANON("10.77.0.1:5000/slipway/busybox", "10.77.0.1:5000/slipway/busybox:latest");
  EXPECT_CANON("docker://10.77.0.1:5000/a:b", "10.77.0.1:5000/a:b");
  EXPECT_CANON("a.b-c/d__e.f-g/h---i:T_1.x-y", "a.b-c/d__e.f-g/h---i:T_1.x-y");
  auto r = parse_image_ref("host:5000/a/b@sha256:" + kHex);
  ck_assert(r.ok() && r->tag.empty() && r->digest == "sha256:" + kHex);
}
END_TEST

START_TEST(site_default_registry) {
  RefDefaults d;
  d.default_registry = "10.77.0.1:5000";
  ck_assert(canon("ubuntu", d) == "10.77.0.1:5000/ubuntu:latest");
  ck_assert(canon("docker.io/ubuntu", d) == "registry-1.docker.io/library/ubuntu:latest");
}
END_TEST

START_TEST(local_paths) {
  RefDefaults d;
  d.cwd = "/home/u/work";
  auto a = parse_image_ref("./img.tar", d);
  ck_assert(a.ok() && a->kind == ImageRef::Kind::kArchive);
  ck_assert_str_eq(a->path.c_str(), "/home/u/work/img.tar");
  auto b = parse_image_ref("/data/img.tar.gz", d);
  ck_assert(b.ok() && b->kind == ImageRef::Kind::kArchive && b->path == "/data/img.tar.gz");
  auto c = parse_image_ref("../layouts/ubuntu", d);
  ck_assert(c.ok() && c->kind == ImageRef::Kind::kOciLayout);
  ck_assert(c->str() == "/home/u/work/../layouts/ubuntu");
  auto e = parse_image_ref("oci-archive:img.tar", d);
  ck_assert(e.ok() && e->kind == ImageRef::Kind::kArchive && e->path == "/home/u/work/img.tar");
  auto f = parse_image_ref("oci:/srv/layout", d);
  ck_assert(f.ok() && f->kind == ImageRef::Kind::kOciLayout && f->path == "/srv/layout");
}
END_TEST

// enroot's daemon schemes: the name goes to docker save / podman save as it was written.
START_TEST(daemon_schemes) {
  auto d = parse_image_ref("dockerd://ubuntu:22.04");
  ck_assert(d.ok() && d->kind == ImageRef::Kind::kDaemon);
  ck_assert_str_eq(d->daemon.c_str(), "docker");
  ck_assert_str_eq(d->repository.c_str(), "ubuntu:22.04");
  EXPECT_CANON("dockerd://ubuntu:22.04", "dockerd://ubuntu:22.04");
  auto p = parse_image_ref("podman://localhost/a/b:t");
  ck_assert(p.ok() && p->kind == ImageRef::Kind::kDaemon);
  ck_assert_str_eq(p->daemon.c_str(), "podman");
  EXPECT_CANON("podman://localhost/a/b:t", "podman://localhost/a/b:t");
  for (const char* bad : {"podman://", "dockerd://", "podman://-o", "dockerd://a b"})
    ck_assert_msg(!parse_image_ref(bad).ok(), "accepted '%s'", bad);
}
END_TEST

// registry_mirrors= / SLIPWAY_REGISTRY_MIRRORS: REGISTRY=MIRROR pairs, docker.io as Docker Hub.
START_TEST(registry_mirrors_parse) {
  auto m = slipway::launcher::parse_registry_mirrors("docker.io=mirror:5000,10.0.0.1:5000=10.0.0.2:5003");
  ck_assert_msg(m.ok(), "%s", m.ok() ? "" : m.status().message().c_str());
  ck_assert_int_eq(m->size(), 2);
  ck_assert_str_eq(m->at("registry-1.docker.io").c_str(), "mirror:5000");
  ck_assert_str_eq(m->at("10.0.0.1:5000").c_str(), "10.0.0.2:5003");
  ck_assert(slipway::launcher::parse_registry_mirrors("").ok());
  for (const char* bad : {"docker.io", "=m", "a=", "a=http://m", "a=m/path", "a=m,", "a=m b"}) {
    auto r = slipway::launcher::parse_registry_mirrors(bad);
    ck_assert_msg(!r.ok(), "accepted '%s'", bad);
    ck_assert(r.status().message().find("is malformed; use REGISTRY=MIRROR") != std::string::npos);
  }
}
END_TEST

START_TEST(invalid_references) {
  const std::string bad[] = {
      "",
      "Ubuntu",                        // uppercase repository
      "user/Img",                      //
      "host:5000/A/b",                 //
      "ubuntu@sha256:abc",             // short digest
      "ubuntu@sha256:" + std::string(64, 'A'),  // uppercase hex
      "ubuntu@md5:" + kHex,            // unknown algorithm
      "ubuntu@sha512:" + std::string(128, 'a'),  // unsupported algorithm
      "ubuntu:",                       // empty tag
      "ubuntu:-x",                     // tag starting with '-'
      "ubuntu:" + std::string(129, 'x'),
      "a//b",                          // empty component
      "a/b/",                          //
      "-a/b",                          //
      "a_/b",                          // separator at the end of a component
      "a...b",                         //
      "host:port/a",                   // non-numeric port
      "docker://",                     //
      "host:5000/",                    // no repository
      "ubu ntu",                       //
      std::string(256, 'a'),           // too long
      std::string(240, 'a'),           // too long as registry-1.docker.io/library/aaa...
  };
  for (const auto& t : bad) {
    auto r = parse_image_ref(t);
    ck_assert_msg(!r.ok(), "'%s' was accepted as '%s'", t.c_str(), r.ok() ? r->str().c_str() : "");
    ck_assert_msg(r.status().message().find("invalid image reference") == 0 ||
                      r.status().message().find("empty") == 0,
                  "%s", r.status().message().c_str());
  }
}
END_TEST

// What str() prints parses back to itself, up to the longest name (found by tests/fuzz: a
// 240-character Docker Hub name was accepted, its canonical form refused as too long).
START_TEST(canonical_form_parses_again) {
  const std::string hub = "registry-1.docker.io/library/";
  for (const std::string& t : {std::string("ubuntu"), std::string(255 - hub.size(), 'a'),
                               "host:5000/" + std::string(245, 'b') + ":t@sha256:" + kHex}) {
    auto r = parse_image_ref(t);
    ck_assert_msg(r.ok(), "%s", r.status().message().c_str());
    auto again = parse_image_ref(r->str());
    ck_assert_msg(again.ok(), "%s", again.status().message().c_str());
    std::string first = r->str(), second = again->str();
    ck_assert_str_eq(second.c_str(), first.c_str());
  }
  ck_assert(!parse_image_ref(std::string(256 - hub.size(), 'a')).ok());
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("image_ref");
  TCase* tc = tcase_create("parse");
  tcase_add_test(tc, docker_hub_short_names);
  tcase_add_test(tc, registries_tags_digests);
  tcase_add_test(tc, site_default_registry);
  tcase_add_test(tc, local_paths);
  tcase_add_test(tc, invalid_references);
  tcase_add_test(tc, daemon_schemes);
  tcase_add_test(tc, registry_mirrors_parse);
  tcase_add_test(tc, canonical_form_parses_again);
  suite_add_tcase(s, tc);
  return s;
}
