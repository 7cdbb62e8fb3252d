// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Descriptor: OpenMPI's MPI_Allreduce (MPI_IN_PLACE, MPI_FLOAT, MPI_SUM) on MPI_COMM_WORLD.
#include <mpi.h>

#include "harness.h"

namespace bench {
namespace {

class MpiImpl final : public Impl {
 public:
  std::string name() const override { return "openmpi"; }
  void allreduce(float* data, size_t count) override {
    MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
};

}  // namespace

std::unique_ptr<Impl> make_mpi(const World&) { return std::make_unique<MpiImpl>(); }

}  // namespace bench
