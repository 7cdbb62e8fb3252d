// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Registry transport tests: HTTPS with a private CA (a docker-registry TLS config, certificates
// made with openssl) trusted through RegistryOptions.ca_file and refused without it; retries on
// 429 and 5xx against a tiny Python HTTP server on 127.0.0.1 that refuses each path once; slow
// registries, and mirrors that lie or hang, against the same server.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/text.h"
#include "common/unique_fd.h"
#include "image/digest.h"
#include "image/import.h"
#include "image/registry.h"
#include "image_test_util.h"
#include "test_registry.h"
// check.h defines macros (fail) that break later standard headers: include it last.
#include "check_main.h"

using namespace slipway::launcher;

#define ASSERT_CONTAINS(hay, needle)                                                   \
  do {                                                                                 \
    std::string h_ = (hay), n_ = (needle);                                             \
    ck_assert_msg(h_.find(n_) != std::string::npos, "'%s' lacks '%s'", h_.c_str(),     \
                  n_.c_str());                                                         \
  } while (0)

static const char* kConfig = R"({"architecture":"amd64","os":"linux","config":{"Env":["A=1"]}})";

static bool run_quiet(const std::string& cmd) {
  return system((cmd + " >/dev/null 2>&1").c_str()) == 0;
}

// A CA and a certificate for 127.0.0.1 signed by it, in DIR.
static bool make_certs(const std::string& dir) {
  write_text(dir + "/ext.cnf", "subjectAltName=IP:127.0.0.1\n");
  return run_quiet("openssl req -x509 -newkey rsa:2048 -nodes -keyout " + dir + "/ca.key -out " +
                   dir + "/ca.pem -days 2 -subj /CN=slipway-test-ca") &&
         run_quiet("openssl req -newkey rsa:2048 -nodes -keyout " + dir + "/srv.key -out " + dir +
                   "/srv.csr -subj /CN=127.0.0.1") &&
         run_quiet("openssl x509 -req -in " + dir + "/srv.csr -CA " + dir + "/ca.pem -CAkey " +
                   dir + "/ca.key -CAcreateserial -out " + dir + "/srv.pem -days 2 -extfile " +
                   dir + "/ext.cnf");
}

START_TEST(tls_with_private_ca) {
  Sandbox sb;
  std::string dir = sb.base + "-tls";
  mkdir(dir.c_str(), 0700);
  if (!make_certs(dir)) {
    remove_all(dir);
    fprintf(stderr, "SKIP: openssl cannot make test certificates\n");
    return;
  }
  {
    TestRegistry reg(dir, "", dir + "/srv.pem", dir + "/srv.key");
    if (!reg.started()) {
      fprintf(stderr, "SKIP: /usr/bin/docker-registry is not installed\n");
      remove_all(dir);
      return;
    }
    std::string layer = TarBuilder(TarBuilder::Compression::kGzip).file("hello", "tls").finish();
    std::string digest = reg.push_image("tls/img", "v1", kConfig, {layer});
    ck_assert(!digest.empty());
    ImportOptions o;
    o.cache_dir = sb.root + "/cache";
    o.registry.max_retries = 0;
    auto ref = *parse_image_ref(reg.host() + "/tls/img:v1");
    auto refused = import_image(ref, o);
    ck_assert(!refused.ok());
    ck_assert_msg(refused.status().message().rfind("TLS connection to registry " + reg.host() +
                                                   " failed: ", 0) == 0,
                  "%s", refused.status().message().c_str());
    ASSERT_CONTAINS(refused.status().message(), "give that CA as ca_file");
    o.registry.ca_file = dir + "/ca.pem";
    auto img = import_image(ref, o);
    ck_assert_msg(img.ok(), "%s", img.status().message().c_str());
    ck_assert(img->manifest_digest == digest);
    ck_assert(read_text(img->rootfs + "/hello") == "tls");
  }
  remove_all(dir);
  ck_assert(sb.surroundings_intact());
}
END_TEST

