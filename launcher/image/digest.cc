// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Streaming SHA-256 over OpenSSL's EVP interface (see digest.h), libcrypto loaded on first use
// (common/lazy_library.h): a launch from the cache hashes nothing.
#include "image/digest.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

namespace slipway::launcher {

SLIPWAY_LAZY_LIBRARY(crypto_library, "libcrypto.so.3", "libssl3 (Debian) or openssl-libs (RHEL)")

}  // namespace slipway::launcher

#define SLIPWAY_CRYPTO(RET, NAME, PARAMS, ARGS, FAIL) \
  SLIPWAY_LAZY_FORWARD(slipway::launcher::crypto_library(), RET, NAME, PARAMS, ARGS, FAIL)
SLIPWAY_CRYPTO(EVP_MD_CTX*, EVP_MD_CTX_new, (void), (), nullptr)
SLIPWAY_LAZY_FORWARD_VOID(slipway::launcher::crypto_library(), EVP_MD_CTX_free, (EVP_MD_CTX * c), (c))
SLIPWAY_CRYPTO(const EVP_MD*, EVP_sha256, (void), (), nullptr)
SLIPWAY_CRYPTO(int, EVP_DigestInit_ex, (EVP_MD_CTX * c, const EVP_MD* md, ENGINE* e), (c, md, e), 0)
SLIPWAY_CRYPTO(int, EVP_DigestUpdate, (EVP_MD_CTX * c, const void* d, size_t n), (c, d, n), 0)
SLIPWAY_CRYPTO(int, EVP_DigestFinal_ex, (EVP_MD_CTX * c, unsigned char* md, unsigned int* n),
               (c, md, n), 0)

namespace slipway::launcher {

struct Sha256::Ctx {
  EVP_MD_CTX* md = nullptr;
  Ctx() : md(EVP_MD_CTX_new()) { EVP_DigestInit_ex(md, EVP_sha256(), nullptr); }
  ~Ctx() { EVP_MD_CTX_free(md); }
  Ctx(const Ctx&) = delete;
  Ctx& operator=(const Ctx&) = delete;
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {}
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(const void* data, size_t n) { EVP_DigestUpdate(ctx_->md, data, n); }

std::string Sha256::finish() {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx_->md, out, &len);
  EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s = "sha256:";
  for (unsigned int i = 0; i < len; ++i) {
    s += kHex[out[i] >> 4];
    s += kHex[out[i] & 15];
  }
  return s;
}

std::string sha256_digest(std::string_view data) {
  Sha256 h;
  h.update(data.data(), data.size());
  return h.finish();
}

Result<std::string> sha256_file(int fd) {
  Sha256 h;
  std::vector<char> buf(1 << 20);
  off_t off = 0;
  for (;;) {
    ssize_t n = ::pread(fd, buf.data(), buf.size(), off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::from_errno("read", errno);
    if (n == 0) break;
    h.update(buf.data(), static_cast<size_t>(n));
    off += n;
  }
  return h.finish();
}

}  // namespace slipway::launcher
