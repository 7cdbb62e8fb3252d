// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// WorldStore: the world's rendezvous once the world exists (training.cc), so that the bootstrap's
// store is needed only during init(). get() is a broadcast of rank 0's set() value over the
// communicator: every rank must get() the same keys in the same order, as NcclCommunicator's
// unique-id exchange does; a key rank 0 never set arrives empty.
#pragma once

#include <map>
#include <string>

#include "libtrain/communicator.h"
#include "libtrain/errors.h"
#include "libtrain/store.h"

namespace libtrain::detail {

class WorldStore final : public Store {
 public:
  explicit WorldStore(Communicator& comm) : comm_(comm) {}
  void set(const std::string& key, const Bytes& value) override { values_[key] = value; }
  Bytes get(const std::string& key, Seconds /*timeout: the communicator's own applies*/) override {
    Bytes value = comm_.rank() == 0 ? values_[key] : Bytes{};
    int64_t len = static_cast<int64_t>(value.size());
    comm_.broadcast(&len, 1, DataType::kInt64, 0);
    value.resize(static_cast<size_t>(len));
    comm_.broadcast(value.data(), value.size(), DataType::kUint8, 0);
    return value;
  }
  int64_t add(const std::string& key, int64_t) override {
    throw Error("libtrain: the world's store has no add() (key '" + key + "')");
  }

 private:
  Communicator& comm_;
  std::map<std::string, Bytes> values_;
};

}  // namespace libtrain::detail
