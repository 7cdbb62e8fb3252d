// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The node cache: content-addressed blobs and unpacked images under one root owned by the user.
//   <root>/blobs/sha256/<hex>              verified blobs (layers, configs)
//   <root>/images/<manifest-hex>/          a published image: rootfs/, config.json, manifest.json,
//                                          name (the reference it was first imported as)
//   <root>/tmp/                            work in progress (<hex>.<pid>.<rand>, blob-<hex>.<...>)
//   <root>/locks/<hex>.lock                flock(2) files: importers hold LOCK_EX while working
//   <root>/squashfs/<key>                  the manifest digest a squashfs file was imported as
//   <root>/tags/<sha256 of the reference>  what a tag last named, and its manifest (tag_memo.h)
// Publishing is one rename(2) of a finished tmp/ directory, so readers need no lock: what exists
// under images/ is complete. Leftovers of a killed importer are in tmp/ and are removed by the
// next importer of the same digest (who holds the lock, so their owner must be dead).
//
// The root may be on a filesystem every node sees (NFS, Lustre, GPFS: the plugin's cache_dir=).
// Then nodes with their own pid spaces share it, so no decision rests on a pid: a tmp/ entry's
// owner is alive while it holds its lock (the lock of the image or blob it works on), and flock(2)
// must be coherent across nodes (NFS: the default, not local_lock=; Lustre: -o flock, not
// localflock), as it must for the in-use marks gc honours. Correctness never needs the locks:
// blobs and images are content-addressed and published by rename(2), so two nodes that do the
// same work both publish the same bytes; the locks make N nodes download each blob once. A cache
// is one user's (root owned by the user, 0700, no parent others could rename it in): another
// user's files must never become a user's rootfs, so a site-wide root holds one cache per uid.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace slipway::launcher {

// "/var/tmp/slipway-<uid>" (node-local disk, never /run: it is a small tmpfs).
std::string default_cache_dir(uid_t uid);

// Whether PATH is usable as UID's cache root as it stands: missing (to be made), or a directory
// (not a symlink) of UID's that no one else may write.
bool cache_root_is_usable(const std::string& path, uid_t uid);

// As root (the plugin, before a user's import): makes DIR (default_cache_dir(UID) in PARENT, a
// sticky or root-only directory) UID's own directory, mode 0700, whoever made that name first.
// Anything else there (another user's directory, a symlink, a file, UID's own directory that
// others may write) is renamed aside to NAME.squatted-RANDOM, neither read nor removed. Returns
// a line saying so for the node's log, or "" when the directory was fine or just made.
Result<std::string> claim_user_cache(const std::string& parent, uid_t uid, gid_t gid);

// The cache root the calling user's `slipway` commands use by default: default_cache_dir(), or,
// when that is not usable (cache_root_is_usable: someone else made it first), a private
// /var/tmp/slipway-<uid>.XXXXXX of theirs, made once and reused after. *NOTE gets one line
// saying which and why when it is not the default.
std::string user_default_cache_dir(std::string* note);

class NodeCache {
 public:
  explicit NodeCache(std::string root) : root_(std::move(root)) {}

  // Creates the root (mode 0700, parents as needed) and its subdirectories; the root must be a
  // directory owned by the effective uid and not writable by others, and each directory above it
  // owned by root or the euid and not writable by others unless sticky (as /var/tmp). Nothing is
  // created when a directory above is refused.
  Status ensure_layout() const;
  // The root alone, checked and created as ensure_layout() does (srun's tag memo on a login node
  // needs no more).
  Status make_root() const;
  // Whether the cache exists and is safe to read (ours, not writable by others), creating nothing:
  // the launch-from-cache path checks this instead of ensure_layout().
  bool is_trusted() const;
  // Why the cache may not be read (absolute path, a directory ours, not writable by others); ok
  // when it may. `slipway images`, `rm`, `gc` and `check` say this rather than list nothing.
  Status check_trusted() const;

  const std::string& root() const { return root_; }
  std::string blob_path(std::string_view digest) const;
  std::string image_dir(std::string_view manifest_digest) const;
  std::string lock_path(std::string_view key) const;
  std::string tmp_dir() const { return root_ + "/tmp"; }

  // A new private directory tmp/<key>.<pid>.<random> (mode 0700).
  Result<std::string> make_tmp_dir(std::string_view key) const;
  // Removes tmp/<key>.* left by dead importers (and tmp/rm-<key>.* by dead removers). Call only
  // while holding lock_path(key).
  Status remove_stale_tmp(std::string_view key) const;

 private:
  std::string root_;
};

