// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Sha256: streaming SHA-256 (OpenSSL EVP) used to verify blobs while they download or are read.
// Digests are written the OCI way: "sha256:<64 lowercase hex>".
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/lazy_library.h"
#include "common/status.h"

namespace slipway::launcher {

// libcrypto, loaded on first use: call `crypto_library().load()` before hashing for an error that
// names the fix (a Sha256 without it yields "sha256:", which matches no digest).
LazyLibrary& crypto_library();

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;

  void update(const void* data, size_t n);
  // "sha256:<hex>"; the object is reset afterwards.
  std::string finish();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

std::string sha256_digest(std::string_view data);
// Digest of a whole file, read from the start.
Result<std::string> sha256_file(int fd);

// The hex part of "sha256:<hex>" (the digest must be valid).
inline std::string digest_hex(std::string_view digest) { return std::string(digest.substr(7)); }

}  // namespace slipway::launcher
