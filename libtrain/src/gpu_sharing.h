// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Before NCCL starts, every rank says which GPU it drives (its host and the device's PCI bus id):
// two ranks on one GPU make ncclCommInitRank fail with a bare "invalid usage", so libtrain finds
// them first and names the GPU, the ranks and the fix.
#pragma once

#include <string>
#include <vector>

namespace libtrain {

struct RankGpu {
  int rank = 0;
  std::string host;    // gethostname()
  std::string bus_id;  // cudaDeviceGetPCIBusId(), e.g. "0000:3B:00.0"
};

// "host\nbus_id" as a rank publishes it, and back.
std::string encode_rank_gpu(const RankGpu& g);
RankGpu decode_rank_gpu(int rank, const std::string& text);

// The error for the first GPU (by lowest rank) that two or more ranks share, or "" when every
// rank has its own.
std::string shared_gpu_message(const std::vector<RankGpu>& gpus);

}  // namespace libtrain