// A registry that answers every path 429 (manifests) or 503 (blobs) the first time, with
// Retry-After: 0, and 200 after; paths under /v2/busy/ always get 429. Serves DIR/manifest.json
// and DIR/blobs/<digest>; logs each request path to DIR/requests.log. Under /v2/lying/ and
// /v2/hanging/, DIR/corrupt lists blobs sent with a wrong byte, and DIR/hang is "silent" (no
// request is ever answered) or lists blobs whose answer stops halfway.
static const char* kFlakyServer = R"PY(
import os, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
root = sys.argv[1]
import time
seen, lock = {}, threading.Lock()
class Handler(BaseHTTPRequestHandler):
    def reply(self, code, body=b"", ctype="application/octet-stream"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if code in (429, 503):
            self.send_header("Retry-After", "0")
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        ranged = os.path.join(root, "blobs", self.path.rsplit("/", 1)[1])
        if (self.headers.get("Range") == "bytes=0-0" and os.path.exists(ranged) and
                not os.path.exists(os.path.join(root, "noranges")) and
                not (os.path.exists(os.path.join(root, "hang")) and open(os.path.join(root, "hang")).read() == "silent")):
            # A blob's first byte, as a registry that holds it answers (a mirror's warm-up probe:
            # registry.h mirror_holds_blob); not counted with the requests. "noranges": ignored.
            with open(os.path.join(root, "ranges.log"), "a") as f:
                f.write(self.path + "\n")
            body = open(ranged, "rb").read()
            self.send_response(206)
            self.send_header("Content-Range", "bytes 0-0/%d" % len(body))
            self.send_header("Content-Length", "1")
            self.end_headers()
            return self.wfile.write(body[:1])
        with lock:
            n = seen.get(self.path, 0)
            seen[self.path] = n + 1
            with open(os.path.join(root, "requests.log"), "a") as f:
                f.write(self.path + "\n")
        if self.path == "/v2/":
            return self.reply(200)
        manifest = "/manifests/" in self.path
        slow = self.path.startswith("/v2/slow/")
        lying = self.path.startswith(("/v2/lying/", "/v2/hanging/"))
        if (n == 0 and not slow and not lying) or self.path.startswith("/v2/busy/"):
            return self.reply(429 if manifest else 503)
        hang = os.path.join(root, "hang")  # a mirror that hangs: see hanging_mirror_...
        hang = open(hang).read() if os.path.exists(hang) else ""
        if hang == "silent":
            return time.sleep(3600)  # the request is read, never answered
        if manifest:
            body = open(os.path.join(root, "manifest.json"), "rb").read()
            return self.reply(200, body, "application/vnd.oci.image.manifest.v1+json")
        name = os.path.join(root, "blobs", self.path.rsplit("/", 1)[1])
        if not os.path.exists(name):
            return self.reply(404)
        body = open(name, "rb").read()
        corrupt = os.path.join(root, "corrupt")  # a mirror that lies about the blobs listed there
        if lying and os.path.exists(corrupt) and self.path.rsplit("/", 1)[1] in open(corrupt).read():
            body = body[:-1] + bytes([body[-1] ^ 1])
        if self.path.rsplit("/", 1)[1] in hang:  # headers and half the blob, then nothing
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            return time.sleep(3600)
        if not slow:
            return self.reply(200, body)
        self.send_response(200)  # /v2/slow/: blobs trickle at 256 bytes/s, or DIR/rate
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        rate = os.path.join(root, "rate")
        step = int(open(rate).read()) // 4 if os.path.exists(rate) else 64
        try:
            for i in range(0, len(body), step):
                self.wfile.write(body[i:i + step])
                self.wfile.flush()
                time.sleep(0.25)
        except (BrokenPipeError, ConnectionResetError):
            pass
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(os.path.join(root, "port.tmp"), "w") as f:
    f.write(str(server.server_address[1]))
os.rename(os.path.join(root, "port.tmp"), os.path.join(root, "port"))
server.serve_forever()
)PY";

struct FlakyServer {
  std::string dir;
  pid_t pid = -1;
  int port = 0;
  explicit FlakyServer(const std::string& d) : dir(d) {
    write_text(dir + "/server.py", kFlakyServer);
    pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      execlp("python3", "python3", (dir + "/server.py").c_str(), dir.c_str(), nullptr);
      _exit(127);
    }
    for (int i = 0; i < 200 && !path_exists(dir + "/port"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    if (path_exists(dir + "/port")) port = std::stoi(read_text(dir + "/port"));
  }
  ~FlakyServer() {
    if (pid > 0) kill(pid, SIGTERM), waitpid(pid, nullptr, 0);
  }
  std::string host() const { return "127.0.0.1:" + std::to_string(port); }
  void add_blob(const std::string& data) {
    mkdir((dir + "/blobs").c_str(), 0700);
    write_text(dir + "/blobs/" + sha256_digest(data), data);
  }
  int count(const std::string& needle) const {
    std::istringstream in(read_text(dir + "/requests.log"));
    int n = 0;
    for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
    return n;
  }
};

START_TEST(retries_on_429_and_503) {
  Sandbox sb;
  std::string dir = sb.base + "-flaky";
  mkdir(dir.c_str(), 0700);
  {
    FlakyServer srv(dir);
    ck_assert_msg(srv.port > 0, "the python3 test server did not start");
    std::string l1 = TarBuilder(TarBuilder::Compression::kGzip).file("a", "1").finish();
    std::string l2 = TarBuilder(TarBuilder::Compression::kGzip).file("b", "2").finish();
    for (const auto& b : {std::string(kConfig), l1, l2}) srv.add_blob(b);
    std::string manifest =
        R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",)"
        R"("config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":")" +
        sha256_digest(kConfig) + R"(","size":)" + std::to_string(strlen(kConfig)) +
        R"(},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":")" +
        sha256_digest(l1) + R"(","size":)" + std::to_string(l1.size()) +
        R"(},{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":")" +
        sha256_digest(l2) + R"(","size":)" + std::to_string(l2.size()) + "}]}";
    write_text(dir + "/manifest.json", manifest);
    ImportOptions o;
    o.cache_dir = sb.root + "/cache";
    o.registry.insecure_registries = {srv.host()};
    o.registry.max_retries = 2;
    auto img = import_image(*parse_image_ref(srv.host() + "/flaky/img:v1"), o);
    ck_assert_msg(img.ok(), "%s", img.status().message().c_str());
    ck_assert(img->manifest_digest == sha256_digest(manifest));
    ck_assert(read_text(img->rootfs + "/a") == "1" && read_text(img->rootfs + "/b") == "2");
    ck_assert_int_eq(srv.count("/manifests/v1"), 2);  // 429, then 200
    for (const auto& b : {std::string(kConfig), l1, l2})
      ck_assert_int_eq(srv.count("/blobs/" + sha256_digest(b)), 2);  // 503, then 200
    // A registry that keeps refusing: max_retries + 1 requests, then one clear line.
    o.registry.max_retries = 1;
    auto busy = resolve_digest(*parse_image_ref(srv.host() + "/busy/img:v1"), o.registry);
    ck_assert(!busy.ok());
    std::string want = "registry " + srv.host() + " keeps refusing requests for '" + srv.host() +
                       "/busy/img:v1' as too many (HTTP 429); retry later or use a mirror";
    ck_assert_msg(busy.status().message() == want, "%s", busy.status().message().c_str());
    ck_assert_int_eq(srv.count("/v2/busy/img/manifests/v1"), 2);
  }
  remove_all(dir);
}
END_TEST

