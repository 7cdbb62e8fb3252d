// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// HttpClient: a thin owner of one libcurl easy handle (connections are reused across requests).
// It knows nothing about registries: it performs one request, streams a 2xx body into a sink and
// reports transport failures as a Status with a hint whether retrying could help.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace slipway::launcher {

struct HttpOptions {
  std::string ca_file;  // extra CA bundle, added to curl's default store
  long connect_timeout_s = 10;
  long min_rate_bytes = 64 << 10;  // abort a transfer slower than this many bytes/s ...
  long low_speed_time_s = 30;  // ... for this long (0 bytes/s: never)
  long transfer_timeout_s = 0;  // abort a transfer that lasts longer (0: never)
};

struct HttpRequest {
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string user, password;        // HTTP Basic when user is not empty
  bool head = false;                 // HEAD: headers only
  // Abandon the request once nothing (no header line, no body byte) has arrived for this many
  // seconds, counted from its start, a stall mid-body included; it also caps the connect timeout.
  // 0: never. Fails as TransportError::kTimeout, "nothing received for N s".
  long silence_timeout_s = 0;
  // Abandon the request once it has lasted this many milliseconds (TransportError::kTimeout);
  // -1: HttpOptions.transfer_timeout_s.
  long timeout_ms = -1;
};

struct HttpResponse {
  long status = 0;
  std::string body;                            // non-2xx bodies and 2xx bodies without a sink
  std::map<std::string, std::string> headers;  // lowercase name -> value (final response only)
  std::string header(const std::string& lower_name) const;
};

// Receives a 2xx body chunk by chunk; returns a failed Status to abort the transfer.
using BodySink = std::function<Status(const char* data, size_t n)>;

enum class TransportError { kNone, kConnect, kTimeout, kTls, kOther };

class HttpClient {
 public:
  explicit HttpClient(HttpOptions opts);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Performs REQ. A transport failure returns a Status whose message is curl's reason (for
  // example "Connection refused") and sets *kind; a failed sink returns the sink's Status.
  // A body without a sink is kept up to max_body bytes (beyond: error).
  Result<HttpResponse> perform(const HttpRequest& req, const BodySink* sink,
                               TransportError* kind, uint64_t max_body = 16 << 20);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Percent-encodes S for a URL query value.
std::string url_escape(const std::string& s);

}  // namespace slipway::launcher
