// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The GPU device seam: every call libtrain makes to the GPU runtime and its collective library
// (CUDA and NCCL, device_nccl.cc) goes through these, and nothing else in libtrain names them. The
// file behind it is the one that changes for another vendor's (HIP and RCCL). Built only with
// LIBTRAIN_HAVE_NCCL.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "libtrain/types.h"

namespace libtrain::device {

using Stream = void*;  // cudaStream_t; nullptr: the default stream
using Event = void*;   // cudaEvent_t
using Comm = void*;    // ncclComm_t
using Id = std::array<uint8_t, 128>;  // ncclUniqueId

// The runtime's calls throw libtrain::Error naming the call and the runtime's words.
int device_count();  // 0 without a driver or a device (never throws)
void set_device(int device);
int current_device();
std::string pci_bus_id(int device);
Stream new_stream();  // non-blocking
void free_stream(Stream s);
bool stream_idle(Stream s);  // polls
Event new_event();           // without timing
void free_event(Event e);
void record(Event e, Stream s);
bool event_done(Event e);  // polls
void wait_event(Stream s, Event e);  // S waits for E on the device; the host does not

// The collective library's calls return its status: ok() tells success (or work in progress),
// words() what went wrong, as the library says it.
using Status = int;
bool ok(Status st);
std::string words(Status st);
Status unique_id(Id* id);
Status comm_init(Comm* comm, int size, const Id& id, int rank);
void comm_destroy(Comm comm);
void comm_abort(Comm comm);
Status comm_async_error(Comm comm);  // the error the communicator ran into, ok() if none
Status group_start();
Status group_end();
Status allreduce(const void* in, void* out, size_t count, DataType dtype, ReduceOp op, Comm comm, Stream s);
Status broadcast(const void* in, void* out, size_t count, DataType dtype, int root, Comm comm, Stream s);
Status allgather(const void* in, void* out, size_t count, DataType dtype, Comm comm, Stream s);
Status reduce_scatter(const void* in, void* out, size_t count, DataType dtype, ReduceOp op, Comm comm, Stream s);
Status alltoall(const void* in, void* out, size_t count, DataType dtype, Comm comm, Stream s);
Status send(const void* in, size_t count, DataType dtype, int peer, Comm comm, Stream s);
Status recv(void* out, size_t count, DataType dtype, int peer, Comm comm, Stream s);

}  // namespace libtrain::device