// A registry that trickles a blob (256 bytes/s): registry_min_rate= abandons it and the error names
// the registry and the blob; registry_timeout= (the import's deadline) does the same, naming the
// bound. Nothing is published.
START_TEST(slow_registry_times_out_with_the_blob_named) {
  Sandbox sb;
  std::string dir = sb.base + "-slow";
  mkdir(dir.c_str(), 0700);
  {
    FlakyServer srv(dir);
    ck_assert_msg(srv.port > 0, "the python3 test server did not start");
    std::string noise;  // ~10 KB once compressed: 40 s at the server's 256 bytes/s
    while (noise.size() < 20000) noise += random_suffix();
    std::string layer = TarBuilder(TarBuilder::Compression::kGzip).file("big", noise).finish();
    for (const auto& b : {std::string(kConfig), layer}) srv.add_blob(b);
    write_text(dir + "/manifest.json",
               R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",)"
               R"("config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":")" +
                   sha256_digest(kConfig) + R"(","size":)" + std::to_string(strlen(kConfig)) +
                   R"(},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":")" +
                   sha256_digest(layer) + R"(","size":)" + std::to_string(layer.size()) + "}]}");
    for (const char* limit : {"registry_min_rate", "registry_timeout"}) {
      ImportOptions o;
      o.cache_dir = sb.root + "/cache";
      o.registry.insecure_registries = {srv.host()};
      o.registry.max_retries = 0;
      o.registry.min_rate_window_s = 1;
      ck_assert(parse_registry_limit(o.registry, "registry_min_rate",
                                     std::string(limit) == "registry_min_rate" ? "4K" : "0").ok());
      if (std::string(limit) == "registry_timeout")
        ck_assert(parse_registry_limit(o.registry, "registry_timeout", "2").ok());
      auto start = std::chrono::steady_clock::now();
      auto img = import_image(*parse_image_ref(srv.host() + "/slow/img:v1"), o);
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ck_assert(!img.ok());
      if (std::string(limit) == "registry_min_rate") {
        ASSERT_CONTAINS(img.status().message(), "registry " + srv.host() + " sent blob " +
                                                    sha256_digest(layer) + " too slowly (");
        ASSERT_CONTAINS(img.status().message(), "retry later, use a mirror, or change those limits");
      } else {
        ASSERT_CONTAINS(img.status().message(),
                        "registry " + srv.host() + " did not send blob " + sha256_digest(layer) +
                            " of image '" + srv.host() + "/slow/img:v1' before the import's "
                            "deadline (registry_timeout=2, SLIPWAY_REGISTRY_TIMEOUT); retry later, "
                            "use a mirror, or raise registry_timeout");
      }
      ck_assert_msg(secs < 20, "%s took %.1f s", limit, secs);  // the whole blob takes ~40 s
      ck_assert_int_eq(count_entries(o.cache_dir + "/images"), 0);
    }
    RegistryOptions r;
    ck_assert(!parse_registry_limit(r, "registry_timeout", "soon").ok());
    ck_assert(!parse_registry_limit(r, "registry_min_rate", "fast").ok());
    // registry_mirror_timeout=: whole seconds from 1 to 3600 (0 would wait on a hung mirror forever).
    ck_assert_int_eq(r.mirror_silence_s, 10);
    ck_assert(parse_registry_limit(r, "registry_mirror_timeout", "3").ok());
    ck_assert_int_eq(r.mirror_silence_s, 3);
    for (const char* bad : {"0", "3601", "-1", "2s", ""}) {
      Status st = parse_registry_limit(r, "registry_mirror_timeout", bad);
      ck_assert_msg(!st.ok(), "registry_mirror_timeout=%s accepted", bad);
      ASSERT_CONTAINS(st.message(), "registry_mirror_timeout='" + std::string(bad) +
                                        "' is not a number of seconds from 1 to 3600");
    }
    ck_assert_int_eq(r.mirror_silence_s, 3);
  }
  remove_all(dir);
}
END_TEST

