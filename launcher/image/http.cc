// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// libcurl wrapper behind HttpClient (see http.h). One easy handle per client; curl_easy_reset
// between requests keeps the connection and DNS caches, so a pull reuses one TCP/TLS connection.
#include "image/http.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <mutex>

#include "common/file_util.h"
#include "common/unique_fd.h"
#include "image/curl_api.h"

namespace slipway::launcher {
namespace {

// The loaded libcurl; HttpClient checks that it loaded before any call (see curl_api.h).
const CurlApi& C() { return **curl_api(); }

Result<std::string> read_small_file(const std::string& path) {
  auto text = read_file_limited(path, 64u << 20, Symlinks::kFollow);
  if (!text.ok()) return text.status().context("CA file");
  return text;
}

using Clock = std::chrono::steady_clock;

struct Transfer {
  const BodySink* sink = nullptr;
  HttpResponse* resp = nullptr;
  uint64_t max_body = 0;
  long status = 0;
  Status sink_status;
  long silence_s = 0;          // HttpRequest::silence_timeout_s
  Clock::time_point last_byte;  // when the last header line or body bytes arrived
  bool silent = false;          // aborted by on_progress for the silence
};

// CURLOPT_XFERINFOFUNCTION: libcurl calls it about once a second while nothing arrives
// (CURLOPT_XFERINFOFUNCTION(3)), so a silence is cut within a second of its limit. A byte count
// would not do: dlnow counts body bytes only, and a stalled answer may have sent its headers.
int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  t->silent = Clock::now() - t->last_byte >= std::chrono::seconds(t->silence_s);
  return t->silent ? 1 : 0;  // non-zero: CURLE_ABORTED_BY_CALLBACK
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  t->last_byte = Clock::now();
  std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {  // a new response (after a redirect or 100-continue)
    t->resp->headers.clear();
    size_t sp = line.find(' ');
    t->status = sp == std::string::npos ? 0 : std::strtol(line.c_str() + sp + 1, nullptr, 10);
    return size * n;
  }
  size_t colon = line.find(':');
  if (colon == std::string::npos) return size * n;
  std::string name = line.substr(0, colon);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  size_t b = line.find_first_not_of(" \t", colon + 1);
  size_t e = line.find_last_not_of(" \t\r\n");
  t->resp->headers[name] = b == std::string::npos || e < b ? "" : line.substr(b, e - b + 1);
  return size * n;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  t->last_byte = Clock::now();
  size_t len = size * n;
  bool success = t->status >= 200 && t->status < 300;
  if (success && t->sink) {
    t->sink_status = (*t->sink)(data, len);
    return t->sink_status.ok() ? len : 0;
  }
  if (t->resp->body.size() + len > t->max_body) {
    t->sink_status = Status::error("response body larger than " + std::to_string(t->max_body) +
                                   " bytes", EFBIG);
    return 0;
  }
  t->resp->body.append(data, len);
  return len;
}

TransportError classify(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
      return TransportError::kConnect;
    case CURLE_OPERATION_TIMEDOUT:
      return TransportError::kTimeout;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CACERT_BADFILE:
      return TransportError::kTls;
    default:
      return TransportError::kOther;
  }
}

}  // namespace

std::string HttpResponse::header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? std::string() : it->second;
}

struct HttpClient::Impl {
  HttpOptions opts;
  CURL* curl = nullptr;
  std::string ca_blob;  // default bundle + opts.ca_file, when a CA file is given
  std::string capath;   // or: the system CA directory, with opts.ca_file as CAINFO
  Status setup_status;  // libcurl missing, or an unreadable CA file: the first request says so
  char errbuf[CURL_ERROR_SIZE] = {};
};

HttpClient::HttpClient(HttpOptions opts) : impl_(std::make_unique<Impl>()) {
  impl_->opts = std::move(opts);
  if (auto api = curl_api(); !api.ok()) {
    impl_->setup_status = api.status();  // reported by the first request
    return;
  }
  impl_->curl = C().easy_init();
  if (impl_->opts.ca_file.empty()) return;
  // CURLOPT_CAINFO alone would replace the system store; the extra CA is "in addition to" it.
  // With a system CA directory (hashed, looked up lazily by OpenSSL) the file goes in CAINFO
  // and the directory in CAPATH: no parsing of the whole system bundle per client.
  char* capath = nullptr;
  if (C().easy_getinfo(impl_->curl, CURLINFO_CAPATH, &capath) == CURLE_OK && capath && *capath &&
      ::access(impl_->opts.ca_file.c_str(), R_OK) == 0) {
    impl_->capath = capath;
    return;
  }
  char* def = nullptr;
  std::string blob;
  if (C().easy_getinfo(impl_->curl, CURLINFO_CAINFO, &def) == CURLE_OK && def) {
    auto sys = read_small_file(def);
    if (sys.ok()) blob = std::move(*sys) + "\n";
  }
  auto extra = read_small_file(impl_->opts.ca_file);
  if (!extra.ok()) {
    impl_->setup_status = extra.status();
    return;
  }
  impl_->ca_blob = blob + *extra;
}

