// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// NcclCommunicator: collectives on GPU buffers through NCCL, built when CUDA and NCCL are found
// (LIBTRAIN_HAVE_NCCL). The NCCL unique id travels through the same Store as everything else.
// Collectives are stream-ordered (*_async): they wait on the caller's stream through events, and a
// thread of the communicator's own watches their completion events and ncclCommGetAsyncError, and
// aborts the communicator on an error or past the timeout. The CUDA and NCCL calls are behind
// src/device.h (device_nccl.cc).
// NCCL's own errors say only that a peer failed ("remote process exited") or nothing at all (a
// hang, ended by the timeout); given the CPU communicator over the same ranks (`peers`: the world's
// does this), a failed NCCL call asks it who: a barrier there fails naming the rank, and its node,
// that died or stalled (docs/errors.md, "Who failed"), and that is the error thrown.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "libtrain/store.h"
#include "libtrain/types.h"

namespace libtrain {

class Communicator;

bool nccl_available();     // compiled in
int cuda_device_count();   // 0 without a driver or GPU (never throws)

// A CUDA stream (cudaStream_t) as libtrain's headers take it, without CUDA's; nullptr is the
// default stream.
using DeviceStream = void*;

// The completion of collectives enqueued with the *_async calls (or of a group of them). Copies
// share it. Nothing blocks the host but synchronize(). A default-made one is complete.
class NcclWork {
 public:
  NcclWork();
  ~NcclWork();
  NcclWork(const NcclWork&);
  NcclWork& operator=(const NcclWork&);
  // STREAM waits, on the device, until the work is done: later work queued on it sees the
  // results. Throws if the communicator failed already.
  void wait(DeviceStream stream) const;
  // Whether the work is done; throws the communicator's error (PeerError, TimeoutError, naming
  // who failed where it can) if it failed.
  bool done() const;
  // Blocks the host until done, or throws as done() does; a dead or stalled peer ends it within
  // the communicator's timeout.
  void synchronize() const;

  struct State;

 private:
  friend class NcclCommunicator;
  explicit NcclWork(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

class NcclCommunicator {
 public:
  // Collective. `device` < 0 picks local_rank % device count. `peers`, if given, must outlive this.
  // Several communicators (sub-groups, ranks 0..size-1 each) work side by side, each on its own
  // stream; made over one store, each needs a PrefixStore of its own.
  NcclCommunicator(Store& store, int rank, int size, int local_rank, Seconds timeout, int device = -1,
                   Communicator* peers = nullptr);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // Stream-ordered: each waits (on the device) for the work queued on `caller` before it, runs on
  // the communicator's own stream, and returns its completion; the host is never blocked. A
  // failure (NCCL's error, or no completion within the timeout) is seen by the communicator's
  // completion thread, which aborts it; the work's done(), synchronize() and the next call then
  // throw, naming who failed where the CPU communicator can (docs/errors.md, "Who failed").
  NcclWork allreduce_async(const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                           DeviceStream caller);
  NcclWork broadcast_async(const void* in, void* out, size_t count, DataType dtype, int root,
                           DeviceStream caller);
  // COUNT elements from each rank; OUT holds size() x COUNT.
  NcclWork allgather_async(const void* in, void* out, size_t count, DataType dtype, DeviceStream caller);
  // IN holds size() x COUNT elements; OUT gets the reduction of this rank's COUNT of them.
  NcclWork reduce_scatter_async(const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                                DeviceStream caller);
  // IN holds size() x COUNT elements, the j-th COUNT for rank j; OUT gets rank i's to this one at i.
  NcclWork alltoall_async(const void* in, void* out, size_t count, DataType dtype, DeviceStream caller);
  NcclWork send_async(const void* in, size_t count, DataType dtype, int peer, DeviceStream caller);
  NcclWork recv_async(void* out, size_t count, DataType dtype, int peer, DeviceStream caller);
  // The *_async calls CALLS makes on this communicator, launched as one NCCL group (their sends
  // and receives never wait for each other); every one of them and the one returned here
  // complete together. Groups do not nest.
  NcclWork group(DeviceStream caller, const std::function<void()>& calls);

  // The first API: device buffers, enqueued on the communicator's stream without waiting for any
  // other; call synchronize() (or order your own work) before reading results.
  void allreduce(void* data, size_t count, DataType dtype, ReduceOp op);
  void broadcast(void* data, size_t count, DataType dtype, int root);
  void allgather(const void* in, void* out, size_t count, DataType dtype);
  // Blocks the host until everything enqueued is done; throws as NcclWork::synchronize().
  void synchronize();

  int rank() const;
  int size() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace libtrain
