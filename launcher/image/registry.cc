// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// RegistryClient (see registry.h): the request loop with auth and retries, manifest and blob
// fetches. Protocol: https://distribution.github.io/distribution/spec/api/ and the token spec
// (https://distribution.github.io/distribution/spec/auth/token/).
#include "image/registry.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "image/cache.h"
#include "image/digest.h"
#include "image/http.h"
#include "image/layer.h"
#include "common/text.h"
#include "image/registry_auth.h"

namespace slipway::launcher {
namespace {

constexpr uint64_t kMaxManifestBytes = 4 << 20;
constexpr uint64_t kMaxConfigBytes = 8 << 20;
constexpr const char* kDefaultCredentialsHint = "~/.config/slipway/credentials";

bool is_retryable_status(long s) { return s == 429 || s == 408 || s >= 500; }

// 0.5 s, 1 s, 2 s, 4 s, ... capped at 8 s, plus up to 25% jitter so nodes do not retry in step;
// a Retry-After in seconds (capped at 30 s) wins.
std::chrono::milliseconds backoff(int attempt, const std::string& retry_after) {
  long ms = std::min(500L << std::min(attempt, 4), 8000L);
  if (!retry_after.empty() && std::all_of(retry_after.begin(), retry_after.end(), ::isdigit))
    ms = std::min(std::stol(retry_after.substr(0, 6)) * 1000, 30000L);
  thread_local std::minstd_rand rng(static_cast<unsigned>(::getpid()) ^
                                    static_cast<unsigned>(std::random_device{}()));
  ms += static_cast<long>(rng() % static_cast<unsigned long>(ms / 4 + 1));
  return std::chrono::milliseconds(ms);
}

Status write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return Status::from_errno("write blob", errno);
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status();
}

}  // namespace

struct RegistryClient::Sink {
  BodySink body;
  std::function<Status()> restart;
};

RegistryClient::RegistryClient(ImageRef ref, RegistryOptions opts)
    : ref_(std::move(ref)), opts_(std::move(opts)) {
  HttpOptions h;
  h.ca_file = opts_.ca_file;
  h.connect_timeout_s = opts_.connect_timeout_s;
  h.min_rate_bytes = opts_.min_rate_bytes;
  h.low_speed_time_s = opts_.min_rate_window_s;
  http_ = std::make_unique<HttpClient>(std::move(h));
  // Until the import knows the image's declared size: registry_timeout= when set, else the cap.
  if (const long secs = import_deadline_s(opts_, ~uint64_t{0}); secs > 0)
    set_deadline(std::chrono::steady_clock::now() + std::chrono::seconds(secs),
                 import_deadline_text(opts_, ~uint64_t{0}));
}

void RegistryClient::set_deadline(std::chrono::steady_clock::time_point deadline, std::string bound) {
  deadline_ = deadline;
  deadline_bound_ = std::move(bound);
}

long RegistryClient::remaining_ms() const {
  if (deadline_ == std::chrono::steady_clock::time_point::max()) return -1;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline_ - std::chrono::steady_clock::now()).count();
  return left > 0 ? static_cast<long>(left) : 0;
}

// PATH (a blob, a manifest) could not come before the import's deadline.
Status RegistryClient::deadline_passed(const std::string& path) const {
  const std::string what = path.rfind("/blobs/", 0) == 0 ? "blob " + path.substr(7)
                                                         : "the manifest of '" + ref_.str() + "'";
  return Status::error("registry " + ref_.registry + " did not send " + what + " of image '" +
                           ref_.str() + "' before the import's deadline (" + deadline_bound_ +
                           "); retry later, use a mirror, or raise registry_timeout",
                       ETIMEDOUT);
}

long import_deadline_s(const RegistryOptions& opts, uint64_t declared_bytes) {
  if (opts.timeout_s != RegistryOptions::kAutoTimeout) return std::max(0L, opts.timeout_s);
  const long cap = opts.auto_timeout_cap_s;
  if (opts.min_rate_bytes <= 0) return cap;
  const uint64_t at_min_rate = declared_bytes / static_cast<uint64_t>(opts.min_rate_bytes) + 1;
  if (at_min_rate >= static_cast<uint64_t>(cap)) return cap;
  return std::min(cap, opts.auto_timeout_slack_s + static_cast<long>(at_min_rate));
}

