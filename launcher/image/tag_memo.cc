// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Tags resolved without a pull (see tag_memo.h). The memo: "NAMED\nDIGEST\n" and the manifest's
// bytes, written atomically; read only from a cache the user owns (NodeCache::is_trusted).
#include "image/tag_memo.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <optional>

#include "common/file_util.h"
#include "image/digest.h"

namespace slipway::launcher {
namespace {

constexpr size_t kMaxMemo = 4 << 20;  // manifests are far smaller (registry.cc's limit)

std::string memo_path(const NodeCache& cache, const ImageRef& ref) {
  return cache.root() + "/tags/" + digest_hex(sha256_digest(ref.str()));
}

struct Memo {
  std::string named, digest, body;
};

std::optional<Memo> read_memo(const NodeCache& cache, const ImageRef& ref) {
  auto text = read_file_limited(memo_path(cache, ref), kMaxMemo);
  if (!text.ok()) return std::nullopt;
  size_t a = text->find('\n'), b = a == std::string::npos ? a : text->find('\n', a + 1);
  if (b == std::string::npos) return std::nullopt;
  Memo m{text->substr(0, a), text->substr(a + 1, b - a - 1), text->substr(b + 1)};
  // The manifest must still be what its digest says (a damaged memo is not trusted).
  if (!is_valid_digest(m.named) || !is_valid_digest(m.digest) || sha256_digest(m.body) != m.digest)
    return std::nullopt;
  return m;
}

void write_memo(const NodeCache& cache, const ImageRef& ref, const FetchedManifest& m) {
  if (m.named_digest.empty() || m.body.empty()) return;
  const std::string dir = cache.root() + "/tags";
  if (::mkdir(dir.c_str(), 0700) == -1 && errno != EEXIST) return;
  // Best effort: without a memo the next resolution makes the GETs again.
  (void)write_file_atomic(memo_path(cache, ref), m.named_digest + "\n" + m.digest + "\n" + m.body);
}

}  // namespace

Result<FetchedManifest> platform_manifest_by_tag(RegistryClient& client, const NodeCache& cache) {
  const ImageRef& ref = client.ref();
  const bool remember = !cache.root().empty() && cache.is_trusted();
  if (remember) {
    if (auto memo = read_memo(cache, ref)) {
      // A failed HEAD (registry down, bad credentials) is the answer: the GETs would only repeat
      // it. A HEAD without the digest, or with another one, falls back to them.
      auto named = client.head_manifest_digest(ref.tag);
      SLIPWAY_TRY(named);
      if (*named == memo->named) {
        auto kind = manifest_kind(memo->body);
        if (kind.ok() && *kind == ManifestKind::kManifest)
          return FetchedManifest{std::move(memo->body), memo->digest, ManifestKind::kManifest,
                                 memo->named};
      }
    }
  }
  auto m = client.fetch_platform_manifest();
  SLIPWAY_TRY(m);
  if (remember) write_memo(cache, ref, *m);
  return m;
}

}  // namespace slipway::launcher
