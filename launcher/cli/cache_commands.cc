// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// `slipway images`, `slipway rm IMAGE...` and `slipway gc --keep SIZE`: the node cache as the user
// sees it (cache.h does the work). The cache is $SLIPWAY_CACHE_DIR, else /var/tmp/slipway-<uid>,
// the one the plugin uses on a node unless the site set cache_dir in plugstack.conf.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "cli/cli_common.h"
#include "common/text.h"
#include "image/cache.h"
#include "image/image_ref.h"

namespace slipway::launcher::cli {
namespace {

NodeCache user_cache() { return NodeCache(cache_dir()); }

// Whether there is a cache to read: false when it does not exist yet (nothing was imported), an
// error when it exists but is not this user's or cannot be read (never an empty listing then).
Result<bool> cache_exists(const NodeCache& cache) {
  struct stat st;
  if (stat(cache.root().c_str(), &st) == -1 && errno == ENOENT) return false;
  SLIPWAY_TRY(cache.check_trusted());
  const std::string images = cache.root() + "/images";
  if (stat(images.c_str(), &st) == -1 && errno == ENOENT) return false;
  if (access(images.c_str(), R_OK | X_OK) == -1)
    return Status::from_errno("cannot read the cache " + cache.root(), errno);
  return true;
}

std::string local_time(int64_t t) {
  time_t tt = static_cast<time_t>(t);
  tm parts{};
  char buf[32];
  if (!localtime_r(&tt, &parts) || !strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &parts)) return "?";
  return buf;
}

// TEXT as parse_image_ref normalises it, so `slipway rm busybox` finds what `import busybox` made.
std::string canonical(const std::string& text) {
  RefDefaults d;
  d.default_registry = env_or("SLIPWAY_DEFAULT_REGISTRY", std::string(kDockerHubRegistry));
  auto ref = parse_image_ref(text, d);
  return ref.ok() ? ref->str() : text;
}

}  // namespace

int cmd_images(std::vector<std::string>& args) {
  if (!args.empty()) return fail("usage: slipway images"), 2;
  NodeCache cache = user_cache();
  auto exists = cache_exists(cache);
  if (!exists.ok()) return fail(exists.status().message());
  auto images = *exists ? list_images(cache) : std::vector<CachedImage>{};
  if (!images.ok()) return fail(images.status().message());
  printf("%-19s  %10s  %-16s  %-6s  %s\n", "DIGEST", "SIZE", "LAST USE", "IN USE", "IMAGE");
  for (auto it = images->rbegin(); it != images->rend(); ++it)  // most recently used first
    printf("%-19s  %10s  %-16s  %-6s  %s\n", it->manifest_digest.substr(0, 19).c_str(),
           human_bytes(it->bytes).c_str(), local_time(it->last_use).c_str(), it->in_use ? "yes" : "no",
           it->name.empty() ? "-" : it->name.c_str());
  return 0;
}

// rm and gc leave unreferenced blobs alone while an import runs (hold_blobs in image/cache.h).
constexpr const char* kBlobsDeferred =
    "layer blobs no image uses were kept: an import is running; 'slipway gc' removes them later";

int cmd_rm(std::vector<std::string>& args) {
  if (args.empty()) return fail("usage: slipway rm IMAGE..."), 2;
  NodeCache cache = user_cache();
  if (auto exists = cache_exists(cache); !exists.ok()) return fail("rm: " + exists.status().message());
  int rc = 0;
  bool deferred = false;
  for (const auto& text : args) {
    auto digest = find_image(cache, text, canonical(text));
    Status st = digest.ok() ? remove_image(cache, *digest, &deferred) : digest.status();
    if (!st.ok()) {
      rc = fail(st.message());
      continue;
    }
    printf("removed %s\n", digest->c_str());
  }
  if (deferred) printf("%s\n", kBlobsDeferred);
  return rc;
}

// slipway check [IMAGE...]: every image (or those named) is whole; one line each, exit 1 if not.
int cmd_check(std::vector<std::string>& args) {
  NodeCache cache = user_cache();
  auto exists = cache_exists(cache);
  if (!exists.ok()) return fail("check: " + exists.status().message());
  if (!*exists) {  // nothing imported yet: nothing to check, as `images` lists nothing
    for (const auto& text : args)
      fail("no image '" + text + "' in the cache " + cache.root() + "; see 'slipway images'");
    return args.empty() ? 0 : 1;
  }
  std::vector<std::string> digests;
  if (args.empty()) {
    auto images = list_images(cache);
    if (!images.ok()) return fail("check: " + images.status().message());
    for (const auto& img : *images) digests.push_back(img.manifest_digest);
  }
  int rc = 0;
  for (const auto& text : args) {
    auto digest = find_image(cache, text, canonical(text));
    if (!digest.ok()) rc = fail(digest.status().message());
    else digests.push_back(*digest);
  }
  for (const auto& digest : digests) {
    Status st = check_image(cache, digest);
    if (!st.ok()) rc = fail(st.message());
    else printf("ok %s\n", digest.c_str());
  }
  return rc;
}

int cmd_gc(std::vector<std::string>& args) {
  std::string keep;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--keep" && i + 1 < args.size()) keep = args[++i];
    else if (args[i].rfind("--keep=", 0) == 0) keep = args[i].substr(7);
    else return fail("usage: slipway gc --keep SIZE"), 2;
  }
  if (keep.empty()) return fail("usage: slipway gc --keep SIZE (e.g. --keep 20G)"), 2;
  auto bytes = parse_size(keep);
  if (!bytes.ok()) return fail("gc: " + bytes.status().message()), 2;
  NodeCache cache = user_cache();
  auto exists = cache_exists(cache);
  if (!exists.ok()) return fail("gc: " + exists.status().message());
  if (!*exists) return printf("nothing cached in %s\n", cache.root().c_str()), 0;
  auto r = gc_images(cache, *bytes);
  if (!r.ok()) return fail("gc: " + r.status().message());
  printf("removed %d image%s (%s), kept %s%s\n", r->removed, r->removed == 1 ? "" : "s",
         human_bytes(r->freed_bytes).c_str(), human_bytes(r->kept_bytes).c_str(),
         r->kept_bytes > *bytes ? " (the rest is in use by running steps)" : "");
  if (r->blobs_deferred) printf("%s\n", kBlobsDeferred);
  return 0;
}

}  // namespace slipway::launcher::cli
