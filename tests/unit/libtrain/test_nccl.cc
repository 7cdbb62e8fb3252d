// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// NCCL communicator: two ranks (processes) set up a communicator; and two ranks on one GPU fail at
// once with libtrain's message naming the GPU and the ranks, not NCCL's "invalid usage". Needs a
// GPU: without one the test exits 77 so CTest reports it skipped, never passed (label gpu).
#include <cstdio>
#include <cstdlib>
#include <cstring>

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
  // Both ranks on device 0: each must refuse, naming the GPU they share.
  codes = testing::run_processes(2, [](int rank, const std::shared_ptr<libtrain::Store>& store) {
    try {
      libtrain::NcclCommunicator comm(*store, rank, 2, rank, libtrain::Seconds(30), /*device=*/0);
    } catch (const libtrain::InvalidArgument& e) {
      std::printf("rank %d: %s\n", rank, e.what());
      return std::strstr(e.what(), "ranks 0 and 1 share GPU ") ? 0 : 2;
    }
    return 3;  // NCCL was started on a shared GPU
  });
  for (int c : codes)
    if (c != 0) return 1;
  std::printf("ok: NCCL communicator; ranks sharing a GPU are refused by name\n");
  return 0;
}