HttpClient::~HttpClient() {
  if (impl_ && impl_->curl) C().easy_cleanup(impl_->curl);
}

Result<HttpResponse> HttpClient::perform(const HttpRequest& req, const BodySink* sink,
                                         TransportError* kind, uint64_t max_body) {
  *kind = TransportError::kNone;
  if (!impl_->setup_status.ok()) return impl_->setup_status;
  if (!impl_->curl) return Status::error("curl_easy_init failed", ENOMEM);
  CURL* c = impl_->curl;
  C().easy_reset(c);
  HttpResponse resp;
  Transfer t{sink, &resp, max_body, 0, Status(), req.silence_timeout_s, Clock::now(), false};
  curl_slist* hdrs = nullptr;
  for (const auto& h : req.headers) hdrs = C().slist_append(hdrs, h.c_str());
  C().easy_setopt(c, CURLOPT_URL, req.url.c_str());
  C().easy_setopt(c, CURLOPT_NOBODY, req.head ? 1L : 0L);
  C().easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
  C().easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  C().easy_setopt(c, CURLOPT_MAXREDIRS, 8L);
  C().easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  C().easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  C().easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  // A TLS server that accepts and never answers the handshake is still connecting: the silence
  // caps the connect timeout too.
  long connect_s = impl_->opts.connect_timeout_s;
  if (req.silence_timeout_s > 0) {
    connect_s = connect_s > 0 ? std::min(connect_s, req.silence_timeout_s) : req.silence_timeout_s;
    C().easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    C().easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    C().easy_setopt(c, CURLOPT_XFERINFODATA, &t);
  }
  C().easy_setopt(c, CURLOPT_CONNECTTIMEOUT, connect_s);
  if (impl_->opts.min_rate_bytes > 0) {
    C().easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, impl_->opts.min_rate_bytes);
    C().easy_setopt(c, CURLOPT_LOW_SPEED_TIME, impl_->opts.low_speed_time_s);
  }
  if (req.timeout_ms >= 0)
    C().easy_setopt(c, CURLOPT_TIMEOUT_MS, req.timeout_ms);
  else
    C().easy_setopt(c, CURLOPT_TIMEOUT, impl_->opts.transfer_timeout_s);
  C().easy_setopt(c, CURLOPT_USERAGENT, "slipway/0.1");
  C().easy_setopt(c, CURLOPT_ERRORBUFFER, impl_->errbuf);
  C().easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  C().easy_setopt(c, CURLOPT_HEADERDATA, &t);
  C().easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  C().easy_setopt(c, CURLOPT_WRITEDATA, &t);
  if (!req.user.empty()) {
    C().easy_setopt(c, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    C().easy_setopt(c, CURLOPT_USERNAME, req.user.c_str());
    C().easy_setopt(c, CURLOPT_PASSWORD, req.password.c_str());
  }
  if (!impl_->capath.empty()) {
    C().easy_setopt(c, CURLOPT_CAINFO, impl_->opts.ca_file.c_str());
    C().easy_setopt(c, CURLOPT_CAPATH, impl_->capath.c_str());
  }
  if (!impl_->ca_blob.empty()) {
    curl_blob b{impl_->ca_blob.data(), impl_->ca_blob.size(), CURL_BLOB_COPY};
    C().easy_setopt(c, CURLOPT_CAINFO_BLOB, &b);
  }
  impl_->errbuf[0] = 0;
  CURLcode rc = C().easy_perform(c);
  C().slist_free_all(hdrs);
  if (!t.sink_status.ok()) return t.sink_status;
  if (rc == CURLE_ABORTED_BY_CALLBACK && t.silent) {
    *kind = TransportError::kTimeout;
    return Status::error("nothing received for " + std::to_string(t.silence_s) + " s", ETIMEDOUT);
  }
  if (rc != CURLE_OK) {
    *kind = classify(rc);
    std::string why = impl_->errbuf[0] ? impl_->errbuf : C().easy_strerror(rc);
    long os_errno = 0;
    C().easy_getinfo(c, CURLINFO_OS_ERRNO, &os_errno);
    if (*kind == TransportError::kConnect && os_errno != 0)
      why = std::strerror(static_cast<int>(os_errno));
    return Status::error(why, rc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : EIO);
  }
  C().easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
  return resp;
}

// RFC 3986: unreserved characters stay, every other byte becomes %XX (as curl_easy_escape).
std::string url_escape(const std::string& s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char ch : s) {
    if (std::isalnum(ch) || ch == '-' || ch == '.' || ch == '_' || ch == '~') {
      out += static_cast<char>(ch);
    } else {
      out += '%';
      out += kHex[ch >> 4];
      out += kHex[ch & 15];
    }
  }
  return out;
}

}  // namespace slipway::launcher