std::string import_deadline_text(const RegistryOptions& opts, uint64_t declared_bytes) {
  const long secs = import_deadline_s(opts, declared_bytes);
  if (opts.timeout_s != RegistryOptions::kAutoTimeout)
    return bound_text("registry_timeout", std::to_string(secs));
  std::string why = std::to_string(secs) + " s";
  if (declared_bytes != ~uint64_t{0}) why += " for " + human_bytes(declared_bytes) + " declared";
  if (secs == opts.auto_timeout_cap_s) why += ", the most auto allows";
  return bound_text("registry_timeout", "auto: " + why);
}

RegistryClient::~RegistryClient() = default;

void RegistryClient::share_auth_from(const RegistryClient& o) {
  mirror_failed_ = o.mirror_failed_;
  auth_header_ = o.auth_header_;
  use_basic_ = o.use_basic_;
  creds_loaded_ = o.creds_loaded_;
  creds_user_ = o.creds_user_;
  creds_password_ = o.creds_password_;
  creds_status_ = o.creds_status_;
  deadline_ = o.deadline_;
  deadline_bound_ = o.deadline_bound_;
}

Status parse_registry_limit(RegistryOptions& opts, std::string_view key, std::string_view value) {
  const std::string v(value);
  auto bad = [&](const char* what) {
    return Status::error(std::string(key) + "='" + v + "' is not " + what, EINVAL);
  };
  if (key == "registry_min_rate") {
    auto bytes = parse_size(value);
    if (!bytes.ok() || *bytes > (uint64_t{1} << 40)) return bad("a rate in bytes per second (like 1M or 64K; 0: none)");
    opts.min_rate_bytes = static_cast<long>(*bytes);
    return Status();
  }
  if (key == "registry_timeout") {
    if (v == "auto") {
      opts.timeout_s = RegistryOptions::kAutoTimeout;
      return Status();
    }
    char* end = nullptr;
    long secs = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || secs < 0 || secs > 7 * 86400)
      return bad("a number of seconds (0: none) or auto");
    opts.timeout_s = secs;
    return Status();
  }
  if (key == "registry_mirror_timeout") {
    char* end = nullptr;
    long secs = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || secs < 1 || secs > 3600) return bad("a number of seconds from 1 to 3600");
    opts.mirror_silence_s = secs;
    return Status();
  }
  return Status::error("unknown registry limit '" + std::string(key) + "'", EINVAL);
}

Result<std::map<std::string, std::string>> parse_registry_mirrors(std::string_view text) {
  std::map<std::string, std::string> out;
  auto is_host = [](std::string_view h) {
    return !h.empty() && h.find_first_of("/@ \t") == std::string_view::npos && h.find("://") == h.npos;
  };
  size_t i = 0;
  while (i <= text.size() && !text.empty()) {
    size_t j = text.find(',', i);
    if (j == std::string_view::npos) j = text.size();
    const std::string_view entry = text.substr(i, j - i);
    const size_t eq = entry.find('=');
    std::string registry(entry.substr(0, eq == entry.npos ? 0 : eq));
    const std::string_view mirror = eq == entry.npos ? "" : entry.substr(eq + 1);
    if (!is_host(registry) || !is_host(mirror))
      return Status::error("registry mirror '" + std::string(entry) + "' is malformed; use "
                           "REGISTRY=MIRROR with host[:port] on each side, e.g. "
                           "docker.io=mirror.example.org:5000",
                           EINVAL);
    if (registry == "docker.io" || registry == "index.docker.io") registry = kDockerHubRegistry;
    out[registry] = std::string(mirror);
    i = j + 1;
  }
  return out;
}

std::string RegistryClient::mirror_url(const std::string& mirror) const {
  const auto& insecure = opts_.insecure_registries;
  bool http = std::find(insecure.begin(), insecure.end(), mirror) != insecure.end();
  return (http ? "http://" : "https://") + mirror + "/v2/" + ref_.repository;
}

