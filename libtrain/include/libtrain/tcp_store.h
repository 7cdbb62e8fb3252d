// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// TcpStore: the rendezvous for the RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT bootstrap.
// Rank 0 serves the key-value map from a background thread; every rank (0 too) is a client.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "libtrain/store.h"

namespace libtrain {

class TcpStore final : public Store {
 public:
  // `serve`: listen on `port` and serve (rank 0). Connecting waits up to `timeout` for the server.
  TcpStore(const std::string& host, int port, bool serve, Seconds timeout);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Seconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  // Rank 0 stops listening (connected clients are still served). Destroying the store then
  // frees the port at once: the server waits for the clients to hang up first.
  void seal() override;
  int port() const { return port_; }

 private:
  class Server;
  // The value, or nullopt when get() asked for a key not set yet.
  std::optional<Bytes> request(uint8_t op, const std::string& key, const Bytes& payload);

  std::unique_ptr<Server> server_;
  int port_;
  int fd_ = -1;
  Seconds timeout_;
  std::mutex mu_;
  std::string where_;
};

}  // namespace libtrain