// A mirror that sends a corrupt blob (right size, wrong bytes), the config or a layer: that blob
// comes again from the registry itself, one warning says so, the mirror is dropped for the rest of
// the import, and the import succeeds (it used to fail on the digest).
// The manifest of an image of kConfig and one gzip LAYER.
static std::string one_layer_manifest(const std::string& layer) {
  return R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",)"
         R"("config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":")" +
         sha256_digest(kConfig) + R"(","size":)" + std::to_string(strlen(kConfig)) +
         R"(},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":")" +
         sha256_digest(layer) + R"(","size":)" + std::to_string(layer.size()) + "}]}";
}

// SRV serves that image: its config, LAYER and MANIFEST.
static void serve_image(FlakyServer& srv, const std::string& layer, const std::string& manifest) {
  for (const auto& b : {std::string(kConfig), layer}) srv.add_blob(b);
  write_text(srv.dir + "/manifest.json", manifest);
}

// Import options for ORIGIN with MIRROR as its mirror (both plain HTTP), into CACHE, no retries.
static ImportOptions mirrored(const FlakyServer& origin, const FlakyServer& mirror,
                              const std::string& cache) {
  ImportOptions o;
  o.cache_dir = cache;
  o.registry.insecure_registries = {origin.host(), mirror.host()};
  o.registry.mirrors = {{origin.host(), mirror.host()}};
  o.registry.max_retries = 0;
  return o;
}

START_TEST(lying_mirror_falls_back_to_the_registry) {
  Sandbox sb;
  std::string layer = TarBuilder(TarBuilder::Compression::kGzip).file("a", "from the registry").finish();
  const std::string manifest = one_layer_manifest(layer);
  for (const std::string& lie : {sha256_digest(layer), sha256_digest(kConfig)}) {
    std::string origin_dir = sb.base + "-origin", mirror_dir = sb.base + "-mirror";
    mkdir(origin_dir.c_str(), 0700);
    mkdir(mirror_dir.c_str(), 0700);
    {
      FlakyServer origin(origin_dir), mirror(mirror_dir);
      ck_assert_msg(origin.port > 0 && mirror.port > 0, "the python3 test servers did not start");
      write_text(mirror_dir + "/corrupt", lie);
      for (FlakyServer* srv : {&origin, &mirror}) serve_image(*srv, layer, manifest);
      ImportOptions o = mirrored(origin, mirror, sb.root + "/cache-" + lie.substr(7, 8));
      std::vector<std::string> warnings;
      o.registry.warn = [&](const std::string& line) { warnings.push_back(line); };
      auto img = import_image(*parse_image_ref(origin.host() + "/lying/img:v1"), o);
      ck_assert_msg(img.ok(), "%s", img.status().message().c_str());
      ck_assert(read_text(img->rootfs + "/a") == "from the registry");
      ck_assert_int_eq(mirror.count("/blobs/" + lie), 1);
      ck_assert_int_eq(origin.count("/blobs/" + lie), 1);
      ck_assert_int_eq(static_cast<int>(warnings.size()), 1);
      ASSERT_CONTAINS(warnings[0], "warning: registry mirror " + mirror.host() + " sent a corrupt blob " +
                                       lie + " for '" + origin.host() + "/lying/img:v1'; using " +
                                       origin.host() + " itself");
    }
    remove_all(origin_dir);
    remove_all(mirror_dir);
  }
}
END_TEST

// A cold pull-through docker-registry fetches a blob from the registry once per client that asks
// before it holds it (it does not merge them): warm_mirror() has it fetch each blob once, before
// the job's nodes ask; a warm mirror answers the one-byte probe (206) and sends nothing more, and
// an import through it then costs the registry no blob at all.
START_TEST(warming_a_cold_mirror_fetches_each_blob_once) {
  Sandbox sb;
  const std::string odir = sb.base + "-origin", mdir = sb.base + "-proxy";
  mkdir(odir.c_str(), 0700);
  mkdir(mdir.c_str(), 0700);
  {
    TestRegistry origin(odir);
    ck_assert_msg(origin.started(), "docker-registry did not start");
    std::string layer = TarBuilder(TarBuilder::Compression::kGzip).file("a", std::string(300000, 'w')).finish();
    origin.push_image("warm/img", "v1", kConfig, {layer});
    const int pushed = origin.count_requests("/blobs/");
    TestRegistry mirror(mdir, "", "", "", "http://" + origin.host());
    ck_assert_msg(mirror.started(), "the proxy docker-registry did not start");
    RegistryOptions o;
    o.insecure_registries = {origin.host(), mirror.host()};
    o.mirrors = {{origin.host(), mirror.host()}};
    o.max_retries = 0;
    std::vector<std::string> warnings;
    o.warn = [&](const std::string& line) { warnings.push_back(line); };
    const auto ref = *parse_image_ref(origin.host() + "/warm/img:v1");
    RegistryClient client(ref, o);
    auto m = client.fetch_platform_manifest();
    ck_assert_msg(m.ok(), "%s", m.ok() ? "" : m.status().message().c_str());
    auto cold = warm_mirror(client, m->body);
    ck_assert_msg(cold.ok(), "%s", cold.ok() ? "" : cold.status().message().c_str());
    ck_assert_int_eq(cold->blobs, 2);
    ck_assert_int_eq(cold->fetched, 2);
    ck_assert_uint_eq(cold->bytes, strlen(kConfig) + layer.size());
    ck_assert(cold->stored);
    const int after_warmup = origin.count_requests("/blobs/");
    ck_assert_int_ge(after_warmup - pushed, 2);  // each blob fetched by the mirror
    auto warm = warm_mirror(client, m->body);
    ck_assert(warm.ok());
    ck_assert_int_eq(warm->fetched, 0);
    ck_assert(warm->stored);
    // Four nodes' imports through the warmed mirror: not one blob request reaches the registry.
    for (int node = 0; node < 4; ++node) {
      ImportOptions io;
      io.cache_dir = sb.root + "/cache-" + std::to_string(node);
      io.registry = o;
      auto img = import_image(ref, io);
      ck_assert_msg(img.ok(), "%s", img.ok() ? "" : img.status().message().c_str());
    }
    ck_assert_int_eq(origin.count_requests("/blobs/"), after_warmup);
    ck_assert_int_eq(static_cast<int>(warnings.size()), 0);
  }
  remove_all(odir);
  remove_all(mdir);
}
END_TEST

