// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// NcclCommunicator on NCCL 2.x: rank 0's ncclGetUniqueId goes through the store under
// "nccl/id/0", and every rank's GPU under "nccl/gpu/<rank>" in the same round, so that ranks
// sharing a GPU fail with a message naming them (gpu_sharing.h) instead of NCCL's "invalid usage";
// every call checks its status and turns NCCL/CUDA errors into libtrain errors, naming the culprit
// when the CPU communicator over the same ranks can (nccl.h).
#include "libtrain/nccl.h"

#include "libtrain/communicator.h"
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

std::string nccl_error(ncclResult_t rc, const char* what) {
  return std::string("libtrain: ") + what + ": " + ncclGetErrorString(rc);
}

void check_nccl(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess && rc != ncclInProgress) throw PeerError(nccl_error(rc, what));
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
  Communicator* peers = nullptr;
  std::string broken;  // why the communicator was aborted

  // Aborts the communicator and throws E(what), or, when the CPU communicator names who failed
  // (its barrier throws PeerError or TimeoutError), that error with NCCL's words after it.
  template <typename E>
  [[noreturn]] void fail(const std::string& what) {
    if (comm) ncclCommAbort(comm);
    comm = nullptr;
    broken = what;
    if (peers) {
      std::string nccl_said = " (NCCL: " + what.substr(what.find(": ") + 2) + ")";
      try {
        peers->barrier();
      } catch (const PeerError& e) {
        broken = e.what() + nccl_said;
        throw PeerError(broken);
      } catch (const TimeoutError& e) {
        broken = e.what() + nccl_said;
        throw TimeoutError(broken);
      } catch (const std::exception&) {
      }
    }
    throw E(what);
  }

  // A collective's status: an error aborts (fail) and names the culprit if it can.
  void check(ncclResult_t rc, const char* what) {
    if (rc != ncclSuccess && rc != ncclInProgress) fail<PeerError>(nccl_error(rc, what));
  }

  ncclComm_t live() const {
    if (!comm)
      throw PeerError("libtrain: the NCCL communicator failed earlier (" + broken + "); create a new one");
    return comm;
  }
};

NcclCommunicator::NcclCommunicator(Store& store, int rank, int size, int local_rank, Seconds timeout,
                                   int device, Communicator* peers)
    : impl_(std::make_unique<Impl>()) {
  impl_->timeout = timeout;
  impl_->peers = peers;
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
  impl_->check(ncclAllReduce(data, data, count, to_nccl(dtype), to_nccl(op), impl_->live(), impl_->stream),
               "ncclAllReduce");
}

void NcclCommunicator::broadcast(void* data, size_t count, DataType dtype, int root) {
  impl_->check(ncclBroadcast(data, data, count, to_nccl(dtype), root, impl_->live(), impl_->stream),
               "ncclBroadcast");
}

void NcclCommunicator::allgather(const void* in, void* out, size_t count, DataType dtype) {
  impl_->check(ncclAllGather(in, out, count, to_nccl(dtype), impl_->live(), impl_->stream), "ncclAllGather");
}

// Polls instead of cudaStreamSynchronize so a dead peer becomes an error, not a hang.
void NcclCommunicator::synchronize() {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(impl_->timeout);
  ncclComm_t comm = impl_->live();
  while (true) {
    cudaError_t rc = cudaStreamQuery(impl_->stream);
    if (rc == cudaSuccess) return;
    if (rc != cudaErrorNotReady) check_cuda(rc, "NCCL stream");
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    // A peer that finished its part and then exited is an error for the next collective, not
    // for this one if it completed meanwhile.
    if (async != ncclSuccess && cudaStreamQuery(impl_->stream) == cudaSuccess) return;
    impl_->check(async, "NCCL collective");
    if (std::chrono::steady_clock::now() >= deadline)
      impl_->fail<TimeoutError>("libtrain: NCCL collective did not finish within LIBTRAIN_TIMEOUT; a peer died or hung");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace libtrain

#else  // !LIBTRAIN_HAVE_NCCL

namespace libtrain {

bool nccl_available() { return false; }
int cuda_device_count() { return 0; }
struct NcclCommunicator::Impl {};
NcclCommunicator::NcclCommunicator(Store&, int, int, int, Seconds, int, Communicator*) {
  throw Error("libtrain: built without NCCL (CUDA/NCCL not found at configure time)");
}
NcclCommunicator::~NcclCommunicator() = default;
void NcclCommunicator::allreduce(void*, size_t, DataType, ReduceOp) {}
void NcclCommunicator::broadcast(void*, size_t, DataType, int) {}
void NcclCommunicator::allgather(const void*, void*, size_t, DataType) {}
void NcclCommunicator::synchronize() {}

}  // namespace libtrain
#endif
