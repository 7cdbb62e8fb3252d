// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Rendezvous key-value stores: how ranks exchange addresses before any link exists.
// The Store interface is what the communicator needs; InMemoryStore serves threads of one
// process (tests), TcpStore serves the RANK/MASTER_ADDR bootstrap, PmixStore serves srun.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <condition_variable>
#include <string>
#include <vector>

namespace libtrain {

using Bytes = std::vector<uint8_t>;
using Seconds = std::chrono::duration<double>;

// Keys a rank writes for others end in "/<writer rank>" (PMIx can only read a key from the rank
// that put it). Values are opaque bytes. Every blocking call throws TimeoutError after `timeout`.
class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Waits until `key` exists, then returns its value.
  virtual Bytes get(const std::string& key, Seconds timeout) = 0;
  // Atomically adds `delta` to the integer at `key` (0 when absent) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Makes every rank's earlier set() visible to every rank's later get(). Collective for stores
  // that need it (PMIx fence); a no-op for stores that publish at once.
  virtual void publish(Seconds /*timeout*/) {}
  // Every rank has connected: a store that listens for ranks may stop (requests go on).
  virtual void seal() {}
  // Waits until every key exists.
  void wait(const std::vector<std::string>& keys, Seconds timeout);
  // Barrier over `size` ranks built on add() + get(); `name` must be fresh for each use.
  void barrier(const std::string& name, int size, Seconds timeout);
};

// Threads of one process share one instance.
class InMemoryStore final : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Seconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes> data_;
};

// Namespaces every key of an underlying store, so several communicators can share it.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> base, std::string prefix)
      : base_(std::move(base)), prefix_(std::move(prefix) + "/") {}
  void set(const std::string& key, const Bytes& value) override { base_->set(prefix_ + key, value); }
  Bytes get(const std::string& key, Seconds t) override { return base_->get(prefix_ + key, t); }
  int64_t add(const std::string& key, int64_t d) override { return base_->add(prefix_ + key, d); }
  void publish(Seconds timeout) override { base_->publish(timeout); }
  void seal() override { base_->seal(); }

 private:
  std::shared_ptr<Store> base_;
  std::string prefix_;
};

Bytes to_bytes(const std::string& s);
std::string to_string(const Bytes& b);

}  // namespace libtrain