// A mirror that answers every range with the whole blob (it ignores ranges, or stores nothing):
// the warm-up gives up waiting within seconds, without a warning, and the job goes on.
START_TEST(warming_a_mirror_that_never_stores_gives_up_within_seconds) {
  Sandbox sb;
  std::string layer = TarBuilder(TarBuilder::Compression::kGzip).file("a", "x").finish();
  const std::string manifest = one_layer_manifest(layer);
  const std::string origin_dir = sb.base + "-origin", mirror_dir = sb.base + "-mirror";
  mkdir(origin_dir.c_str(), 0700);
  mkdir(mirror_dir.c_str(), 0700);
  {
    FlakyServer origin(origin_dir), mirror(mirror_dir);
    ck_assert_msg(origin.port > 0 && mirror.port > 0, "the python3 test servers did not start");
    for (FlakyServer* srv : {&origin, &mirror}) serve_image(*srv, layer, manifest);
    write_text(mirror_dir + "/noranges", "");
    ImportOptions o = mirrored(origin, mirror, sb.root + "/cache");
    std::vector<std::string> warnings;
    o.registry.warn = [&](const std::string& line) { warnings.push_back(line); };
    RegistryClient client(*parse_image_ref(origin.host() + "/lying/img:v1"), o.registry);
    const auto start = std::chrono::steady_clock::now();
    auto w = warm_mirror(client, manifest);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ck_assert_msg(w.ok(), "%s", w.ok() ? "" : w.status().message().c_str());
    ck_assert_int_eq(w->fetched, 2);
    ck_assert(!w->stored);
    ck_assert_msg(secs < 8, "the warm-up waited %.1f s", secs);
    ck_assert_int_eq(static_cast<int>(warnings.size()), 0);
  }
  remove_all(origin_dir);
  remove_all(mirror_dir);
}
END_TEST

// A mirror that hangs, in the two ways seen in the field: it never answers (it reads the request:
// a pull-through cache whose upstream hangs), or it sends a layer's headers and half its bytes,
// then nothing. Either is dropped once it has sent nothing for mirror_silence_s, with one warning,
// and the registry serves the image; even with registry_min_rate=0, where nothing else would end
// the wait (it used to hang there, and take 30 s with the default rate).
START_TEST(hanging_mirror_falls_back_to_the_registry) {
  Sandbox sb;
  std::string layer = TarBuilder(TarBuilder::Compression::kGzip).file("a", "from the registry").finish();
  const std::string manifest = one_layer_manifest(layer);
  int round = 0;
  for (const std::string& hang : {std::string("silent"), sha256_digest(layer)}) {
    std::string origin_dir = sb.base + "-origin", mirror_dir = sb.base + "-mirror";
    mkdir(origin_dir.c_str(), 0700);
    mkdir(mirror_dir.c_str(), 0700);
    {
      FlakyServer origin(origin_dir), mirror(mirror_dir);
      ck_assert_msg(origin.port > 0 && mirror.port > 0, "the python3 test servers did not start");
      write_text(mirror_dir + "/hang", hang);
      for (FlakyServer* srv : {&origin, &mirror}) serve_image(*srv, layer, manifest);
      ImportOptions o = mirrored(origin, mirror, sb.root + "/cache-" + std::to_string(round++));
      o.registry.min_rate_bytes = 0;
      o.registry.mirror_silence_s = 2;
      std::vector<std::string> warnings;
      o.registry.warn = [&](const std::string& line) { warnings.push_back(line); };
      auto start = std::chrono::steady_clock::now();
      auto img = import_image(*parse_image_ref(origin.host() + "/hanging/img:v1"), o);
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ck_assert_msg(img.ok(), "%s", img.status().message().c_str());
      ck_assert(read_text(img->rootfs + "/a") == "from the registry");
      ck_assert_msg(secs >= 1.9 && secs < 6, "%s: the fall-back took %.1f s", hang.c_str(), secs);
      ck_assert_int_eq(static_cast<int>(warnings.size()), 1);
      ASSERT_CONTAINS(warnings[0], "warning: registry mirror " + mirror.host() + " failed for '" +
                                       origin.host() + "/hanging/img:v1' (nothing received for 2 s); "
                                       "using " + origin.host() + " itself");
      ck_assert_int_eq(mirror.count("/blobs/" + sha256_digest(layer)), hang == "silent" ? 0 : 1);
      ck_assert_int_eq(origin.count("/blobs/" + sha256_digest(layer)), 1);
      ck_assert_int_eq(count_entries(o.cache_dir + "/tmp"), 0);
    }
    remove_all(origin_dir);
    remove_all(mirror_dir);
  }
}
END_TEST

