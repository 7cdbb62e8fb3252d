// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// A real docker-registry (Debian's distribution 2.8) started by a test on 127.0.0.1 at a free
// port, with helpers that push blobs and manifests through the HTTP API, so import tests run the
// real protocol without any outside network.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

class TestRegistry {
 public:
  // htpasswd_file: enable Basic auth with that file (empty: anonymous). tls_cert/tls_key: serve
  // HTTPS with that certificate (PEM files; empty: plain HTTP). proxy_of: a pull-through cache of
  // that registry URL (http://HOST:PORT) instead of a registry of its own.
  explicit TestRegistry(const std::string& workdir, const std::string& htpasswd_file = "",
                        const std::string& tls_cert = "", const std::string& tls_key = "",
                        const std::string& proxy_of = "");
  ~TestRegistry();
  bool started() const { return pid_ > 0; }
  std::string host() const;  // "127.0.0.1:PORT"
  std::string storage() const { return dir_ + "/storage"; }

  // Push as USER:PASS when the registry has auth.
  void set_push_credentials(const std::string& user, const std::string& pass);
  std::string push_blob(const std::string& repo, const std::string& data);  // returns digest
  // Pushes config + layers as an OCI manifest under TAG; returns the manifest digest.
  std::string push_image(const std::string& repo, const std::string& tag, const std::string& config,
                         const std::vector<std::string>& layers, const std::string& layer_type =
                             "application/vnd.oci.image.layer.v1.tar+gzip");
  std::string push_manifest(const std::string& repo, const std::string& ref,
                            const std::string& body, const std::string& media_type);
  // Count of METHOD requests (GET /v2/.../manifests/, .../blobs/) seen in the registry log.
  int count_requests(const std::string& needle, const std::string& method = "GET") const;

 private:
  std::string request(const std::string& method, const std::string& url, const std::string& body,
                      const std::string& content_type, long* status, std::string* location);
  std::string url(const std::string& path) const { return scheme_ + "://" + host() + path; }
  pid_t pid_ = -1;
  int port_ = 0;
  std::string dir_, user_, pass_, scheme_ = "http";
};

// Free TCP port on 127.0.0.1 (bound and released).
int free_port();
