// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// PmixStore: the rendezvous under `srun --mpi=pmix` (or any PMIx server, e.g. OpenMPI's mpirun).
// set() is PMIx_Put + PMIx_Commit, publish() is PMIx_Fence with data collection, get() is
// PMIx_Get from the rank named by the key's "/<rank>" suffix. add() is not supported by PMIx.
#pragma once

#include <memory>
#include <string>

#include "libtrain/store.h"

namespace libtrain {

class PmixStore final : public Store {
 public:
  // PMIx_Init; throws Error when no PMIx server is reachable. Finalizes on destruction.
  PmixStore();
  ~PmixStore() override;
  PmixStore(const PmixStore&) = delete;
  PmixStore& operator=(const PmixStore&) = delete;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Seconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;  // throws InvalidArgument
  void publish(Seconds timeout) override;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  const std::string& node() const { return node_; }
  const std::string& nspace() const { return nspace_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string node_, nspace_;
};

// True when this build can use PMIx (pkg-config `pmix` was found).
bool pmix_available();

}  // namespace libtrain