// What is downloaded is bounded, not only what is unpacked: a manifest declaring more blobs than
// max_image_size, or more than the cache's free space less min_free_space, is refused before any
// blob is asked for; a registry sending more than a blob's declared size is cut there; a download
// that would eat into min_free_space stops with the blob and the image named.
START_TEST(declared_sizes_bound_the_download) {
  Sandbox sb;
  std::string dir = sb.base + "-declared";
  mkdir(dir.c_str(), 0700);
  {
    FlakyServer srv(dir);
    ck_assert_msg(srv.port > 0, "the python3 test server did not start");
    std::string layer = TarBuilder(TarBuilder::Compression::kGzip).file("a", random_suffix()).finish();
    const std::string digest = sha256_digest(layer);
    auto with_size = [&](uint64_t size) {
      std::string m = one_layer_manifest(layer);
      const std::string real = R"(","size":)" + std::to_string(layer.size()) + "}]}";
      return m.replace(m.find(real), real.size(), R"(","size":)" + std::to_string(size) + "}]}");
    };
    ImportOptions o;
    o.cache_dir = sb.root + "/cache";
    o.registry.insecure_registries = {srv.host()};
    o.registry.max_retries = 2;
    const ImageRef ref = *parse_image_ref(srv.host() + "/flaky/img:v1");
    // Declared 20 GiB with max_image_size=1G: refused, the layer never asked for.
    serve_image(srv, layer, with_size(20ull << 30));
    ck_assert(parse_import_bound(o.bounds, "max_image_size", "1G").ok());
    auto img = import_image(ref, o);
    ck_assert(!img.ok());
    ASSERT_CONTAINS(img.status().message(), "image '" + srv.host() + "/flaky/img:v1' declares 20.0 GiB of "
                    "blobs, more than it may unpack to (max_image_size=1.0 GiB, SLIPWAY_MAX_IMAGE_SIZE)");
    ck_assert_int_eq(srv.count("/blobs/" + digest), 0);
    // Declared within max_image_size, but more than the disk can give less min_free_space.
    struct statvfs vfs;
    ck_assert_int_eq(statvfs(sb.root.c_str(), &vfs), 0);
    const uint64_t avail = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    o.bounds.max_image_bytes = 1ull << 50;
    serve_image(srv, layer, with_size(avail));
    img = import_image(ref, o);
    ck_assert(!img.ok());
    ck_assert_int_eq(img.status().error_number(), ENOSPC);
    ASSERT_CONTAINS(img.status().message(), "' needs " + human_bytes(avail) + " of downloads, but " +
                    o.cache_dir + " has ");
    ASSERT_CONTAINS(img.status().message(), "free and must keep min_free_space=1.0 GiB, SLIPWAY_MIN_FREE_SPACE");
    ck_assert_int_eq(srv.count("/blobs/" + digest), 0);
    // Declared 10 bytes short: the registry's extra bytes are refused, nothing is kept.
    serve_image(srv, layer, with_size(layer.size() - 10));
    img = import_image(ref, o);
    ck_assert(!img.ok());
    ASSERT_CONTAINS(img.status().message(), "blob " + digest + " of image '" + ref.str() +
                    "' is larger than the " + std::to_string(layer.size() - 10) + " bytes its manifest declares");
    ck_assert(!path_exists(o.cache_dir + "/blobs/sha256/" + digest.substr(7)));
    ck_assert_int_eq(count_entries(o.cache_dir + "/images"), 0);
    // A download that would leave less than min_free_space: stopped at its first bytes.
    RegistryClient client(ref, o.registry);
    Descriptor d{"application/vnd.oci.image.layer.v1.tar+gzip", digest, layer.size()};
    UniqueFd fd(open(sb.root.c_str(), O_TMPFILE | O_RDWR, 0600));
    ck_assert(fd.valid());
    Status st = client.fetch_blob(d, fd.get(), avail + (1ull << 40));
    ck_assert_int_eq(st.error_number(), ENOSPC);
    ASSERT_CONTAINS(st.message(), " free while blob " + digest + " of image '" + ref.str() +
                    "' downloads, below the ");
    // With room left the same call succeeds.
    st = client.fetch_blob(d, fd.get(), 1 << 20);
    ck_assert_msg(st.ok(), "%s", st.message().c_str());
  }
  remove_all(dir);
}
END_TEST

