// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Registry client: Docker Registry HTTP API v2 over libcurl, with anonymous, Basic and Bearer-token
// auth, retries with back-off on 429/5xx/timeouts, and blobs verified (size and sha256) while they
// stream. Every error is one line naming the image, the registry, the cause and the fix.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "image/image_ref.h"
#include "image/manifest.h"

namespace slipway::launcher {

struct RegistryOptions {
  std::vector<std::string> insecure_registries;  // host[:port] spoken to over plain HTTP
  // Pull-through mirrors, registry host[:port] -> mirror host[:port] (registry_mirrors=): manifests
  // and blobs are asked of the mirror first, without the registry's credentials, and verified as
  // always; a mirror that fails (unreachable, any answer but success, mirror_silence_s without a
  // byte, a corrupt blob) is dropped for the rest of the import, with one call of `warn`, and the
  // registry itself is asked.
  std::map<std::string, std::string> mirrors;
  std::function<void(const std::string& line)> warn;
  std::string ca_file;          // extra CA bundle (in addition to the system store)
  std::string credentials_file; // netrc-style: "machine HOST login USER password PASS"
  long connect_timeout_s = 10;
  // A transfer (manifest or blob) averaging less than min_rate_bytes/s over min_rate_window_s
  // (registry_min_rate=) is abandoned and retried; the last failure names the registry and the blob.
  long min_rate_bytes = 64 << 10;
  long min_rate_window_s = 30;
  // registry_timeout=: the deadline of one import's registry part (the wait for the image's lock,
  // the manifest, the config, every blob, retries included), in seconds; kAutoTimeout: derived
  // from the image's declared size (import_deadline_s); 0: none. A transfer still running at the
  // deadline is cut and not retried. The minimum rate alone bounds nothing: a registry trickling
  // just above it holds the image's lock for days on a blob declared as 20 GB.
  long timeout_s = kAutoTimeout;
  static constexpr long kAutoTimeout = -1;
  long auto_timeout_slack_s = 60;   // auto: this, plus the declared bytes at min_rate_bytes/s, ...
  long auto_timeout_cap_s = 3600;   // ... at most this (not site settings: tests scale them)
  int max_retries = 4;
  // registry_mirror_timeout=: a mirror that sends nothing for this long (no answer yet, or a body
  // that stopped) is dropped as one that failed: a hung mirror costs an import this long, not the
  // registry's limits above (30 s a request by default, forever with registry_min_rate=0).
  long mirror_silence_s = 10;
};

// registry_min_rate= (a size per second: 1M, 64K, 0 for none), registry_timeout= (seconds, 0
// for none, "auto") and registry_mirror_timeout= (seconds, 1 to 3600), as the plugin and
// SLIPWAY_REGISTRY_MIN_RATE / SLIPWAY_REGISTRY_TIMEOUT / SLIPWAY_REGISTRY_MIRROR_TIMEOUT take them.
Status parse_registry_limit(RegistryOptions& opts, std::string_view key, std::string_view value);

// The seconds an import of an image declaring DECLARED_BYTES (config and layers, as its manifest
// says) may spend on the registry, 0 for no deadline: registry_timeout= when set; auto: the time a
// registry sending at exactly registry_min_rate needs, plus auto_timeout_slack_s, at most
// auto_timeout_cap_s (60 s + 10 MB at 64 KiB/s = 213 s; 20 GB: the cap, 1 hour). A mirror or
// registry faster than the minimum rate always finishes within it, up to the cap.
long import_deadline_s(const RegistryOptions& opts, uint64_t declared_bytes);
// How that deadline came about, for errors: "registry_timeout=120" or "registry_timeout=auto:
// 213 s for 10.0 MiB declared", then ", SLIPWAY_REGISTRY_TIMEOUT".
std::string import_deadline_text(const RegistryOptions& opts, uint64_t declared_bytes);

// REGISTRY=MIRROR[,REGISTRY=MIRROR...], each a host[:port] (docker.io means Docker Hub), as the
// plugin's registry_mirrors= and SLIPWAY_REGISTRY_MIRRORS take it. The error names the entry.
Result<std::map<std::string, std::string>> parse_registry_mirrors(std::string_view text);

// Tag -> digest of the manifest that will be run (for an index/manifest list: the linux/amd64
// entry's digest). One manifest request.
Result<std::string> resolve_digest(const ImageRef& ref, const RegistryOptions& opts);

struct FetchedManifest {
  std::string body;
  std::string digest;  // sha256 of body
  ManifestKind kind = ManifestKind::kManifest;
  std::string named_digest;  // fetch_platform_manifest: what the reference named (an index's digest)
};

// The image manifest that will be run, with its bytes (srun hands them to the nodes: see
// manifest_handoff.h). One request; two for an index (the index, then its linux/amd64 entry).
Result<FetchedManifest> resolve_manifest(const ImageRef& ref, const RegistryOptions& opts);

class HttpClient;
struct HttpResponse;
enum class TransportError;
struct AuthChallenge;

// One client per image (and per thread: it owns a curl handle). Not thread-safe.
class RegistryClient {
 public:
  RegistryClient(ImageRef ref, RegistryOptions opts);
  ~RegistryClient();
  RegistryClient(const RegistryClient&) = delete;
  RegistryClient& operator=(const RegistryClient&) = delete;