// One try at the mirror (its own retries would only delay the fall-back), never with the
// registry's credentials: a pull-through cache authenticates upstream itself. A mirror that hangs
// is cut after mirror_silence_s without a byte.
std::optional<Result<HttpResponse>> RegistryClient::get_from_mirror(
    const std::string& path, const std::vector<std::string>& headers, Sink* sink, bool head) {
  auto m = opts_.mirrors.find(ref_.registry);
  if (m == opts_.mirrors.end() || mirror_failed_->load()) return std::nullopt;
  HttpRequest req{mirror_url(m->second) + path, headers, {}, {}};
  req.head = head;
  req.silence_timeout_s = opts_.mirror_silence_s;
  req.timeout_ms = remaining_ms();
  if (req.timeout_ms == 0) return Result<HttpResponse>(deadline_passed(path));
  if (sink && sink->restart) SLIPWAY_TRY(sink->restart());
  TransportError kind;
  auto resp = http_->perform(req, sink ? &sink->body : nullptr, &kind);
  if (!resp.ok() && kind == TransportError::kNone) return resp;  // the sink failed, not the mirror
  if (resp.ok() && resp->status >= 200 && resp->status < 300) return resp;
  const std::string why =
      resp.ok() ? "HTTP " + std::to_string(resp->status) : resp.status().message();
  if (!mirror_failed_->exchange(true) && opts_.warn)
    opts_.warn("warning: registry mirror " + m->second + " failed for '" + ref_.str() + "' (" +
               why + "); using " + ref_.registry + " itself");
  return std::nullopt;
}

std::string RegistryClient::base_url() const {
  const auto& insecure = opts_.insecure_registries;
  bool http = std::find(insecure.begin(), insecure.end(), ref_.registry) != insecure.end();
  return (http ? "http://" : "https://") + ref_.registry + "/v2/" + ref_.repository;
}

Status RegistryClient::transport_error(const Status& why, TransportError kind,
                                       const std::string& path) const {
  if (kind == TransportError::kTimeout) {
    // PATH is "/blobs/sha256:..." or "/manifests/TAG": name what was slow as the user knows it.
    const std::string what = path.rfind("/blobs/", 0) == 0 ? "blob " + path.substr(7)
                                                           : "the manifest of '" + ref_.str() + "'";
    return Status::error("registry " + ref_.registry + " sent " + what + " too slowly (" +
                             why.message() + "; registry_min_rate=" + std::to_string(opts_.min_rate_bytes) +
                             " bytes/s over " + std::to_string(opts_.min_rate_window_s) +
                             " s, " + (deadline_bound_.empty() ? "registry_timeout=0" : deadline_bound_) +
                             "); retry later, use a mirror, or change those limits",
                         ETIMEDOUT);
  }
  if (kind == TransportError::kTls)
    return Status::error("TLS connection to registry " + ref_.registry + " failed: " +
                             why.message() + "; if the registry's certificate comes from a "
                             "private CA, give that CA as ca_file (plugstack.conf) or "
                             "SLIPWAY_CA_FILE",
                         EPROTO);
  // Docker Hub is where a name without a registry goes: the fix may be the site's own registry.
  const bool hub = ref_.registry == kDockerHubRegistry;
  return Status::error("cannot reach registry " + ref_.registry + ": " + why.message() +
                           (hub ? "; check the name (an image of your site's registry is "
                                  "HOST[:PORT]/REPO), or set default_registry= in plugstack.conf "
                                  "(SLIPWAY_DEFAULT_REGISTRY for slipway)"
                                : "; check the address and that the registry is up"),
                       why.error_number() ? why.error_number() : EIO);
}

