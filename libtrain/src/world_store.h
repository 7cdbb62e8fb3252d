// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// WorldStore: the world's rendezvous once the world exists (training.cc), so that the bootstrap's
// store is needed only during init(). publish() is collective: every rank's set() values travel
// to every rank over the communicator (two allgathers), and get() then reads them; where several
// ranks set one key, the lowest rank's value counts; a key nobody set arrives empty. (Before,
// get() broadcast rank 0's values only, and NcclCommunicator's per-rank GPU records arrived
// empty from every other rank: three ranks or more "shared" one GPU.)
#pragma once

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "libtrain/communicator.h"
#include "libtrain/errors.h"
#include "libtrain/store.h"

namespace libtrain::detail {

class WorldStore final : public Store {
 public:
  explicit WorldStore(Communicator& comm) : comm_(comm) {}
  void set(const std::string& key, const Bytes& value) override { mine_[key] = value; }
  // The value published for `key`: call publish() first (every rank, after its set()s).
  Bytes get(const std::string& key, Seconds /*timeout: the communicator's own applies*/) override {
    auto it = all_.find(key);
    return it == all_.end() ? Bytes{} : it->second;
  }
  int64_t add(const std::string& key, int64_t) override {
    throw Error("libtrain: the world's store has no add() (key '" + key + "')");
  }
  void publish(Seconds /*timeout: the communicator's own applies*/) override {
    Bytes blob = encode(mine_);
    int64_t len = static_cast<int64_t>(blob.size());
    size_t n = static_cast<size_t>(comm_.size());
    std::vector<int64_t> lens(n);
    comm_.allgather(&len, lens.data(), 1, DataType::kInt64);
    size_t widest = static_cast<size_t>(*std::max_element(lens.begin(), lens.end()));
    blob.resize(widest);
    Bytes blobs(widest * n);
    comm_.allgather(blob.data(), blobs.data(), widest, DataType::kUint8);
    for (size_t r = 0; r < n; ++r) {
      const uint8_t* p = blobs.data() + r * widest;
      decode(p, p + lens[r], all_);  // emplace: a lower rank's value stays
    }
  }

 private:
  // [u32 key length][key][u64 value length][value]...
  static Bytes encode(const std::map<std::string, Bytes>& values) {
    Bytes out;
    auto put = [&out](const void* p, size_t len) {
      const auto* b = static_cast<const uint8_t*>(p);
      out.insert(out.end(), b, b + len);
    };
    for (const auto& [key, value] : values) {
      uint32_t klen = static_cast<uint32_t>(key.size());
      uint64_t vlen = value.size();
      put(&klen, sizeof klen);
      put(key.data(), key.size());
      put(&vlen, sizeof vlen);
      put(value.data(), value.size());
    }
    return out;
  }
  static void decode(const uint8_t* p, const uint8_t* end, std::map<std::string, Bytes>& into) {
    while (p < end) {
      uint32_t klen;
      uint64_t vlen;
      if (static_cast<size_t>(end - p) < sizeof klen) break;
      std::memcpy(&klen, p, sizeof klen);
      p += sizeof klen;
      if (static_cast<size_t>(end - p) < klen + sizeof vlen) break;
      std::string key(reinterpret_cast<const char*>(p), klen);
      p += klen;
      std::memcpy(&vlen, p, sizeof vlen);
      p += sizeof vlen;
      if (static_cast<uint64_t>(end - p) < vlen) break;
      into.emplace(std::move(key), Bytes(p, p + vlen));
      p += vlen;
    }
  }

  Communicator& comm_;
  std::map<std::string, Bytes> mine_;  // this rank's set()s
  std::map<std::string, Bytes> all_;   // every rank's, as of the last publish()
};

}  // namespace libtrain::detail
