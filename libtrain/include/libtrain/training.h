// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The Horovod-style training API: one process-wide world communicator formed by init() from
// whatever launched us (PMIx, RANK/WORLD_SIZE, or nothing), gradient averaging with fusion
// buffers, parameter broadcast, learning-rate scaling with warm-up, rank-0 checkpoints.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "libtrain/bootstrap.h"
#include "libtrain/communicator.h"
#include "libtrain/types.h"

namespace libtrain {

// Idempotent. Reads LIBTRAIN_TIMEOUT, LIBTRAIN_SHM_CHUNK, LIBTRAIN_TIMELINE, LIBTRAIN_BOOTSTRAP.
void init();
// The same over a rendezvous the caller already has (libtrain.torch: torch.distributed's store).
void init(BootstrapInfo boot);
void shutdown();  // waits for outstanding collectives; init() may be called again
bool is_initialized();
int rank();
int size();
int local_rank();
int local_size();
const std::string& bootstrap_method();
Communicator& world();  // throws Error before init()
class NcclCommunicator;
// The world's NCCL communicator (CUDA buffers), created by the first call, which is collective:
// every rank must make it. Throws Error without NCCL in the build or without a CUDA device.
NcclCommunicator& world_nccl();

// A typed view of a caller-owned buffer.
struct TensorRef {
  void* data = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  size_t bytes() const { return count * dtype_size(dtype); }
};

// Averages (or sums) many gradients per step: consecutive tensors of one dtype are packed into
// fusion buffers of up to `fusion_bytes` (LIBTRAIN_FUSION_BYTES, default 64 MiB), each bucket's
// allreduce runs in the background while the next is packed (DistributedOptimizer's engine).
class GradientReducer {
 public:
  explicit GradientReducer(Communicator& comm, size_t fusion_bytes = 0, ReduceOp op = ReduceOp::kAverage);
  void reduce(const std::vector<TensorRef>& tensors);
  size_t fusion_bytes() const { return fusion_bytes_; }

 private:
  struct Bucket;
  Communicator& comm_;
  size_t fusion_bytes_;
  ReduceOp op_;
  std::vector<std::vector<uint8_t>> buffers_;
};

// Every rank ends with root's values.
void broadcast_parameters(const std::vector<TensorRef>& params, int root = 0);

// Linear scaling rule with gradual warm-up (Goyal et al. 2017): from base_lr at epoch 0 to
// base_lr * size at `warmup_epochs`, then constant. `epoch` may be fractional.
double scaled_learning_rate(double base_lr, int size, double epoch, double warmup_epochs);

// Rank 0 writes `tensors` to `path` atomically (temp file + rename); everyone waits for it.
void save_checkpoint(const std::string& path, const std::vector<TensorRef>& tensors);
// Rank 0 reads `path`, every rank receives the values; false (on every rank) if it is absent.
bool load_checkpoint(const std::string& path, const std::vector<TensorRef>& tensors);

// What this build contains: {"bootstrap:pmix", "bootstrap:env", "bootstrap:single",
// "transport:shm", "transport:tcp", "transport:nccl"} minus what was not compiled in.
std::vector<std::string> check_build();

}  // namespace libtrain
