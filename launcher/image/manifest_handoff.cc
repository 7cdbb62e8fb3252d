// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Base64 encoding of the manifest hand-off (see manifest_handoff.h).
#include "image/manifest_handoff.h"

#include <array>
#include <cstdint>

namespace slipway::launcher {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// 0..63 for alphabet characters, -1 otherwise.
constexpr std::array<int, 256> make_decode_table() {
  std::array<int, 256> t{};
  for (auto& v : t) v = -1;
  for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(kAlphabet[i])] = i;
  return t;
}
constexpr auto kDecode = make_decode_table();

}  // namespace

std::string encode_manifest_handoff(std::string_view body) {
  if (body.empty() || body.size() > kMaxHandoffBytes) return {};
  std::string out;
  out.reserve((body.size() + 2) / 3 * 4);
  for (size_t i = 0; i < body.size(); i += 3) {
    uint32_t n = static_cast<uint32_t>(static_cast<unsigned char>(body[i])) << 16;
    if (i + 1 < body.size()) n |= static_cast<uint32_t>(static_cast<unsigned char>(body[i + 1])) << 8;
    if (i + 2 < body.size()) n |= static_cast<unsigned char>(body[i + 2]);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < body.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < body.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

Result<std::string> decode_manifest_handoff(std::string_view text) {
  const Status bad = Status::error(std::string(kManifestHandoffEnv) + " is not valid base64", EINVAL);
  if (text.size() % 4 != 0) return bad;
  if (text.size() / 4 * 3 > kMaxHandoffBytes + 2) return bad;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      char c = text[i + static_cast<size_t>(k)];
      bool last_group = i + 4 == text.size();
      if (c == '=' && last_group && k >= 2 && (k == 3 || text[i + 3] == '=')) {
        v[k] = 0;
        ++pad;
        continue;
      }
      if (pad) return bad;  // data after padding
      v[k] = kDecode[static_cast<unsigned char>(c)];
      if (v[k] < 0) return bad;
    }
    uint32_t n = static_cast<uint32_t>(v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3]);
    out += static_cast<char>(n >> 16);
    if (pad < 2) out += static_cast<char>((n >> 8) & 255);
    if (pad < 1) out += static_cast<char>(n & 255);
  }
  return out;
}

}  // namespace slipway::launcher
