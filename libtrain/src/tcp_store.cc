// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// TcpStore: a tiny request/response protocol over TCP. Request: op(1) keylen(4) key
// payloadlen(4) payload. Response: status(1) len(4) value. get() polls the server (the server
// never blocks on a missing key), so one slow key cannot stall other ranks' requests. Lengths
// are bounded (kMaxKeyBytes, kMaxValueBytes) before anything is allocated for them.
#include "libtrain/tcp_store.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "libtrain/errors.h"
#include "socket.h"

namespace libtrain {
namespace {

enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3 };
constexpr auto kIoTimeout = std::chrono::seconds(30);
// Anything on the network can reach the server's port, and a client trusts whatever answers it:
// a length is checked before it is allocated, or four garbage bytes cost 4 GiB (found by
// tests/fuzz/fuzz_libtrain_wire). Keys are short names; values are addresses and ids, a few MiB
// at most (the unit tests use 3 MiB).
constexpr uint32_t kMaxKeyBytes = 64 << 10;
constexpr uint32_t kMaxValueBytes = 64 << 20;

void put_u32(Bytes& b, uint32_t v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b.insert(b.end(), p, p + 4);
}

}  // namespace

class TcpStore::Server {
 public:
  explicit Server(int& port) : listen_(detail::listen_tcp(port)), wake_(::eventfd(0, EFD_CLOEXEC)) {
    LIBTRAIN_SYS(wake_.get(), "eventfd");
    thread_ = std::thread([this] { loop(); });
  }
  // Stops listening, then serves the connected clients until they hang up (kDrain at most): the
  // clients close first, so no TIME_WAIT socket is left on the port, which is free for another
  // server (torch.distributed's env:// store) when this returns.
  ~Server() {
    quit_ = true;
    wake();
    thread_.join();
  }
  // Returns once the listener is closed: a connection attempt after this is refused.
  void stop_listening() {
    std::unique_lock<std::mutex> lock(mu_);
    sealed_ = true;
    wake();
    closed_cv_.wait(lock, [this] { return !listen_.valid(); });
  }

 private:
  static constexpr auto kDrain = std::chrono::seconds(2);

  void wake() {
    uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof(one));
  }

  void loop() {
    std::optional<detail::Clock::time_point> drain_until;
    while (!drain_until || (!clients_.empty() && detail::Clock::now() < *drain_until)) {
      // poll() skips a negative fd: once the listener is closed only the clients are watched.
      std::vector<pollfd> fds{{wake_.get(), POLLIN, 0}, {listen_.get(), POLLIN, 0}};
      for (auto& c : clients_) fds.push_back({c.get(), POLLIN, 0});
      if (::poll(fds.data(), fds.size(), drain_until ? detail::ms_left(*drain_until) : -1) < 0) continue;
      if (fds[0].revents) {
        uint64_t count;
        (void)!::read(wake_.get(), &count, sizeof(count));
        if (sealed_ || quit_) {
          std::lock_guard<std::mutex> lock(mu_);
          listen_.reset();
          closed_cv_.notify_all();
        }
        if (quit_ && !drain_until) drain_until = detail::Clock::now() + kDrain;
        continue;  // fds[1] may name a closed descriptor now
      }
      if (fds[1].revents & POLLIN) accept_one();
      std::vector<size_t> dead;
      for (size_t i = 2; i < fds.size(); ++i)
        if (fds[i].revents && !serve_one(clients_[i - 2].get())) dead.push_back(i - 2);
      for (auto it = dead.rbegin(); it != dead.rend(); ++it) clients_.erase(clients_.begin() + static_cast<long>(*it));
    }
  }

  void accept_one() {
    try {
      clients_.push_back(detail::accept_tcp(listen_.get(), detail::Clock::now()));
    } catch (const Error&) {  // a client that went away between poll and accept
    }
  }

  // Returns false when the client is gone (or spoke garbage); the server itself never throws.
  bool serve_one(int fd) {
    try {
      auto deadline = detail::Clock::now() + kIoTimeout;
      uint8_t op;
      uint32_t klen, plen;
      detail::recv_all(fd, &op, 1, deadline, "store client");
      detail::recv_all(fd, &klen, 4, deadline, "store client");
      if (klen > kMaxKeyBytes) return false;  // not a libtrain client: hang up
      std::string key(klen, '\0');
      detail::recv_all(fd, key.data(), klen, deadline, "store client");
      detail::recv_all(fd, &plen, 4, deadline, "store client");
      if (plen > kMaxValueBytes) return false;
      Bytes payload(plen);
      detail::recv_all(fd, payload.data(), plen, deadline, "store client");
      Bytes reply = handle(op, key, payload);
      detail::send_all(fd, reply.data(), reply.size(), deadline, "store client");
      return true;
    } catch (const Error&) {
      return false;
    }
  }

  Bytes handle(uint8_t op, const std::string& key, const Bytes& payload) {
    Bytes reply{1};
    const Bytes* value = nullptr;
    int64_t sum = 0;
    if (op == kSet) {
      data_[key] = payload;
    } else if (op == kGet) {
      auto it = data_.find(key);
      if (it == data_.end()) reply[0] = 0;
      else value = &it->second;
    } else if (op == kAdd) {
      Bytes& slot = data_[key];
      int64_t delta = 0;
      if (slot.size() == 8) std::memcpy(&sum, slot.data(), 8);
      if (payload.size() == 8) std::memcpy(&delta, payload.data(), 8);
      // Two's complement wrap-around, as unsigned: signed overflow is undefined, and a peer
      // chooses both numbers (found by fuzzing).
      sum = static_cast<int64_t>(static_cast<uint64_t>(sum) + static_cast<uint64_t>(delta));
      slot.assign(reinterpret_cast<uint8_t*>(&sum), reinterpret_cast<uint8_t*>(&sum) + 8);
      value = &slot;
    }
    put_u32(reply, value ? static_cast<uint32_t>(value->size()) : 0);
    if (value) reply.insert(reply.end(), value->begin(), value->end());
    return reply;
  }

  detail::Fd listen_;
  detail::Fd wake_;
  std::atomic<bool> quit_{false}, sealed_{false};
  std::mutex mu_;  // guards closing listen_ (the server thread alone uses it otherwise)
  std::condition_variable closed_cv_;
  std::vector<detail::Fd> clients_;
  std::map<std::string, Bytes> data_;
  std::thread thread_;
};