  // GET /v2/<repo>/manifests/<reference>; a digest reference is verified against the body.
  Result<FetchedManifest> fetch_manifest(const std::string& reference);
  // The manifest that will run: ref.digest (else ref.tag), following an index to linux/amd64.
  // With want_body false an index's entry is not fetched (digest only: resolve_digest).
  Result<FetchedManifest> fetch_platform_manifest(bool want_body = true);
  // HEAD /v2/<repo>/manifests/<reference>: the digest the registry says it names
  // (Docker-Content-Digest), or "" when it does not say. Registries do not count a HEAD as a pull
  // (Docker Hub's rate limit).
  Result<std::string> head_manifest_digest(const std::string& reference);
  // Streams blob D into FD (truncated first, rewritten on retry), checking size and digest: a
  // body longer than D.size is cut there and refused. Every 64 MiB the filesystem under FD must
  // still have KEEP_FREE bytes available (min_free_space=), else ENOSPC.
  Status fetch_blob(const Descriptor& d, int fd, uint64_t keep_free = 0);
  // A small blob (the image config) into memory, verified.
  Result<std::string> fetch_small_blob(const Descriptor& d);
  // Whether the mirror of this image's registry holds blob D: asked for its first byte ("Range:
  // bytes=0-0"), a pull-through mirror that holds it answers 206; one that does not answers with
  // the whole blob, fetched from the registry as it streams, and the request is cut short. Such
  // a mirror (docker-registry) also starts storing the blob then. An error when no mirror is
  // configured, or it failed (then dropped, with the one warning, as for an import).
  Result<bool> mirror_holds_blob(const Descriptor& d);
  const ImageRef& ref() const { return ref_; }
  // Every request from now on ends by DEADLINE (cut there, not retried past it); BOUND says how it
  // came about (import_deadline_text) in the error. Without a call: registry_timeout= from the
  // client's creation when set, else the auto cap (the sizes are not known yet).
  void set_deadline(std::chrono::steady_clock::time_point deadline, std::string bound);
  std::chrono::steady_clock::time_point deadline() const { return deadline_; }
  const std::string& deadline_bound() const { return deadline_bound_; }
  // Carry the auth state (token) and the deadline to another client for the same image (parallel
  // downloads).
  void share_auth_from(const RegistryClient& other);

 private:
  struct Sink;
  Result<HttpResponse> get(const std::string& path, const std::vector<std::string>& headers,
                           Sink* sink, bool head = false);
  Status authenticate(const HttpResponse& challenge);
  Status fetch_token(const AuthChallenge& c);
  Status http_error(long status, const std::string& what) const;
  Status transport_error(const Status& why, TransportError kind, const std::string& path) const;
  std::string base_url() const;

  ImageRef ref_;
  RegistryOptions opts_;
  std::unique_ptr<HttpClient> http_;
  // The mirror's answer, or nullopt when there is none to ask (or it just failed).
  Status fetch_blob_once(const Descriptor& d, int fd, uint64_t keep_free);
  Result<std::string> fetch_small_blob_once(const Descriptor& d);
  bool mirror_lied(const Status& st, const Descriptor& d);
  std::optional<Result<HttpResponse>> get_from_mirror(const std::string& path,
                                                      const std::vector<std::string>& headers,
                                                      Sink* sink, bool head);
  std::string mirror_url(const std::string& mirror) const;

  // The end of the registry's part of the import (time_point::max(): none), and its bound's text.
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
  std::string deadline_bound_;
  // Milliseconds left before the deadline (-1: no deadline; 0: passed).
  long remaining_ms() const;
  Status deadline_passed(const std::string& path) const;

  std::string auth_header_;  // "Authorization: Bearer ..." once a token is held
  // Set once the mirror failed; shared by the clients of one image (share_auth_from).
  std::shared_ptr<std::atomic<bool>> mirror_failed_ = std::make_shared<std::atomic<bool>>(false);
  bool last_from_mirror_ = false;  // the last get() was answered by the mirror
  bool use_basic_ = false;
  bool creds_loaded_ = false;
  std::string creds_user_, creds_password_;
  Status creds_status_;
};

struct MirrorWarmup {
  int blobs = 0;        // the image's blobs (config and layers)
  int fetched = 0;      // those the mirror did not hold yet
  uint64_t bytes = 0;   // their size
  bool stored = false;  // the mirror held every blob when warm_mirror() returned
};

// Before a job's nodes pull an image through a pull-through mirror. A mirror that does not merge
// concurrent first fetches of a blob (docker-registry and Harbor do not) fetches it from the
// registry once per node that asks before it holds it; docker-registry even twice for the first
// (one download streamed to the client, one stored). From one process (the plugin's srun, sbatch
// or salloc), this asks for each blob's first byte, which makes the mirror store the blobs it
// lacks, cuts the streamed copies short, and waits (at most MAX_WAIT_S) until it holds them all:
// the registry then sends about one image per job start, whatever the node count. Nothing of the
// blobs comes to this host.
Result<MirrorWarmup> warm_mirror(RegistryClient& client, std::string_view manifest_body,
                                 int max_wait_s = 600);

}  // namespace slipway::launcher
