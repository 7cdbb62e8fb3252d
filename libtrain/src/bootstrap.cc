// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Bootstrap selection and the three bootstraps. The environment variables are the ones srun,
// torchrun and Slipway's SPANK plugin set (docs/architecture.md, "The flow of one job step").
#include "libtrain/bootstrap.h"

#include <unistd.h>

#include <cerrno>

#include "env.h"
#include "libtrain/errors.h"
#include "libtrain/pmix_store.h"
#include "libtrain/tcp_store.h"

namespace libtrain {
namespace {

using detail::env_seconds;
using detail::env_text;
using detail::env_whole_required;

constexpr double kDefaultTimeout = 300.0;
constexpr uint64_t kMaxRanks = 1 << 24;
constexpr double kMaxTimeout = 1e9;  // seconds: far beyond any job, and a deadline that cannot overflow

}  // namespace

std::string node_name() {
  if (const char* forced = env_text("LIBTRAIN_NODE")) return forced;
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

Seconds timeout_from_env() {
  return Seconds(env_seconds("LIBTRAIN_TIMEOUT", kDefaultTimeout, kMaxTimeout));
}

std::string detect_bootstrap() {
  if (const char* forced = env_text("LIBTRAIN_BOOTSTRAP")) return forced;
  if (env_text("PMIX_RANK") && pmix_available()) return "pmix";
  if (env_text("RANK") && env_text("WORLD_SIZE")) return "env";
  return "single";
}

BootstrapInfo bootstrap(Seconds timeout) {
  std::string method = detect_bootstrap();
  if (method == "pmix") return bootstrap_pmix();
  if (method == "env") return bootstrap_env(timeout);
  if (method == "single") return bootstrap_single();
  throw InvalidArgument("libtrain: LIBTRAIN_BOOTSTRAP='" + method + "'; use pmix, env or single");
}

BootstrapInfo bootstrap_pmix() {
  auto store = std::make_shared<PmixStore>();
  BootstrapInfo info{store, store->rank(), store->size(), store->node(), "pmix"};
  if (const char* forced = env_text("LIBTRAIN_NODE")) info.node = forced;
  return info;
}

BootstrapInfo bootstrap_env(Seconds timeout) {
  BootstrapInfo info;
  info.rank = static_cast<int>(env_whole_required("RANK", 0, kMaxRanks - 1, ""));
  info.size = static_cast<int>(env_whole_required("WORLD_SIZE", 1, kMaxRanks, ""));
  if (info.rank >= info.size)
    throw InvalidArgument("libtrain: RANK=" + std::to_string(info.rank) + " is not below WORLD_SIZE=" +
                          std::to_string(info.size));
  if (info.size > 1 && (!env_text("MASTER_ADDR") || !env_text("MASTER_PORT")))
    throw InvalidArgument("libtrain: RANK/WORLD_SIZE bootstrap needs MASTER_ADDR and MASTER_PORT");
  info.node = node_name();
  info.method = "env";
  if (info.size == 1) {
    info.store = std::make_shared<InMemoryStore>();
    return info;
  }
  int port = static_cast<int>(env_whole_required("MASTER_PORT", 1, 65535, ""));
  try {
    info.store = std::make_shared<TcpStore>(env_text("MASTER_ADDR"), port, info.rank == 0, timeout);
  } catch (const SystemError& e) {
    if (e.error_number() != EADDRINUSE) throw;
    throw InvalidArgument("libtrain: MASTER_PORT=" + std::to_string(port) +
                          " is already in use on rank 0's host (by another rendezvous, such as "
                          "torch.distributed's); set a free MASTER_PORT, or with libtrain.torch call "
                          "init_process_group() first: hvd.init() then shares its store");
  }
  return info;
}

BootstrapInfo bootstrap_single() {
  return BootstrapInfo{std::make_shared<InMemoryStore>(), 0, 1, node_name(), "single"};
}

}  // namespace libtrain
