// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Process-wide state behind the training API, gradient fusion, and the rank-0 helpers.
#include "libtrain/training.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include "env.h"
#include "libtrain/bootstrap.h"
#include "libtrain/errors.h"
#include "libtrain/nccl.h"
#include "libtrain/pmix_store.h"
#include "libtrain/timeline.h"
#include "world_store.h"

namespace libtrain {
namespace {

constexpr size_t kDefaultFusion = 64u << 20;
constexpr size_t kMaxFusion = size_t{1} << 40;  // 0: no fusion, each tensor alone
constexpr uint64_t kCheckpointMagic = 0x31544b43544c;  // "LTCKT1"

struct World {
  BootstrapInfo boot;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<NcclCommunicator> nccl;  // made by the first world_nccl()
};

std::mutex g_mu;
std::unique_ptr<World> g_world;

World& current() {
  if (!g_world) throw Error("libtrain: call libtrain::init() (Python: libtrain.init()) first");
  return *g_world;
}

size_t fusion_from_env() {
  return detail::env_whole("LIBTRAIN_FUSION_BYTES", kDefaultFusion, 0, kMaxFusion, "bytes");
}

// Forms the world over `boot` (g_mu held). The world needs the bootstrap's store only to form
// (world_nccl() exchanges NCCL's id through a WorldStore), so it lets go of it then; a Python
// store (libtrain.torch over torch's) is thus not held until the interpreter's exit. The env
// bootstrap's TcpStore goes as soon as every rank is past its last request: rank 0's server
// stops listening before any rank leaves the barrier (a torch.distributed client connecting then
// is refused and retries, never accepted and reset), and waits for the others to hang up, so
// MASTER_PORT is free when init() returns and torch.distributed's env:// rendezvous, which binds
// the same port, can follow libtrain.init().
void start_world(BootstrapInfo boot) {
  auto w = std::make_unique<World>();
  CommunicatorOptions opts = CommunicatorOptions::from_env();
  w->boot = std::move(boot);
  if (const char* pattern = detail::env_text("LIBTRAIN_TIMELINE")) {
    std::string path = Timeline::path_for_rank(pattern, w->boot.rank);
    if (!path.empty()) opts.timeline = std::make_shared<Timeline>(path, w->boot.rank);
  }
  opts.prefix = "libtrain/world";
  w->comm = std::make_unique<Communicator>(w->boot.store, w->boot.rank, w->boot.size, w->boot.node, opts);
  if (w->boot.method != "pmix") {  // PMIx's store stays: destroying it is PMIx_Finalize
    if (w->boot.method == "env" && w->boot.size > 1) {
      w->boot.store->seal();  // every rank has connected: its key is in (the communicator read it)
      w->comm->barrier();     // every rank is past its last request
    }
    w->boot.store.reset();
  }
  g_world = std::move(w);
}

}  // namespace

void init() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_world) return;
  start_world(bootstrap(CommunicatorOptions::from_env().timeout));
}

void init(BootstrapInfo boot) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_world) return;
  start_world(std::move(boot));
}

void shutdown() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_world.reset();
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_world != nullptr;
}

int rank() { return current().comm->rank(); }
int size() { return current().comm->size(); }
int local_rank() { return current().comm->local_rank(); }
int local_size() { return current().comm->local_size(); }
const std::string& bootstrap_method() { return current().boot.method; }
Communicator& world() { return *current().comm; }

NcclCommunicator& world_nccl() {
  std::lock_guard<std::mutex> lock(g_mu);
  World& w = current();
  if (!w.nccl) {
    detail::WorldStore store(*w.comm);
    // The world's CPU communicator names who failed when NCCL cannot (nccl.h).
    w.nccl = std::make_unique<NcclCommunicator>(store, w.comm->rank(), w.comm->size(),
                                                w.comm->local_rank(), timeout_from_env(), -1, w.comm.get());
  }
  return *w.nccl;
}

GradientReducer::GradientReducer(Communicator& comm, size_t fusion_bytes, ReduceOp op)
    : comm_(comm), fusion_bytes_(fusion_bytes ? fusion_bytes : fusion_from_env()), op_(op) {}

struct GradientReducer::Bucket {
  std::vector<const TensorRef*> members;
  size_t bytes = 0;
  uint8_t* buffer = nullptr;  // null: a single tensor reduced in place
  Work work;
};