// The default registry_min_rate (64K a second) fails a registry trickling 4 KiB/s within its
// window, while one sending 160 KiB/s (slow, but honest) still serves the image. The window is
// scaled to 2 s here (30 s by default).
START_TEST(default_min_rate_fails_a_trickle_not_a_slow_mirror) {
  Sandbox sb;
  std::string dir = sb.base + "-rate";
  mkdir(dir.c_str(), 0700);
  {
    FlakyServer srv(dir);
    ck_assert_msg(srv.port > 0, "the python3 test server did not start");
    std::string noise(640u << 10, '\0');  // 640 KiB that gzip cannot shrink
    std::mt19937 rng(42);
    for (char& c : noise) c = static_cast<char>(rng());
    std::string layer = TarBuilder(TarBuilder::Compression::kGzip).file("big", noise).finish();
    serve_image(srv, layer, one_layer_manifest(layer));
    for (int rate : {4 << 10, 160 << 10}) {
      write_text(dir + "/rate", std::to_string(rate));
      ImportOptions o;
      o.cache_dir = sb.root + "/cache-" + std::to_string(rate);
      o.registry.insecure_registries = {srv.host()};
      o.registry.max_retries = 0;
      o.registry.min_rate_window_s = 2;
      auto start = std::chrono::steady_clock::now();
      auto img = import_image(*parse_image_ref(srv.host() + "/slow/img:v1"), o);
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (rate == (4 << 10)) {
        ck_assert(!img.ok());
        ASSERT_CONTAINS(img.status().message(), "registry " + srv.host() + " sent blob " +
                                                    sha256_digest(layer) + " too slowly (");
        ck_assert_msg(secs < 10, "the trickle took %.1f s to fail", secs);  // the whole: 160 s
      } else {
        ck_assert_msg(img.ok(), "%s", img.status().message().c_str());
        ck_assert(read_text(img->rootfs + "/big") == noise);
      }
    }
  }
  remove_all(dir);
}
END_TEST

