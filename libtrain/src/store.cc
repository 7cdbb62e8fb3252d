// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// InMemoryStore and the helpers every Store shares (wait, barrier, byte conversions).
#include "libtrain/store.h"

#include <cstring>

#include "libtrain/errors.h"

namespace libtrain {

Bytes to_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string to_string(const Bytes& b) { return std::string(b.begin(), b.end()); }

void Store::wait(const std::vector<std::string>& keys, Seconds timeout) {
  for (const auto& key : keys) get(key, timeout);
}

void Store::barrier(const std::string& name, int size, Seconds timeout) {
  if (add(name + "/arrived", 1) == size) set(name + "/done/0", to_bytes("1"));
  get(name + "/done/0", timeout);
}

void InMemoryStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
}

Bytes InMemoryStore::get(const std::string& key, Seconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
  bool found = cv_.wait_until(lock, deadline, [&] { return data_.count(key) != 0; });
  if (!found)
    throw TimeoutError("libtrain: store key '" + key + "' did not appear within " +
                       std::to_string(timeout.count()) + " s; a peer did not start or died");
  return data_[key];
}

int64_t InMemoryStore::add(const std::string& key, int64_t delta) {
  int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Bytes& slot = data_[key];
    if (slot.size() == sizeof(value)) std::memcpy(&value, slot.data(), sizeof(value));
    value += delta;
    slot.resize(sizeof(value));
    std::memcpy(slot.data(), &value, sizeof(value));
  }
  cv_.notify_all();
  return value;
}

}  // namespace libtrain
