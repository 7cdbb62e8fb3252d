// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// NcclCommunicator on NCCL 2.x: rank 0's ncclGetUniqueId goes through the store under
// "nccl/id/0", and every rank's GPU under "nccl/gpu/<rank>" in the same round, so that ranks
// sharing a GPU fail with a message naming them (gpu_sharing.h) instead of NCCL's "invalid usage";
// every call checks its status and turns NCCL/CUDA errors into libtrain errors.
#include "libtrain/nccl.h"

#include "libtrain/errors.h"

#ifdef LIBTRAIN_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "gpu_sharing.h"

namespace libtrain {
namespace {

void check_cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw Error(std::string("libtrain: ") + what + ": " + cudaGetErrorString(rc));
}

void check_nccl(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess && rc != ncclInProgress)
    throw PeerError(std::string("libtrain: ") + what + ": " + ncclGetErrorString(rc));
}

ncclDataType_t to_nccl(DataType d) {
  switch (d) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBFloat16: return ncclBfloat16;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kUint8: return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t to_nccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAverage: return ncclAvg;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kBitOr: break;
  }
  throw InvalidArgument("libtrain: NCCL has no bitwise-or reduction");
}

// The calling rank's GPU: this host and the current device's PCI bus id.
RankGpu this_gpu(int rank) {
  RankGpu g;
  g.rank = rank;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  g.host = host;
  int device = 0;
  char bus[64] = {};
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetPCIBusId(bus, sizeof bus, device), "cudaDeviceGetPCIBusId");
  g.bus_id = bus;
  return g;
}

}  // namespace

bool nccl_available() { return true; }

int cuda_device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  Seconds timeout{300};
};

NcclCommunicator::NcclCommunicator(Store& store, int rank, int size, int local_rank, Seconds timeout,
                                   int device)
    : impl_(std::make_unique<Impl>()) {
  impl_->timeout = timeout;
  int devices = cuda_device_count();
  if (devices == 0) throw Error("libtrain: NCCL needs a CUDA device and none is visible");
  check_cuda(cudaSetDevice(device >= 0 ? device : local_rank % devices), "cudaSetDevice");
  ncclUniqueId id;
  if (rank == 0) {
    check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    store.set("nccl/id/0", Bytes(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof(id)));
  }
  store.set("nccl/gpu/" + std::to_string(rank), to_bytes(encode_rank_gpu(this_gpu(rank))));
  store.publish(timeout);
  std::vector<RankGpu> gpus;
  for (int r = 0; r < size; ++r)
    gpus.push_back(decode_rank_gpu(r, to_string(store.get("nccl/gpu/" + std::to_string(r), timeout))));
  if (auto shared = shared_gpu_message(gpus); !shared.empty()) throw InvalidArgument(shared);
  Bytes got = store.get("nccl/id/0", timeout);
  if (got.size() != sizeof(id)) throw Error("libtrain: malformed NCCL unique id in the store");
  std::memcpy(&id, got.data(), sizeof(id));
  check_cuda(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check_nccl(ncclCommInitRank(&impl_->comm, size, id, rank), "ncclCommInitRank");
}

NcclCommunicator::~NcclCommunicator() {
  if (impl_->comm) ncclCommDestroy(impl_->comm);
  if (impl_->stream) cudaStreamDestroy(impl_->stream);
}

void NcclCommunicator::allreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  check_nccl(ncclAllReduce(data, data, count, to_nccl(dtype), to_nccl(op), impl_->comm, impl_->stream),
             "ncclAllReduce");
}

void NcclCommunicator::broadcast(void* data, size_t count, DataType dtype, int root) {
  check_nccl(ncclBroadcast(data, data, count, to_nccl(dtype), root, impl_->comm, impl_->stream), "ncclBroadcast");
}

void NcclCommunicator::allgather(const void* in, void* out, size_t count, DataType dtype) {
  check_nccl(ncclAllGather(in, out, count, to_nccl(dtype), impl_->comm, impl_->stream), "ncclAllGather");
}

// Polls instead of cudaStreamSynchronize so a dead peer becomes an error, not a hang.
void NcclCommunicator::synchronize() {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(impl_->timeout);
  while (true) {
    cudaError_t rc = cudaStreamQuery(impl_->stream);
    if (rc == cudaSuccess) return;
    if (rc != cudaErrorNotReady) check_cuda(rc, "NCCL stream");
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(impl_->comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      ncclCommAbort(impl_->comm);
      impl_->comm = nullptr;
      check_nccl(async, "NCCL collective");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ncclCommAbort(impl_->comm);
      impl_->comm = nullptr;
      throw TimeoutError("libtrain: NCCL collective did not finish within LIBTRAIN_TIMEOUT; a peer died or hung");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace libtrain

#else  // !LIBTRAIN_HAVE_NCCL

namespace libtrain {

bool nccl_available() { return false; }
int cuda_device_count() { return 0; }
struct NcclCommunicator::Impl {};
NcclCommunicator::NcclCommunicator(Store&, int, int, int, Seconds, int) {
  throw Error("libtrain: built without NCCL (CUDA/NCCL not found at configure time)");
}
NcclCommunicator::~NcclCommunicator() = default;
void NcclCommunicator::allreduce(void*, size_t, DataType, ReduceOp) {}
void NcclCommunicator::broadcast(void*, size_t, DataType, int) {}
void NcclCommunicator::allgather(const void*, void*, size_t, DataType) {}
void NcclCommunicator::synchronize() {}

}  // namespace libtrain
#endif