// flock(2) on a lock file, released when the object dies (or the process does).
class FileLock {
 public:
  enum class Mode { kShared, kExclusive };
  static Result<FileLock> acquire(const std::string& path, Mode mode, bool wait = true);
  // The same on a lock file that must already exist (ENOENT if not): for those who only ask
  // whether a lock is held, and must not create a file where a remover may be deleting the tree.
  static Result<FileLock> acquire_existing(const std::string& path, Mode mode, bool wait = true);
  bool held() const { return fd_.valid(); }
  // Whether the lock file still has a name: one who removes it does so while holding the lock, so
  // a waiter that got it afterwards holds a lock nobody else will ever take again.
  bool is_linked() const;
  // Whether PATH names the locked file now (not another file made there since we opened ours).
  bool is_at(const std::string& path) const;
  // Lets the lock outlive an exec(2) of this process (clears FD_CLOEXEC): the command that
  // replaces `slipway run` then holds it until it and every child that inherited it exit.
  void keep_across_exec() const;

 private:
  static Result<FileLock> open_and_lock(const std::string& path, int flags, Mode mode, bool wait);
  UniqueFd fd_;
};

// Who holds a flock on PATH now, as /proc/locks and /proc/PID say it: "pid 1234 (slipway, uid
// 1000)", several joined by ", "; "another process" when nothing tells (a holder in another PID
// namespace, a lock released meanwhile).
std::string lock_holders(const std::string& path);

// Importers hold this (a shared flock on locks/blobs.lock) from before their first blob lands
// until their image is published; the blob sweep of `gc` and `rm` takes it exclusively without
// waiting and is skipped while anyone imports, so it never deletes a blob that an import has just
// fetched, or found present, and is about to publish an image over.
Result<FileLock> hold_blobs(const NodeCache& cache);

// --- Cache management (`slipway images`, `slipway rm`, `slipway gc --keep SIZE`) ---

struct CachedImage {
  std::string manifest_digest;  // "sha256:..."
  uint64_t bytes = 0;           // disk use of the unpacked rootfs (hard links counted once)
  int64_t last_use = 0;         // seconds since the epoch: last import_image() that returned it
  bool in_use = false;          // a running step holds images/<hex>/.inuse
  std::string name;             // the reference it was first imported as (images/<hex>/name)
};

// Published images, least recently used first.
Result<std::vector<CachedImage>> list_images(const NodeCache& cache);

// Held by a running step for as long as it uses the image: a shared flock on
// images/<hex>/.inuse. Fails with ENOENT if the image is not (or no longer) published.
Result<FileLock> mark_in_use(const NodeCache& cache, std::string_view manifest_digest);

// Unpublishes (one rename) and deletes an image; EBUSY if a step uses it. Blobs no other image
// references are deleted too, unless an import is running (hold_blobs): then *BLOBS_DEFERRED is
// set and the next `rm` or `gc` deletes them.
Status remove_image(const NodeCache& cache, std::string_view manifest_digest,
                    bool* blobs_deferred = nullptr);

struct GcResult {
  int removed = 0;
  uint64_t freed_bytes = 0;  // rootfs bytes of the removed images
  uint64_t kept_bytes = 0;
  bool blobs_deferred = false;  // an import was running: unreferenced blobs were left for later
};
// Removes least-recently-used images not in use until the rest fits in KEEP_BYTES, then blobs
// no image references and leftovers of dead importers in tmp/.
Result<GcResult> gc_images(const NodeCache& cache, uint64_t keep_bytes);

// `slipway check`: the published image's files are all there (config.json, manifest.json,
// rootfs/), its config.json is the config its manifest names (sha256), and every layer blob is in
// blobs/ with the sha256 and size its manifest says. The error names the first problem and the fix.
Status check_image(const NodeCache& cache, std::string_view manifest_digest);

// The published image TEXT names, for `slipway rm`: a digest ("sha256:<hex>"), a unique prefix
// of at least 6 hex digits, or the reference it was imported as (CANONICAL: the same text
// normalised by parse_image_ref, e.g. "busybox" -> "registry-1.docker.io/library/busybox:latest").
// ENOENT when nothing matches, EINVAL when several do.
Result<std::string> find_image(const NodeCache& cache, std::string_view text,
                               std::string_view canonical = {});

// "10G", "500M", "1.5T", "4096", "0": bytes (binary units K, M, G, T; an optional "i"/"iB"/"B").
Result<uint64_t> parse_size(std::string_view text);

// 16 random hex characters (getrandom).
std::string random_suffix();

}  // namespace slipway::launcher