TcpStore::TcpStore(const std::string& host, int port, bool serve, Seconds timeout)
    : port_(port), timeout_(timeout), where_(host + ":" + std::to_string(port)) {
  if (serve) server_ = std::make_unique<Server>(port_);
  auto deadline = detail::Clock::now() + std::chrono::duration_cast<detail::Clock::duration>(timeout);
  fd_ = detail::connect_tcp(serve ? "127.0.0.1" : host, port_, deadline).release();
}

void TcpStore::seal() {
  if (server_) server_->stop_listening();
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
}

std::optional<Bytes> TcpStore::request(uint8_t op, const std::string& key, const Bytes& payload) {
  if (key.size() > kMaxKeyBytes || payload.size() > kMaxValueBytes)
    throw InvalidArgument("libtrain: store key '" + key.substr(0, 64) + "' or its value is too long (" +
                          std::to_string(key.size()) + " and " + std::to_string(payload.size()) +
                          " bytes; at most " + std::to_string(kMaxKeyBytes) + " and " +
                          std::to_string(kMaxValueBytes) + ")");
  Bytes msg{op};
  put_u32(msg, static_cast<uint32_t>(key.size()));
  msg.insert(msg.end(), key.begin(), key.end());
  put_u32(msg, static_cast<uint32_t>(payload.size()));
  msg.insert(msg.end(), payload.begin(), payload.end());
  std::lock_guard<std::mutex> lock(mu_);
  auto deadline = detail::Clock::now() + kIoTimeout;
  std::string peer = "store server " + where_;
  detail::send_all(fd_, msg.data(), msg.size(), deadline, peer);
  uint8_t status;
  uint32_t len;
  detail::recv_all(fd_, &status, 1, deadline, peer);
  detail::recv_all(fd_, &len, 4, deadline, peer);
  if (len > kMaxValueBytes)
    throw PeerError("libtrain: " + peer + " answered with a " + std::to_string(len) +
                    "-byte value (at most " + std::to_string(kMaxValueBytes) +
                    "); is MASTER_ADDR:MASTER_PORT a libtrain store?");
  Bytes value(len);
  detail::recv_all(fd_, value.data(), len, deadline, peer);
  if (!status) return std::nullopt;
  return value;
}

void TcpStore::set(const std::string& key, const Bytes& value) { request(kSet, key, value); }

Bytes TcpStore::get(const std::string& key, Seconds timeout) {
  auto deadline = detail::Clock::now() + std::chrono::duration_cast<detail::Clock::duration>(timeout);
  for (int delay_us = 50;; delay_us = std::min(delay_us * 2, 20000)) {
    if (auto value = request(kGet, key, {})) return *value;
    if (detail::Clock::now() >= deadline)
      throw TimeoutError("libtrain: store key '" + key + "' not set on " + where_ + " within " +
                         std::to_string(timeout.count()) + " s; a peer did not start or died");
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
  }
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  Bytes payload(8);
  std::memcpy(payload.data(), &delta, 8);
  Bytes v = request(kAdd, key, payload).value_or(Bytes{});
  // The server always answers an add with the 8-byte sum; anything else is not our server (and
  // an empty answer's data() is null, which memcpy must not get: found by fuzzing).
  if (v.size() != 8)
    throw PeerError("libtrain: store server " + where_ + " answered an add of '" + key + "' with " +
                    std::to_string(v.size()) + " bytes instead of 8; is it a libtrain store?");
  int64_t out = 0;
  std::memcpy(&out, v.data(), 8);
  return out;
}

}  // namespace libtrain