Status RegistryClient::http_error(long status, const std::string& what) const {
  const std::string image = "'" + ref_.str() + "'";
  const std::string code = " (HTTP " + std::to_string(status) + ")";
  const std::string cred_file =
      opts_.credentials_file.empty() ? kDefaultCredentialsHint : opts_.credentials_file;
  if (status == 401 || status == 403) {
    if (!creds_user_.empty())
      return Status::error("registry " + ref_.registry + " refused credentials for '" +
                           ref_.repository + "'" + code + "; check " + cred_file, EACCES);
    return Status::error("image " + image + " not found on registry " + ref_.registry +
                             " or it needs credentials" + code + "; check the name or add 'machine " +
                             ref_.registry + " login USER password PASS' to " + cred_file,
                         EACCES);
  }
  if (status == 404)
    return Status::error(what + " " + image + " not found on registry " + ref_.registry + code +
                             "; check the name",
                         ENOENT);
  if (status == 429)
    return Status::error("registry " + ref_.registry + " keeps refusing requests for " + image +
                             " as too many" + code + "; retry later or use a mirror",
                         EAGAIN);
  return Status::error("registry " + ref_.registry + " failed the request for " + what + " " +
                           image + code + "; retry later or ask the registry's admin",
                       EIO);
}

Result<HttpResponse> RegistryClient::get(const std::string& path,
                                         const std::vector<std::string>& headers, Sink* sink,
                                         bool head) {
  last_from_mirror_ = false;
  if (auto mirrored = get_from_mirror(path, headers, sink, head)) {
    last_from_mirror_ = true;
    return std::move(*mirrored);
  }
  bool authed_here = false;
  for (int attempt = 0;; ++attempt) {
    HttpRequest req{base_url() + path, headers, {}, {}};
    req.head = head;
    // Each try gets what is left of the import's deadline; past it, no more tries.
    req.timeout_ms = remaining_ms();
    if (req.timeout_ms == 0) return deadline_passed(path);
    if (!auth_header_.empty()) req.headers.push_back(auth_header_);
    if (use_basic_) req.user = creds_user_, req.password = creds_password_;
    if (sink && sink->restart) SLIPWAY_TRY(sink->restart());
    TransportError kind;
    auto resp = http_->perform(req, sink ? &sink->body : nullptr, &kind);
    bool can_retry = attempt < opts_.max_retries;
    if (!resp.ok()) {
      if (kind == TransportError::kNone) return resp.status();  // the sink failed: not transport
      // curl's clock and ours differ by a few ms: a timeout with under a second left is the
      // deadline's (and a retry in that second would be cut too).
      if (kind == TransportError::kTimeout && remaining_ms() >= 0 && remaining_ms() < 1000)
        return deadline_passed(path);
      if (kind == TransportError::kTimeout && can_retry) {
        std::this_thread::sleep_for(backoff(attempt, ""));
        continue;
      }
      return transport_error(resp.status(), kind, path);
    }
    if (resp->status == 401 && !authed_here) {
      authed_here = true;
      SLIPWAY_TRY(authenticate(*resp));
      --attempt;  // authentication is not a retry
      continue;
    }
    if (is_retryable_status(resp->status) && can_retry) {
      std::this_thread::sleep_for(backoff(attempt, resp->header("retry-after")));
      continue;
    }
    return resp;
  }
}

Status RegistryClient::authenticate(const HttpResponse& resp) {
  if (!creds_loaded_) {
    creds_loaded_ = true;
    auto creds = read_credentials_file(opts_.credentials_file);
    if (!creds.ok()) return creds.status();
    Credentials c = find_credentials(*creds, ref_.registry);
    creds_user_ = c.login;
    creds_password_ = c.password;
  }
  auto ch = parse_www_authenticate(resp.header("www-authenticate"));
  if (!ch.ok()) return http_error(401, "image");
  if (ch->scheme == "basic") {
    if (creds_user_.empty() || use_basic_) return http_error(401, "image");
    use_basic_ = true;
    return Status();
  }
  if (ch->scheme == "bearer") return fetch_token(*ch);
  return Status::error("registry " + ref_.registry + " asks for unsupported authentication '" +
                           ch->scheme + "'; use Basic or token auth",
                       ENOTSUP);
}

