// Bootstrap selection and the three bootstraps. The environment variables are the ones srun,
// torchrun and Slipway's SPANK plugin set (docs/architecture.md, "The flow of one job step").
#include "libtrain/bootstrap.h"

#include <unistd.h>

#include <cstdlib>

#include "libtrain/errors.h"
#include "libtrain/pmix_store.h"
#include "libtrain/tcp_store.h"

namespace libtrain {
namespace {

constexpr double kDefaultTimeout = 300.0;

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int env_int(const char* name) {
  const char* v = env(name);
  char* end = nullptr;
  long n = v ? std::strtol(v, &end, 10) : -1;
  if (!v || *end || n < 0 || n > (1 << 24))
    throw InvalidArgument(std::string("libtrain: ") + name + "='" + (v ? v : "") +
                          "' is not a valid non-negative integer");
  return static_cast<int>(n);
}

}  // namespace

std::string node_name() {
  if (const char* forced = env("LIBTRAIN_NODE")) return forced;
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

Seconds timeout_from_env() {
  const char* v = env("LIBTRAIN_TIMEOUT");
  if (!v) return Seconds(kDefaultTimeout);
  char* end = nullptr;
  double s = std::strtod(v, &end);
  if (*end || !(s > 0))
    throw InvalidArgument(std::string("libtrain: LIBTRAIN_TIMEOUT='") + v +
                          "' must be a positive number of seconds");
  return Seconds(s);
}

std::string detect_bootstrap() {
  if (const char* forced = env("LIBTRAIN_BOOTSTRAP")) return forced;
  if (env("PMIX_RANK") && pmix_available()) return "pmix";
  if (env("RANK") && env("WORLD_SIZE")) return "env";
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
  if (const char* forced = env("LIBTRAIN_NODE")) info.node = forced;
  return info;
}

BootstrapInfo bootstrap_env(Seconds timeout) {
  BootstrapInfo info;
  info.rank = env_int("RANK");
  info.size = env_int("WORLD_SIZE");
  if (info.size < 1 || info.rank >= info.size)
    throw InvalidArgument("libtrain: RANK=" + std::to_string(info.rank) + " is not below WORLD_SIZE=" +
                          std::to_string(info.size));
  if (info.size > 1 && (!env("MASTER_ADDR") || !env("MASTER_PORT")))
    throw InvalidArgument("libtrain: RANK/WORLD_SIZE bootstrap needs MASTER_ADDR and MASTER_PORT");
  info.node = node_name();
  info.method = "env";
  if (info.size == 1) {
    info.store = std::make_shared<InMemoryStore>();
    return info;
  }
  info.store = std::make_shared<TcpStore>(env("MASTER_ADDR"), env_int("MASTER_PORT"), info.rank == 0,
                                          timeout);
  return info;
}

BootstrapInfo bootstrap_single() {
  return BootstrapInfo{std::make_shared<InMemoryStore>(), 0, 1, node_name(), "single"};
}

}  // namespace libtrain
