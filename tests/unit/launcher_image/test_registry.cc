// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// TestRegistry implementation: fork/exec docker-registry with a generated config, wait for
// /v2/ to answer, and push through the registry API with libcurl (see test_registry.h).
#include "test_registry.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "image/digest.h"

namespace {
size_t append(char* p, size_t s, size_t n, void* u) {
  static_cast<std::string*>(u)->append(p, s * n);
  return s * n;
}
size_t header_cb(char* p, size_t s, size_t n, void* u) {
  std::string line(p, s * n);
  if (line.rfind("Location:", 0) == 0 || line.rfind("location:", 0) == 0) {
    auto* loc = static_cast<std::string*>(u);
    *loc = line.substr(9);
    loc->erase(0, loc->find_first_not_of(' '));
    loc->erase(loc->find_last_not_of("\r\n") + 1);
  }
  return s * n;
}
}  // namespace

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

TestRegistry::TestRegistry(const std::string& workdir, const std::string& htpasswd,
                           const std::string& tls_cert, const std::string& tls_key,
                           const std::string& proxy_of) {
  if (access("/usr/bin/docker-registry", X_OK) != 0) return;
  dir_ = workdir;
  port_ = free_port();
  std::ofstream cfg(dir_ + "/config.yml");
  cfg << "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\n"
      << "storage:\n  filesystem:\n    rootdirectory: " << storage() << "\n"
      << "http:\n  addr: 127.0.0.1:" << port_ << "\n";
  if (!tls_cert.empty()) {
    cfg << "  tls:\n    certificate: " << tls_cert << "\n    key: " << tls_key << "\n";
    scheme_ = "https";
  }
  if (!htpasswd.empty()) cfg << "auth:\n  htpasswd:\n    realm: test\n    path: " << htpasswd << "\n";
  if (!proxy_of.empty()) cfg << "proxy:\n  remoteurl: " << proxy_of << "\n";
  cfg.close();
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a failed check exits the test without destructors
    int log = open((dir_ + "/registry.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(log, 1);
    dup2(log, 2);
    execl("/usr/bin/docker-registry", "docker-registry", "serve", (dir_ + "/config.yml").c_str(),
          nullptr);
    _exit(127);
  }
  for (int i = 0; i < 200; ++i) {  // up to 10 s
    long status = 0;
    request("GET", url("/v2/"), "", "", &status, nullptr);
    if (status == 200 || status == 401) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

TestRegistry::~TestRegistry() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
}

std::string TestRegistry::host() const { return "127.0.0.1:" + std::to_string(port_); }

void TestRegistry::set_push_credentials(const std::string& user, const std::string& pass) {
  user_ = user;
  pass_ = pass;
}

std::string TestRegistry::request(const std::string& method, const std::string& url,
                                  const std::string& body, const std::string& content_type,
                                  long* status, std::string* location) {
  CURL* c = curl_easy_init();
  std::string out, loc;
  curl_slist* h = nullptr;
  if (!content_type.empty()) h = curl_slist_append(h, ("Content-Type: " + content_type).c_str());
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &out);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, header_cb);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &loc);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);  // the harness's own pushes; clients verify
  if (!user_.empty()) {
    curl_easy_setopt(c, CURLOPT_USERNAME, user_.c_str());
    curl_easy_setopt(c, CURLOPT_PASSWORD, pass_.c_str());
  }
  if (method == "PUT" || method == "POST") {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  }
  *status = 0;
  if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  if (location) *location = loc;
  return out;
}

std::string TestRegistry::push_blob(const std::string& repo, const std::string& data) {
  std::string digest = slipway::launcher::sha256_digest(data);
  long st = 0;
  std::string loc;
  request("POST", url("/v2/" + repo + "/blobs/uploads/"), "", "", &st, &loc);
  if (st != 202) return "";
  if (loc.rfind("http", 0) != 0) loc = url(loc);
  loc += (loc.find('?') == std::string::npos ? "?" : "&") + std::string("digest=") + digest;
  request("PUT", loc, data, "application/octet-stream", &st, nullptr);
  return st == 201 ? digest : "";
}

std::string TestRegistry::push_manifest(const std::string& repo, const std::string& ref,
                                        const std::string& body, const std::string& media_type) {
  long st = 0;
  request("PUT", url("/v2/" + repo + "/manifests/" + ref), body, media_type, &st,
          nullptr);
  return st == 201 ? slipway::launcher::sha256_digest(body) : "";
}

std::string TestRegistry::push_image(const std::string& repo, const std::string& tag,
                                     const std::string& config,
                                     const std::vector<std::string>& layers,
                                     const std::string& layer_type) {
  std::ostringstream m;
  m << R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",)"
    << R"("config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":")"
    << push_blob(repo, config) << R"(","size":)" << config.size() << R"(},"layers":[)";
  for (size_t i = 0; i < layers.size(); ++i)
    m << (i ? "," : "") << R"({"mediaType":")" << layer_type << R"(","digest":")"
      << push_blob(repo, layers[i]) << R"(","size":)" << layers[i].size() << "}";
  m << "]}";
  return push_manifest(repo, tag, m.str(), "application/vnd.oci.image.manifest.v1+json");
}

int TestRegistry::count_requests(const std::string& needle, const std::string& method) const {
  std::ifstream f(dir_ + "/registry.log");
  std::string line;
  int n = 0;
  while (std::getline(f, line))
    if (line.find("\"" + method + " ") != std::string::npos && line.find(needle) != std::string::npos)
      ++n;
  return n;
}