Status RegistryClient::fetch_token(const AuthChallenge& c) {
  auto realm = c.params.find("realm");
  if (realm == c.params.end() || realm->second.rfind("http", 0) != 0)
    return Status::error("registry " + ref_.registry + " sent a token challenge without a realm; "
                         "it is misconfigured", EPROTO);
  std::string url = realm->second + (realm->second.find('?') == std::string::npos ? "?" : "&");
  auto service = c.params.find("service");
  if (service != c.params.end()) url += "service=" + url_escape(service->second) + "&";
  auto scope = c.params.find("scope");
  url += "scope=" + url_escape(scope != c.params.end() ? scope->second
                                                       : "repository:" + ref_.repository + ":pull");
  HttpRequest req{url, {}, creds_user_, creds_password_};
  TransportError kind;
  auto resp = http_->perform(req, nullptr, &kind, 1 << 20);
  if (!resp.ok()) return transport_error(resp.status(), kind, "/token").context("token server");
  if (resp->status != 200) return http_error(resp->status == 403 ? 401 : resp->status, "token for");
  std::string token = parse_token_answer(resp->body);
  if (token.empty())
    return Status::error("token server of registry " + ref_.registry + " sent no token", EPROTO);
  auth_header_ = "Authorization: Bearer " + token;
  use_basic_ = false;
  return Status();
}

Result<FetchedManifest> RegistryClient::fetch_manifest(const std::string& reference) {
  std::string body;
  Sink sink{[&](const char* p, size_t n) -> Status {
              if (body.size() + n > kMaxManifestBytes)
                return Status::error("manifest of image '" + ref_.str() + "' is larger than " +
                                     std::to_string(kMaxManifestBytes) + " bytes", EFBIG);
              body.append(p, n);
              return Status();
            },
            [&] { body.clear(); return Status(); }};
  auto resp = get("/manifests/" + reference,
                  {"Accept: " + std::string(media::kManifestAccept)}, &sink);
  SLIPWAY_TRY(resp);
  if (resp->status != 200) return http_error(resp->status, "image");
  FetchedManifest m;
  m.digest = sha256_digest(body);
  if (is_valid_digest(reference) && m.digest != reference)
    return Status::error("manifest of image '" + ref_.str() + "' has digest " + m.digest +
                             " (expected " + reference + "); the registry or a proxy corrupted it",
                         EBADMSG);
  auto kind = manifest_kind(body, resp->header("content-type"));
  if (!kind.ok()) return kind.status().context("image '" + ref_.str() + "'");
  m.kind = *kind;
  m.body = std::move(body);
  return m;
}

Result<FetchedManifest> RegistryClient::fetch_platform_manifest(bool want_body) {
  auto top = fetch_manifest(ref_.digest.empty() ? ref_.tag : ref_.digest);
  SLIPWAY_TRY(top);
  top->named_digest = top->digest;
  if (top->kind == ManifestKind::kManifest) return top;
  auto entry = pick_platform(top->body);
  if (!entry.ok()) return entry.status().context("image '" + ref_.str() + "'");
  if (!want_body) return FetchedManifest{"", entry->digest, ManifestKind::kManifest, top->digest};
  auto m = fetch_manifest(entry->digest);
  SLIPWAY_TRY(m);
  if (m->kind != ManifestKind::kManifest)
    return Status::error("image '" + ref_.str() + "': the linux/amd64 entry of its index is "
                         "not an image manifest", EPROTO);
  m->named_digest = top->digest;
  return m;
}

Result<std::string> RegistryClient::head_manifest_digest(const std::string& reference) {
  auto resp = get("/manifests/" + reference, {"Accept: " + std::string(media::kManifestAccept)},
                  nullptr, /*head=*/true);
  SLIPWAY_TRY(resp);
  if (resp->status != 200) return std::string();
  std::string d = resp->header("docker-content-digest");
  return is_valid_digest(d) ? d : std::string();
}

// A blob a mirror got wrong (size or digest) is fetched again from the registry itself, and the
// mirror is dropped for the rest of the import with one warning, as when it fails outright.
Status RegistryClient::fetch_blob(const Descriptor& d, int fd, uint64_t keep_free) {
  Status st = fetch_blob_once(d, fd, keep_free);
  if (!mirror_lied(st, d)) return st;
  return fetch_blob_once(d, fd, keep_free);
}

