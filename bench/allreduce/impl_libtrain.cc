// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Descriptor: libtrain's Communicator (shared memory in the node, TCP ring across nodes).
// Rendezvous as a training job does it: through PMIx when the launcher provides it (srun
// --mpi=pmix, mpirun; PMIx_Init is reference-counted, so it shares OpenMPI's client), else a
// TcpStore served by rank 0. LIBTRAIN_* variables apply as usual.
#include <mpi.h>

#include "harness.h"
#include "libtrain/bootstrap.h"
#include "libtrain/communicator.h"
#include "libtrain/tcp_store.h"

namespace bench {
namespace {

class LibtrainImpl final : public Impl {
 public:
  explicit LibtrainImpl(const World& w) {
    auto opts = libtrain::CommunicatorOptions::from_env();
    opts.prefix = "bench";
    if (libtrain::detect_bootstrap() == "pmix") {
      auto boot = libtrain::bootstrap_pmix();
      comm_ = std::make_unique<libtrain::Communicator>(boot.store, boot.rank, boot.size, boot.node, opts);
      store_ = boot.store;
      return;
    }
    int port = 0;
    std::shared_ptr<libtrain::TcpStore> store;
    if (w.rank == 0) {
      store = std::make_shared<libtrain::TcpStore>("", 0, true, libtrain::Seconds(60));
      port = store->port();
    }
    MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (w.rank != 0) store = std::make_shared<libtrain::TcpStore>(w.master_host, port, false, libtrain::Seconds(60));
    comm_ = std::make_unique<libtrain::Communicator>(store, w.rank, w.size, libtrain::node_name(), opts);
    store_ = store;
  }
  std::string name() const override { return "libtrain"; }
  void allreduce(float* data, size_t count) override {
    comm_->allreduce(data, count, libtrain::DataType::kFloat32, libtrain::ReduceOp::kSum);
  }

 private:
  std::shared_ptr<libtrain::Store> store_;
  std::unique_ptr<libtrain::Communicator> comm_;
};

}  // namespace

std::unique_ptr<Impl> make_libtrain(const World& w) { return std::make_unique<LibtrainImpl>(w); }

}  // namespace bench
