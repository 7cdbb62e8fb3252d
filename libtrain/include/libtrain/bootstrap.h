// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Bootstrap: where rank, size and the rendezvous store come from. PMIx when PMIX_RANK is set
// (srun --mpi=pmix, mpirun), else RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT, else a single
// process. LIBTRAIN_BOOTSTRAP=pmix|env|single forces one.
#pragma once

#include <memory>
#include <string>

#include "libtrain/store.h"

namespace libtrain {

struct BootstrapInfo {
  std::shared_ptr<Store> store;
  int rank = 0;
  int size = 1;
  std::string node;    // ranks with the same node name share memory
  std::string method;  // "pmix", "env" or "single"
};

BootstrapInfo bootstrap(Seconds timeout);
BootstrapInfo bootstrap_pmix();
BootstrapInfo bootstrap_env(Seconds timeout);
BootstrapInfo bootstrap_single();

// Which bootstrap bootstrap() would pick from this environment, without starting it.
std::string detect_bootstrap();

// This host's node name: LIBTRAIN_NODE if set (tests use it to fake several nodes), else hostname.
std::string node_name();

// LIBTRAIN_TIMEOUT in seconds (default 300).
Seconds timeout_from_env();

}  // namespace libtrain