// Whether ST is a mirror's corrupt answer for blob D; if so the mirror is dropped (one warning).
bool RegistryClient::mirror_lied(const Status& st, const Descriptor& d) {
  if (st.ok() || !last_from_mirror_ || st.error_number() != EBADMSG) return false;
  if (!mirror_failed_->exchange(true) && opts_.warn)
    opts_.warn("warning: registry mirror " + opts_.mirrors.at(ref_.registry) + " sent a corrupt blob " +
               d.digest + " for '" + ref_.str() + "'; using " + ref_.registry + " itself");
  return true;
}

Status RegistryClient::fetch_blob_once(const Descriptor& d, int fd, uint64_t keep_free) {
  Sha256 hash;
  uint64_t got = 0, free_checked_at = 0;
  const std::string blob = "blob " + d.digest + " of image '" + ref_.str() + "'";
  // At the first bytes and every 64 MiB: the cache's filesystem keeps KEEP_FREE (min_free_space=) as the blob grows.
  auto check_free = [&]() -> Status {
    free_checked_at = got;
    struct statvfs vfs;
    if (::fstatvfs(fd, &vfs) == -1) return Status::from_errno("statvfs of the image cache", errno);
    const uint64_t avail = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    if (avail >= keep_free) return Status();
    return Status::error("the cache's filesystem has " + human_bytes(avail) + " free while " + blob +
                             " downloads, below the " + human_bytes(keep_free) + " it must keep (" +
                             bound_text("min_free_space", human_bytes(keep_free)) + ")",
                         ENOSPC);
  };
  Sink sink{[&](const char* p, size_t n) -> Status {
              got += n;
              if (got > d.size)
                return Status::error("blob " + d.digest + " of image '" + ref_.str() +
                                     "' is larger than the " + std::to_string(d.size) +
                                     " bytes its manifest declares; the image is corrupt", EBADMSG);
              hash.update(p, n);
              Status w = write_all(fd, p, n);
              if (!w.ok()) return w.context(blob);
              if (keep_free > 0 && (got == n || got - free_checked_at >= (uint64_t{64} << 20)))
                return check_free();
              return Status();
            },
            [&]() -> Status {
              got = 0;
              free_checked_at = 0;
              hash = Sha256();
              SLIPWAY_SYS(::ftruncate(fd, 0), "truncate blob file");
              SLIPWAY_SYS(::lseek(fd, 0, SEEK_SET), "seek blob file");
              return Status();
            }};
  auto resp = get("/blobs/" + d.digest, {}, &sink);
  SLIPWAY_TRY(resp);
  if (resp->status != 200) return http_error(resp->status, "blob " + d.digest + " of image");
  if (got != d.size)
    return Status::error("blob " + d.digest + " of image '" + ref_.str() + "' is " +
                         std::to_string(got) + " bytes, its manifest declares " +
                         std::to_string(d.size) + "; the image is corrupt", EBADMSG);
  std::string actual = hash.finish();
  if (actual != d.digest)
    return Status::error("blob " + d.digest + " of image '" + ref_.str() + "' has digest " + actual +
                             " (expected " + d.digest + "); the registry or a proxy corrupted it",
                         EBADMSG);
  return Status();
}

Result<std::string> RegistryClient::fetch_small_blob(const Descriptor& d) {
  auto body = fetch_small_blob_once(d);
  if (!mirror_lied(body.status(), d)) return body;
  return fetch_small_blob_once(d);
}

