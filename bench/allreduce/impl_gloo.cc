// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Descriptor: Gloo over its TCP transport (Debian libgloo-dev), full mesh connected through a
// gloo::rendezvous::Store adapter on a libtrain TcpStore. The allreduce is gloo::allreduce() with
// AllreduceOptions, as PyTorch's ProcessGroupGloo calls it for a dense CPU tensor (ring, 1 MiB
// segments, two in flight); BENCH_GLOO_ALGO=chunked picks the older AllreduceRingChunked class,
// which is 1.2-1.4x slower across sandbox nodes (bench/allreduce/README.md).
#include <gloo/allreduce.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "harness.h"
#include "libtrain/tcp_store.h"

namespace bench {
namespace {

// Gloo's store interface on top of libtrain's.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  explicit StoreAdapter(std::shared_ptr<libtrain::Store> s) : store_(std::move(s)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, libtrain::Bytes(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    auto b = store_->get(key, libtrain::Seconds(60));
    return std::vector<char>(b.begin(), b.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys, libtrain::Seconds(60)); }

 private:
  std::shared_ptr<libtrain::Store> store_;
};

class GlooImpl final : public Impl {
 public:
  explicit GlooImpl(const World& w) {
    int port = 0;
    std::shared_ptr<libtrain::TcpStore> store;
    if (w.rank == 0) {
      store = std::make_shared<libtrain::TcpStore>("", 0, true, libtrain::Seconds(60));
      port = store->port();
    }
    MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (w.rank != 0) store = std::make_shared<libtrain::TcpStore>(w.master_host, port, false, libtrain::Seconds(60));
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    const char* forced = std::getenv("BENCH_GLOO_HOST");
    gloo::transport::tcp::attr attr(forced ? forced : host);
    device_ = gloo::transport::tcp::CreateDevice(attr);
    context_ = std::make_shared<gloo::rendezvous::Context>(w.rank, w.size);
    StoreAdapter adapter(store);
    context_->connectFullMesh(adapter, device_);
    store_ = store;
  }
  std::string name() const override { return "gloo"; }
  void allreduce(float* data, size_t count) override {
    if (chunked_) {
      gloo::AllreduceRingChunked<float> algo(context_, {data}, static_cast<int>(count));
      algo.run();
      return;
    }
    void (*sum)(void*, const void*, const void*, size_t) = &gloo::sum<float>;
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data, count);
    opts.setReduceFunction(sum);
    opts.setTag(tag_++);
    gloo::allreduce(opts);
  }

 private:
  const bool chunked_ = [] {
    const char* algo = std::getenv("BENCH_GLOO_ALGO");
    return algo && std::strcmp(algo, "chunked") == 0;
  }();
  uint32_t tag_ = 0;
  std::shared_ptr<libtrain::Store> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
};

}  // namespace

std::unique_ptr<Impl> make_gloo(const World& w) { return std::make_unique<GlooImpl>(w); }

}  // namespace bench
