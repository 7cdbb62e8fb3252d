// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The device seam (device.h) on CUDA's runtime and NCCL 2.x: the only file of libtrain that calls
// either.
#include "device.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>

#include "libtrain/errors.h"

namespace libtrain::device {
namespace {

static_assert(sizeof(ncclUniqueId) == sizeof(Id), "ncclUniqueId is 128 bytes");

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw Error(std::string("libtrain: ") + what + ": " + cudaGetErrorString(rc));
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

ncclComm_t nc(Comm c) { return static_cast<ncclComm_t>(c); }
cudaStream_t cs(Stream s) { return static_cast<cudaStream_t>(s); }

}  // namespace

int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}
void set_device(int device) { check(cudaSetDevice(device), "cudaSetDevice"); }
int current_device() {
  int d = 0;
  check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}
std::string pci_bus_id(int device) {
  char bus[64] = {};
  check(cudaDeviceGetPCIBusId(bus, sizeof bus, device), "cudaDeviceGetPCIBusId");
  return bus;
}
Stream new_stream() {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  return s;
}
void free_stream(Stream s) {
  if (s) cudaStreamDestroy(cs(s));
}
bool stream_idle(Stream s) {
  cudaError_t rc = cudaStreamQuery(cs(s));
  if (rc == cudaErrorNotReady) return false;
  check(rc, "NCCL stream");
  return true;
}
Event new_event() {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  return e;
}
void free_event(Event e) {
  if (e) cudaEventDestroy(static_cast<cudaEvent_t>(e));
}
void record(Event e, Stream s) { check(cudaEventRecord(static_cast<cudaEvent_t>(e), cs(s)), "cudaEventRecord"); }
bool event_done(Event e) {
  cudaError_t rc = cudaEventQuery(static_cast<cudaEvent_t>(e));
  if (rc == cudaErrorNotReady) return false;
  check(rc, "cudaEventQuery");
  return true;
}
void wait_event(Stream s, Event e) {
  check(cudaStreamWaitEvent(cs(s), static_cast<cudaEvent_t>(e), 0), "cudaStreamWaitEvent");
}

bool ok(Status st) { return st == ncclSuccess || st == ncclInProgress; }
std::string words(Status st) { return ncclGetErrorString(static_cast<ncclResult_t>(st)); }
Status unique_id(Id* id) {
  ncclUniqueId u;
  ncclResult_t rc = ncclGetUniqueId(&u);
  std::memcpy(id->data(), &u, sizeof u);
  return rc;
}
Status comm_init(Comm* comm, int size, const Id& id, int rank) {
  ncclUniqueId u;
  std::memcpy(&u, id.data(), sizeof u);
  ncclComm_t c = nullptr;
  ncclResult_t rc = ncclCommInitRank(&c, size, u, rank);
  *comm = c;
  return rc;
}
void comm_destroy(Comm comm) {
  if (comm) ncclCommDestroy(nc(comm));
}
void comm_abort(Comm comm) {
  if (comm) ncclCommAbort(nc(comm));
}
Status comm_async_error(Comm comm) {
  ncclResult_t async = ncclSuccess;
  ncclCommGetAsyncError(nc(comm), &async);
  return async;
}
Status group_start() { return ncclGroupStart(); }
Status group_end() { return ncclGroupEnd(); }
Status allreduce(const void* in, void* out, size_t count, DataType dtype, ReduceOp op, Comm comm, Stream s) {
  return ncclAllReduce(in, out, count, to_nccl(dtype), to_nccl(op), nc(comm), cs(s));
}
Status broadcast(const void* in, void* out, size_t count, DataType dtype, int root, Comm comm, Stream s) {
  return ncclBroadcast(in, out, count, to_nccl(dtype), root, nc(comm), cs(s));
}
Status allgather(const void* in, void* out, size_t count, DataType dtype, Comm comm, Stream s) {
  return ncclAllGather(in, out, count, to_nccl(dtype), nc(comm), cs(s));
}
Status reduce_scatter(const void* in, void* out, size_t count, DataType dtype, ReduceOp op, Comm comm, Stream s) {
  return ncclReduceScatter(in, out, count, to_nccl(dtype), to_nccl(op), nc(comm), cs(s));
}
Status alltoall(const void* in, void* out, size_t count, DataType dtype, Comm comm, Stream s) {
  return ncclAlltoAll(in, out, count, to_nccl(dtype), nc(comm), cs(s));
}
Status send(const void* in, size_t count, DataType dtype, int peer, Comm comm, Stream s) {
  return ncclSend(in, count, to_nccl(dtype), peer, nc(comm), cs(s));
}
Status recv(void* out, size_t count, DataType dtype, int peer, Comm comm, Stream s) {
  return ncclRecv(out, count, to_nccl(dtype), peer, nc(comm), cs(s));
}

}  // namespace libtrain::device