Result<std::string> RegistryClient::fetch_small_blob_once(const Descriptor& d) {
  if (d.size > kMaxConfigBytes)
    return Status::error("config blob of image '" + ref_.str() + "' is too large", EFBIG);
  std::string body;
  Sink sink{[&](const char* p, size_t n) -> Status {
              if (body.size() + n > d.size)
                return Status::error("blob " + d.digest + " of image '" + ref_.str() +
                                     "' is larger than its manifest declares", EBADMSG);
              body.append(p, n);
              return Status();
            },
            [&] { body.clear(); return Status(); }};
  auto resp = get("/blobs/" + d.digest, {}, &sink);
  SLIPWAY_TRY(resp);
  if (resp->status != 200) return http_error(resp->status, "blob " + d.digest + " of image");
  if (body.size() != d.size)
    return Status::error("blob " + d.digest + " of image '" + ref_.str() + "' is " +
                             std::to_string(body.size()) + " bytes, its manifest declares " +
                             std::to_string(d.size) + "; the image is corrupt",
                         EBADMSG);
  std::string actual = sha256_digest(body);
  if (actual != d.digest)
    return Status::error("blob " + d.digest + " of image '" + ref_.str() + "' has digest " + actual +
                             " (expected " + d.digest + "); the registry or a proxy corrupted it",
                         EBADMSG);
  return body;
}

Result<bool> RegistryClient::mirror_holds_blob(const Descriptor& d) {
  uint64_t got = 0;
  bool streams_it = false;
  Sink sink{[&](const char*, size_t n) -> Status {
              got += n;
              if (got <= 1) return Status();
              streams_it = true;  // the whole blob, from the registry: stop it here
              return Status::error("not held", EAGAIN);
            },
            [&] {
              got = 0;
              return Status();
            }};
  auto resp = get_from_mirror("/blobs/" + d.digest, {"Range: bytes=0-0"}, &sink, /*head=*/false);
  if (streams_it) return false;
  if (!resp) return Status::error("no usable mirror for " + ref_.registry, ENOENT);
  SLIPWAY_TRY(*resp);
  return (*resp)->status == 206;
}

Result<MirrorWarmup> warm_mirror(RegistryClient& client, std::string_view manifest_body,
                                 int max_wait_s) {
  auto m = parse_manifest(manifest_body);
  SLIPWAY_TRY(m);
  std::vector<Descriptor> blobs = {m->config};
  blobs.insert(blobs.end(), m->layers.begin(), m->layers.end());
  MirrorWarmup w;
  std::vector<Descriptor> pending;
  // Every blob asked once: the mirror starts storing those it lacks, all at once.
  for (const auto& d : blobs) {
    auto held = client.mirror_holds_blob(d);
    SLIPWAY_TRY(held);
    ++w.blobs;
    if (*held) continue;
    ++w.fetched;
    w.bytes += d.size;
    pending.push_back(d);
  }
  // Then until it holds them all: each probe of a blob not yet stored costs the registry a
  // request cut short, so they back off (0.2 s, doubling, at most 5 s apart). A mirror that has
  // stored none of them 5 s on does not store what it is asked for (or ignores ranges): no wait.
  const auto start = std::chrono::steady_clock::now();
  bool stores = false;
  for (double delay = 0.2; !pending.empty(); delay = std::min(delay * 2, 5.0)) {
    const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
    if (waited.count() + delay > (stores ? max_wait_s : std::min(max_wait_s, 5))) break;
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    std::vector<Descriptor> still;
    for (const auto& d : pending) {
      auto held = client.mirror_holds_blob(d);
      SLIPWAY_TRY(held);
      if (!*held) still.push_back(d);
    }
    stores = stores || still.size() < pending.size();
    pending = std::move(still);
  }
  w.stored = pending.empty();
  return w;
}

Result<std::string> resolve_digest(const ImageRef& ref, const RegistryOptions& opts) {
  if (ref.kind != ImageRef::Kind::kRegistry)
    return Status::error("image '" + ref.str() + "' is a local file, not a registry image", EINVAL);
  RegistryClient client(ref, opts);
  auto m = client.fetch_platform_manifest(/*want_body=*/false);
  SLIPWAY_TRY(m);
  return m->digest;
}

Result<FetchedManifest> resolve_manifest(const ImageRef& ref, const RegistryOptions& opts) {
  if (ref.kind != ImageRef::Kind::kRegistry)
    return Status::error("image '" + ref.str() + "' is a local file, not a registry image", EINVAL);
  RegistryClient client(ref, opts);
  return client.fetch_platform_manifest(/*want_body=*/true);
}

}  // namespace slipway::launcher
