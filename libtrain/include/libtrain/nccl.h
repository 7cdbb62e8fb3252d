// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// NcclCommunicator: collectives on GPU buffers through NCCL, built when CUDA and NCCL are found
// (LIBTRAIN_HAVE_NCCL). The NCCL unique id travels through the same Store as everything else.
// Waits poll the stream and ncclCommGetAsyncError, and abort the communicator past the timeout.
// NCCL's own errors say only that a peer failed ("remote process exited") or nothing at all (a
// hang, ended by the timeout); given the CPU communicator over the same ranks (`peers`: the world's
// does this), a failed NCCL call asks it who: a barrier there fails naming the rank, and its node,
// that died or stalled (docs/errors.md, "Who failed"), and that is the error thrown.
#pragma once

#include <cstddef>
#include <memory>

#include "libtrain/store.h"
#include "libtrain/types.h"

namespace libtrain {

class Communicator;

bool nccl_available();     // compiled in
int cuda_device_count();   // 0 without a driver or GPU (never throws)

class NcclCommunicator {
 public:
  // Collective. `device` < 0 picks local_rank % device count. `peers`, if given, must outlive this.
  NcclCommunicator(Store& store, int rank, int size, int local_rank, Seconds timeout, int device = -1,
                   Communicator* peers = nullptr);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // Device buffers, enqueued on the communicator's stream; call synchronize() (or pass your own
  // ordering) before reading results on the host.
  void allreduce(void* data, size_t count, DataType dtype, ReduceOp op);
  void broadcast(void* data, size_t count, DataType dtype, int root);
  void allgather(const void* in, void* out, size_t count, DataType dtype);
  void synchronize();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace libtrain