void GradientReducer::reduce(const std::vector<TensorRef>& tensors) {
  std::vector<Bucket> buckets;
  for (const auto& t : tensors) {
    bool fits = !buckets.empty() && buckets.back().members.front()->dtype == t.dtype &&
                buckets.back().bytes + t.bytes() <= fusion_bytes_;
    if (!fits) buckets.emplace_back();
    buckets.back().members.push_back(&t);
    buckets.back().bytes += t.bytes();
  }
  if (buffers_.size() < buckets.size()) buffers_.resize(buckets.size());
  for (size_t i = 0; i < buckets.size(); ++i) {  // pack bucket i while bucket i-1 is in flight
    Bucket& b = buckets[i];
    DataType dtype = b.members.front()->dtype;
    if (b.members.size() == 1) {
      b.work = comm_.allreduce_async(b.members[0]->data, b.members[0]->count, dtype, op_, "gradients");
      continue;
    }
    buffers_[i].resize(b.bytes);
    b.buffer = buffers_[i].data();
    size_t off = 0;
    for (const TensorRef* t : b.members) {
      // An empty tensor may have no storage (data null): memcpy's pointers must not be null
      // even for 0 bytes (C11 7.24.1p2), so it is skipped.
      if (t->bytes() != 0) std::memcpy(b.buffer + off, t->data, t->bytes());
      off += t->bytes();
    }
    b.work = comm_.allreduce_async(b.buffer, b.bytes / dtype_size(dtype), dtype, op_, "fused_gradients");
  }
  for (Bucket& b : buckets) {
    b.work.wait();
    if (!b.buffer) continue;
    size_t off = 0;
    for (const TensorRef* t : b.members) {
      if (t->bytes() != 0) std::memcpy(t->data, b.buffer + off, t->bytes());
      off += t->bytes();
    }
  }
}

void broadcast_parameters(const std::vector<TensorRef>& params, int root) {
  std::vector<Work> works;
  for (const auto& p : params) works.push_back(world().broadcast_async(p.data, p.count, p.dtype, root, "broadcast_parameters"));
  for (auto& w : works) w.wait();
}

double scaled_learning_rate(double base_lr, int n, double epoch, double warmup_epochs) {
  double target = base_lr * n;
  if (warmup_epochs <= 0 || epoch >= warmup_epochs) return target;
  return base_lr + (target - base_lr) * (epoch / warmup_epochs);
}

// Format: magic, tensor count, then per tensor (dtype, count, bytes). Little-endian host order.
void save_checkpoint(const std::string& path, const std::vector<TensorRef>& tensors) {
  std::string error;
  if (rank() == 0) {
    std::string tmp = path + ".tmp." + std::to_string(::getpid());
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    bool ok = f != nullptr;
    uint64_t header[2] = {kCheckpointMagic, tensors.size()};
    ok = ok && std::fwrite(header, sizeof(header), 1, f) == 1;
    for (const auto& t : tensors) {
      uint64_t meta[2] = {static_cast<uint64_t>(t.dtype), t.count};
      ok = ok && std::fwrite(meta, sizeof(meta), 1, f) == 1;
      ok = ok && (t.bytes() == 0 || std::fwrite(t.data, t.bytes(), 1, f) == 1);
    }
    ok = f && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0 && ok;
    if (f) std::fclose(f);
    ok = ok && std::rename(tmp.c_str(), path.c_str()) == 0;
    if (!ok) {
      error = "libtrain: cannot write checkpoint '" + path + "': " + std::strerror(errno);
      std::remove(tmp.c_str());
    }
  }
  int32_t failed = error.empty() ? 0 : 1;
  world().broadcast(&failed, 1, DataType::kInt32, 0);
  if (failed) throw Error(error.empty() ? "libtrain: rank 0 could not write checkpoint '" + path + "'" : error);
}

static int32_t read_checkpoint(const std::string& path, const std::vector<TensorRef>& tensors) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return 0;
  uint64_t header[2] = {};
  bool ok = std::fread(header, sizeof(header), 1, f) == 1 && header[0] == kCheckpointMagic &&
            header[1] == tensors.size();
  for (size_t i = 0; ok && i < tensors.size(); ++i) {
    uint64_t meta[2] = {};
    ok = std::fread(meta, sizeof(meta), 1, f) == 1 && meta[0] == static_cast<uint64_t>(tensors[i].dtype) &&
         meta[1] == tensors[i].count;
    ok = ok && (tensors[i].bytes() == 0 || std::fread(tensors[i].data, tensors[i].bytes(), 1, f) == 1);
  }
  std::fclose(f);
  return ok ? 1 : -1;
}

bool load_checkpoint(const std::string& path, const std::vector<TensorRef>& tensors) {
  int32_t state = rank() == 0 ? read_checkpoint(path, tensors) : 0;
  world().broadcast(&state, 1, DataType::kInt32, 0);
  if (state < 0)
    throw Error("libtrain: checkpoint '" + path + "' does not match the tensors given (count, dtype or size)");
  if (state == 0) return false;
  broadcast_parameters(tensors, 0);
  return true;
}

std::vector<std::string> check_build() {
  std::vector<std::string> out;
  if (pmix_available()) out.push_back("bootstrap:pmix");
  out.insert(out.end(), {"bootstrap:env", "bootstrap:single", "transport:shm", "transport:tcp"});
  if (nccl_available()) out.push_back("transport:nccl");
  return out;
}

}  // namespace libtrain
