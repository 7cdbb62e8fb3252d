// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// bench/allreduce harness: one table in the nccl-tests layout (size, count, type, time, algbw,
// busbw, wrong) per implementation, all measured in the same run under `mpirun`, plus a
// STREAM-style copy bound. Each implementation is a small descriptor (impl_*.cc).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace bench {

struct World {
  int rank = 0, size = 1;
  std::string master_host;  // rank 0's host, for the rendezvous stores
};

// One allreduce implementation: sum of float32, in place.
class Impl {
 public:
  virtual ~Impl() = default;
  virtual std::string name() const = 0;
  virtual void allreduce(float* data, size_t count) = 0;
};

std::unique_ptr<Impl> make_libtrain(const World& world);
std::unique_ptr<Impl> make_mpi(const World& world);
std::unique_ptr<Impl> make_gloo(const World& world);

}  // namespace bench