// The default deadline (registry_timeout=auto): a registry sending faster than registry_min_rate
// in every window still fails in bounded time. Scaled here: 1 s of slack for 60, a 3 s cap for
// an hour, a 256 KiB layer served at 16 KiB/s (16 s in full). With registry_min_rate=4K the
// layer's time at the minimum rate (65 s) is past the cap: cut at 3 s. With the default 64K and a
// window so long that it never trips (a registry that sends a burst each window, averaging less),
// the deadline is the declared size at the minimum rate, 1 + 5 s. A slow but honest registry
// (96 KiB/s, above the minimum rate) finishes well within that same deadline.
START_TEST(default_deadline_bounds_a_trickle_above_the_min_rate) {
  RegistryOptions defaults;
  ck_assert_int_eq(import_deadline_s(defaults, 20'000'000'000ull), 3600);  // 20 GB at 65 KiB/s: days
  ck_assert_int_eq(import_deadline_s(defaults, 10'000'000), 60 + 153);
  RegistryOptions none;
  ck_assert(parse_registry_limit(none, "registry_timeout", "0").ok());
  ck_assert_int_eq(import_deadline_s(none, 20'000'000'000ull), 0);
  ck_assert(parse_registry_limit(none, "registry_timeout", "auto").ok());
  ck_assert_int_eq(import_deadline_s(none, 20'000'000'000ull), 3600);
  Sandbox sb;
  std::string dir = sb.base + "-deadline";
  mkdir(dir.c_str(), 0700);
  {
    FlakyServer srv(dir);
    ck_assert_msg(srv.port > 0, "the python3 test server did not start");
    std::string noise(256u << 10, '\0');  // gzip cannot shrink it
    std::mt19937 rng(7);
    for (char& c : noise) c = static_cast<char>(rng());
    std::string layer = TarBuilder(TarBuilder::Compression::kGzip).file("big", noise).finish();
    serve_image(srv, layer, one_layer_manifest(layer));
    struct Case { const char* name; int rate; const char* min_rate; long window_s, cap_s; long want_s; };
    for (const Case& c : {Case{"cap", 16 << 10, "4K", 2, 3, 3}, Case{"size", 16 << 10, "64K", 600, 3600, 6},
                          Case{"honest", 96 << 10, "64K", 2, 3600, 0}}) {
      write_text(dir + "/rate", std::to_string(c.rate));
      ImportOptions o;
      o.cache_dir = sb.root + "/cache-" + c.name;
      o.registry.insecure_registries = {srv.host()};
      o.registry.min_rate_window_s = c.window_s;
      o.registry.auto_timeout_slack_s = 1;
      o.registry.auto_timeout_cap_s = c.cap_s;
      ck_assert(parse_registry_limit(o.registry, "registry_min_rate", c.min_rate).ok());
      auto start = std::chrono::steady_clock::now();
      auto img = import_image(*parse_image_ref(srv.host() + "/slow/img:v1"), o);
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (c.want_s == 0) {
        ck_assert_msg(img.ok(), "%s", img.status().message().c_str());
        ck_assert(read_text(img->rootfs + "/big") == noise);
        continue;
      }
      ck_assert_msg(!img.ok(), "%s: the trickle was served in full (%.1f s)", c.name, secs);
      ck_assert_int_eq(img.status().error_number(), ETIMEDOUT);
      ASSERT_CONTAINS(img.status().message(),
                      "registry " + srv.host() + " did not send blob " + sha256_digest(layer) +
                          " of image '" + srv.host() + "/slow/img:v1' before the import's deadline "
                          "(registry_timeout=auto: " + std::to_string(c.want_s) + " s for ");
      ASSERT_CONTAINS(img.status().message(), "; retry later, use a mirror, or raise registry_timeout");
      ck_assert_msg(secs >= static_cast<double>(c.want_s) - 0.5 && secs < static_cast<double>(c.want_s) + 4,
                    "%s: failed after %.1f s", c.name, secs);
      ck_assert_int_eq(count_entries(o.cache_dir + "/images"), 0);
      ck_assert_int_eq(count_entries(o.cache_dir + "/tmp"), 0);
    }
  }
  remove_all(dir);
}
END_TEST

// An import waiting for another import of the same image on the node (the image's lock) waits
// only until its own deadline (registry_timeout=, else auto: here 1 s of slack + 1 s for the small
// image), then fails in one line naming the image and the lock's holder, having asked the
// registry nothing and made nothing. Once the holder is gone the same import succeeds.
START_TEST(image_lock_waiters_have_a_deadline) {
  Sandbox sb;
  std::string dir = sb.base + "-imagelock";
  mkdir(dir.c_str(), 0700);
  {
    FlakyServer srv(dir);
    ck_assert_msg(srv.port > 0, "the python3 test server did not start");
    std::string layer = TarBuilder(TarBuilder::Compression::kGzip).file("a", "waited").finish();
    const std::string manifest = one_layer_manifest(layer);
    serve_image(srv, layer, manifest);
    ImportOptions o;
    o.cache_dir = sb.root + "/cache";
    o.registry.insecure_registries = {srv.host()};
    o.registry.auto_timeout_slack_s = 1;
    o.manifest = manifest;  // handed off by srun: no request before the lock
    ImageRef ref = *parse_image_ref(srv.host() + "/wait/img:v1");
    ref.digest = sha256_digest(manifest);
    NodeCache cache(o.cache_dir);
    ck_assert(cache.ensure_layout().ok());
    int ready[2];
    ck_assert_int_eq(pipe(ready), 0);
    pid_t holder = fork();
    if (holder == 0) {  // the other import: holds the image's lock until killed
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      auto lock = FileLock::acquire(cache.lock_path(digest_hex(ref.digest)), FileLock::Mode::kExclusive);
      (void)!write(ready[1], lock.ok() ? "y" : "n", 1);
      for (;;) pause();
    }
    char got = 0;
    ck_assert_int_eq(read(ready[0], &got, 1), 1);
    ck_assert(got == 'y');
    for (const char* timeout : {"auto", "1"}) {
      ck_assert(parse_registry_limit(o.registry, "registry_timeout", timeout).ok());
      auto start = std::chrono::steady_clock::now();
      auto img = import_image(ref, o);
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ck_assert(!img.ok());
      ck_assert_int_eq(img.status().error_number(), ETIMEDOUT);
      const std::string bound = std::string(timeout) == "1"
                                    ? "(registry_timeout=1, SLIPWAY_REGISTRY_TIMEOUT)"
                                    : "(registry_timeout=auto: 2 s for ";
      ASSERT_CONTAINS(img.status().message(),
                      "waiting for image '" + srv.host() + "/wait/img:v1', which pid " +
                          std::to_string(holder) + " (");
      ASSERT_CONTAINS(img.status().message(), " is importing on this node " + bound);
      ASSERT_CONTAINS(img.status().message(), "; retry when that import ends, or end it");
      ck_assert_msg(img.status().message().find('\n') == std::string::npos, "%s",
                    img.status().message().c_str());
      const double want = std::string(timeout) == "1" ? 1 : 2;
      ck_assert_msg(secs >= want - 0.1 && secs < want + 2, "%s: waited %.1f s", timeout, secs);
      ck_assert_int_eq(srv.count("/v2/wait/"), 0);
      for (const char* sub : {"/images", "/blobs/sha256", "/tmp"})
        ck_assert_msg(count_entries(o.cache_dir + sub) == 0, "%s: %d", sub, count_entries(o.cache_dir + sub));
    }
    kill(holder, SIGKILL);
    waitpid(holder, nullptr, 0);
    auto img = import_image(ref, o);
    ck_assert_msg(img.ok(), "%s", img.status().message().c_str());
    ck_assert(read_text(img->rootfs + "/a") == "waited");
  }
  remove_all(dir);
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("transport");
  TCase* tc = tcase_create("transport");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, tls_with_private_ca);
  tcase_add_test(tc, retries_on_429_and_503);
  tcase_add_test(tc, slow_registry_times_out_with_the_blob_named);
  tcase_add_test(tc, declared_sizes_bound_the_download);
  tcase_add_test(tc, default_min_rate_fails_a_trickle_not_a_slow_mirror);
  tcase_add_test(tc, default_deadline_bounds_a_trickle_above_the_min_rate);
  tcase_add_test(tc, image_lock_waiters_have_a_deadline);
  tcase_add_test(tc, lying_mirror_falls_back_to_the_registry);
  tcase_add_test(tc, hanging_mirror_falls_back_to_the_registry);
  tcase_add_test(tc, warming_a_cold_mirror_fetches_each_blob_once);
  tcase_add_test(tc, warming_a_mirror_that_never_stores_gives_up_within_seconds);
  suite_add_tcase(s, tc);
  return s;
}
