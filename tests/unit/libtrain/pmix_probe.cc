// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Helper for test_bootstrap: run under `mpirun -np N` (a PMIx server); bootstraps with PMIx,
// checks rank/size/local rank against OpenMPI's own variables, allreduces, exits 0 on success.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "libtrain/libtrain.h"

int main() {
  try {
    libtrain::init();
    if (libtrain::bootstrap_method() != "pmix") return 3;
    const char* want_rank = std::getenv("OMPI_COMM_WORLD_RANK");
    const char* want_local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (want_rank && std::stoi(want_rank) != libtrain::rank()) return 4;
    if (want_local && std::stoi(want_local) != libtrain::local_rank()) return 5;
    double x = libtrain::rank() + 1.0;
    libtrain::world().allreduce(&x, 1, libtrain::DataType::kFloat64, libtrain::ReduceOp::kSum);
    int n = libtrain::size();
    libtrain::shutdown();
    return x == n * (n + 1) / 2.0 ? 0 : 6;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pmix_probe: %s\n", e.what());
    return 2;
  }
}
