// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// libtrain's stream-ordered NCCL engine (NcclCommunicator's *_async calls and NcclWork, nccl.h) on
// the stand-in CUDA runtime and NCCL (standin_cudart.c, standin_nccl.c, through LD_LIBRARY_PATH):
// a collective waits for the work its caller's stream queued before it, however late; the
// caller's stream waits for the result without the host; the data path makes no host-blocking
// call and no copy between host and device (the stand-in's counters); collectives on two
// sub-communicators interleave; reduce_scatter, alltoall, send/recv and groups give their
// results; and a killed or stalled rank gives the named error of docs/errors.md within the
// timeout. Forked ranks; label gpu-standin. Skipped (77) without NCCL or the stand-in.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "libtrain/communicator.h"
#include "libtrain/nccl.h"
#include "ranks.h"
// check.h last: it defines macros (fail) that clash with <ios>.
#include "check_main.h"

using namespace libtrain;

namespace {

using KernelFn = int (*)(void*, unsigned, void*, const void*, size_t);
using CounterFn = long (*)(const char*);
using ResetFn = void (*)();
KernelFn kernel() { return reinterpret_cast<KernelFn>(dlsym(RTLD_DEFAULT, "standin_kernel")); }
long counter(const char* name) { return reinterpret_cast<CounterFn>(dlsym(RTLD_DEFAULT, "standin_counter"))(name); }
void reset_counters() { reinterpret_cast<ResetFn>(dlsym(RTLD_DEFAULT, "standin_reset_counters"))(); }

enum Exit { kOk = 0, kWrong = 10, kPeer = 11, kTimeout = 12, kOther = 13, kSlow = 14, kCounted = 15 };

// A fresh directory for the stand-in's communicators and each rank's message.
class Scratch : public testing::Messages {
 public:
  Scratch() {
    setenv("STANDIN_NCCL_DIR", dir().c_str(), 1);
    setenv("STANDIN_CUDA_DEVICES", "8", 1);
  }
};

// Runs FN(rank, store) on N ranks; a libtrain error is written to the scratch and exits kPeer,
// kTimeout or kOther.
std::vector<int> ranks(const Scratch& scratch, int n, const std::function<int(int, const std::shared_ptr<Store>&)>& fn) {
  return testing::run_processes(n, [&](int rank, const std::shared_ptr<Store>& store) {
    try {
      return fn(rank, store);
    } catch (const PeerError& e) {
      scratch.write(rank, e.what());
      return static_cast<int>(kPeer);
    } catch (const TimeoutError& e) {
      scratch.write(rank, e.what());
      return static_cast<int>(kTimeout);
    } catch (const std::exception& e) {
      scratch.write(rank, e.what());
      return static_cast<int>(kOther);
    }
  });
}

void expect_ok(const Scratch& scratch, const std::vector<int>& codes) {
  for (size_t r = 0; r < codes.size(); ++r)
    ck_assert_msg(codes[r] == kOk, "rank %zu exited %d: %s", r, codes[r], scratch.read(static_cast<int>(r)).c_str());
}

float* device_floats(size_t n) {
  void* p = nullptr;
  if (cudaMalloc(&p, n * sizeof(float)) != cudaSuccess) throw std::runtime_error("cudaMalloc");
  return static_cast<float*>(p);
}

bool have_standin() {
  if (!nccl_available()) return false;
  const char* path = getenv("LD_LIBRARY_PATH");
  return path && std::string(path).find("standin-nccl") != std::string::npos && kernel() != nullptr;
}

}  // namespace

// The producer (a kernel of 300 ms writing the input, queued on the caller's stream) finishes
// long after the collective is queued: the collective still reduces what it wrote. Queueing does
// not wait for it, and the caller's stream then waits for the result (a copy queued after wait()
// sees the sum).
START_TEST(a_late_producer_is_waited_for_on_the_device) {
  Scratch scratch;
  auto codes = ranks(scratch, 2, [](int rank, const std::shared_ptr<Store>& store) {
    NcclCommunicator nccl(*store, rank, 2, rank, Seconds(10), rank);
    cudaStream_t caller;
    cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking);
    std::vector<float> late(1000, static_cast<float>(rank + 1)), out(1000, -1);
    float* buf = device_floats(late.size());
    cudaMemsetAsync(buf, 0, late.size() * sizeof(float), caller);
    auto t0 = std::chrono::steady_clock::now();
    kernel()(caller, 300, buf, late.data(), late.size() * sizeof(float));
    NcclWork w = nccl.allreduce_async(buf, buf, late.size(), DataType::kFloat32, ReduceOp::kSum, caller);
    w.wait(caller);
    cudaMemcpyAsync(out.data(), buf, out.size() * sizeof(float), cudaMemcpyDeviceToHost, caller);
    double queued = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (queued > 0.15 || w.done()) return static_cast<int>(kSlow);  // the host waited for the kernel
    w.synchronize();
    cudaStreamSynchronize(caller);
    for (float v : out)
      if (v != 3.0f) return static_cast<int>(kWrong);
    cudaFree(buf);
    return static_cast<int>(kOk);
  });
  expect_ok(scratch, codes);
}
END_TEST

// On the data path (queue, make the caller's stream wait, poll done()) and in synchronize():
// no cudaStreamSynchronize, cudaDeviceSynchronize or cudaEventSynchronize, and no copy between
// host and device.
START_TEST(the_data_path_blocks_nothing_and_copies_nothing) {
  Scratch scratch;
  auto codes = ranks(scratch, 3, [](int rank, const std::shared_ptr<Store>& store) {
    NcclCommunicator nccl(*store, rank, 3, rank, Seconds(10), rank);
    cudaStream_t caller;
    cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking);
    std::vector<float> host(4096, static_cast<float>(rank));
    float* buf = device_floats(host.size());
    float* gathered = device_floats(host.size() * 3);
    cudaMemcpy(buf, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
    reset_counters();
    std::vector<NcclWork> works;
    for (int step = 0; step < 20; ++step) {
      works.push_back(nccl.allreduce_async(buf, buf, host.size(), DataType::kFloat32, ReduceOp::kSum, caller));
      works.back().wait(caller);
      works.push_back(nccl.allgather_async(buf, gathered, host.size(), DataType::kFloat32, caller));
      works.back().wait(caller);
    }
    while (!works.back().done()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    for (auto& w : works) w.synchronize();
    for (const char* c : {"stream_synchronize", "device_synchronize", "event_synchronize", "memcpy_htod",
                          "memcpy_dtoh", "memcpy_htoh", "memcpy_dtod"}) {
      if (counter(c) != 0) {
        std::fprintf(stderr, "rank %d: %s: %ld\n", rank, c, counter(c));
        return static_cast<int>(kCounted);
      }
    }
    cudaMemcpy(host.data(), buf, host.size() * sizeof(float), cudaMemcpyDeviceToHost);
    // 0+1+2 = 3, then x3 each step: 3^20 in float32 is exact enough to compare relatively.
    double want = 3.0 * std::pow(3.0, 19);
    if (std::fabs(host[0] - want) > want * 1e-6) return static_cast<int>(kWrong);
    cudaFree(buf);
    cudaFree(gathered);
    return static_cast<int>(kOk);
  });
  expect_ok(scratch, codes);
}
END_TEST

// Every rank is in the world (4 ranks) and in a pair ({0,1} or {2,3}), each a communicator on its
// own stream made over its own PrefixStore; collectives on both alternate, queued on one caller
// stream, and each gives its own sum.
START_TEST(two_sub_communicators_interleave) {
  Scratch scratch;
  auto codes = ranks(scratch, 4, [](int rank, const std::shared_ptr<Store>& store) {
    PrefixStore world_store(store, "world"), pair_store(store, rank < 2 ? "pair0" : "pair1");
    NcclCommunicator world(world_store, rank, 4, rank, Seconds(10), rank);
    NcclCommunicator pair(pair_store, rank % 2, 2, rank, Seconds(10), rank);
    cudaStream_t caller;
    cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking);
    float* a = device_floats(100);
    float* b = device_floats(100);
    std::vector<float> host(100, static_cast<float>(rank + 1));
    cudaMemcpy(a, host.data(), 400, cudaMemcpyHostToDevice);
    cudaMemcpy(b, host.data(), 400, cudaMemcpyHostToDevice);
    // a: world sums (1+2+3+4 = 10, then x4); b: pair sums (1+2 = 3 or 3+4 = 7, then x2).
    for (int step = 0; step < 5; ++step) {
      world.allreduce_async(a, a, 100, DataType::kFloat32, ReduceOp::kSum, caller).wait(caller);
      pair.allreduce_async(b, b, 100, DataType::kFloat32, ReduceOp::kSum, caller).wait(caller);
    }
    cudaStreamSynchronize(caller);
    std::vector<float> ra(100), rb(100);
    cudaMemcpy(ra.data(), a, 400, cudaMemcpyDeviceToHost);
    cudaMemcpy(rb.data(), b, 400, cudaMemcpyDeviceToHost);
    float want_a = 10.0f * 4 * 4 * 4 * 4, want_b = (rank < 2 ? 3.0f : 7.0f) * 2 * 2 * 2 * 2;
    if (ra[99] != want_a || rb[99] != want_b) {
      std::fprintf(stderr, "rank %d: world %g (want %g), pair %g (want %g)\n", rank, static_cast<double>(ra[99]),
                   static_cast<double>(want_a), static_cast<double>(rb[99]), static_cast<double>(want_b));
      return static_cast<int>(kWrong);
    }
    return static_cast<int>(kOk);
  });
  expect_ok(scratch, codes);
}
END_TEST

// reduce_scatter, alltoall, broadcast and a ring of send/recv in one group, on 3 ranks.
START_TEST(every_collective_through_the_engine) {
  Scratch scratch;
  auto codes = ranks(scratch, 3, [](int rank, const std::shared_ptr<Store>& store) {
    NcclCommunicator nccl(*store, rank, 3, rank, Seconds(10), rank);
    cudaStream_t caller;
    cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking);
    const size_t n = 8;
    std::vector<float> all(3 * n);
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<float>(100 * rank + i);
    float* in = device_floats(3 * n);
    float* out = device_floats(3 * n);
    float* one = device_floats(n);
    float* ring = device_floats(n);
    cudaMemcpy(in, all.data(), all.size() * sizeof(float), cudaMemcpyHostToDevice);
    nccl.reduce_scatter_async(in, one, n, DataType::kFloat32, ReduceOp::kSum, caller).wait(caller);
    nccl.alltoall_async(in, out, n, DataType::kFloat32, caller).wait(caller);
    const int right = (rank + 1) % 3, left = (rank + 2) % 3;
    NcclWork g = nccl.group(caller, [&] {
      nccl.recv_async(ring, n, DataType::kFloat32, left, caller);
      nccl.send_async(in, n, DataType::kFloat32, right, caller);
    });
    g.wait(caller);
    g.synchronize();
    cudaStreamSynchronize(caller);
    std::vector<float> rs(n), a2a(3 * n), rg(n);
    cudaMemcpy(rs.data(), one, n * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(a2a.data(), out, 3 * n * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(rg.data(), ring, n * sizeof(float), cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n; ++i) {
      float slice = static_cast<float>(rank * n + i);
      if (rs[i] != 300.0f + 3 * slice) return static_cast<int>(kWrong);        // (0+100+200) + 3 x slice
      for (int r = 0; r < 3; ++r)
        if (a2a[r * n + i] != static_cast<float>(100 * r) + slice) return static_cast<int>(kWrong);
      if (rg[i] != static_cast<float>(100 * left + i)) return static_cast<int>(kWrong);
    }
    try {  // groups do not nest; a send to oneself is refused
      nccl.group(caller, [&] { nccl.group(caller, [] {}); });
      return static_cast<int>(kWrong);
    } catch (const InvalidArgument&) {
    }
    try {
      nccl.send_async(in, n, DataType::kFloat32, rank, caller);
      return static_cast<int>(kWrong);
    } catch (const InvalidArgument&) {
    }
    return static_cast<int>(kOk);
  });
  expect_ok(scratch, codes);
}
END_TEST

// A rank killed between two collectives: every survivor's work fails, from done() or
// synchronize(), within the timeout, with the named error (rank 3 and its node); and the next
// call says the communicator failed earlier.
START_TEST(a_killed_rank_is_named_within_the_timeout) {
  Scratch scratch;
  auto start = std::chrono::steady_clock::now();
  auto codes = ranks(scratch, 4, [&](int rank, const std::shared_ptr<Store>& store) {
    CommunicatorOptions o;
    o.timeout = Seconds(5);
    Communicator cpu(store, rank, 4, "node" + std::to_string(rank / 2), o);
    NcclCommunicator nccl(*store, rank, 4, rank % 2, Seconds(3), rank, &cpu);
    cudaStream_t caller;
    cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking);
    float* buf = device_floats(100);
    nccl.allreduce_async(buf, buf, 100, DataType::kFloat32, ReduceOp::kSum, caller).synchronize();
    if (rank == 3) raise(SIGKILL);
    NcclWork w = nccl.allreduce_async(buf, buf, 100, DataType::kFloat32, ReduceOp::kSum, caller);
    std::string first;
    try {
      if (rank % 2) {
        while (!w.done()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      } else {
        w.synchronize();
      }
      return static_cast<int>(kOk);
    } catch (const PeerError& e) {
      first = e.what();
    }
    // A survivor that left at once would look like a second death to another still on its way to
    // the CPU communicator's barrier: they stay a little (the ranks may see the failure seconds
    // apart under the sanitizers beside other work, and then the late one names the one that left).
    std::this_thread::sleep_for(std::chrono::seconds(2));
    try {
      nccl.allreduce_async(buf, buf, 100, DataType::kFloat32, ReduceOp::kSum, caller);
    } catch (const PeerError& e) {
      std::string again = e.what();
      scratch.write(rank, first);
      return again.find("failed earlier (" + first + ")") != std::string::npos ? static_cast<int>(kPeer)
                                                                               : static_cast<int>(kWrong);
    }
    return static_cast<int>(kWrong);
  });
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Every survivor's work failed with a PeerError naming a rank that died; rank 3, on node1, for
  // at least one of them (which rank a survivor names that reached the CPU barrier after another
  // survivor left is the CPU communicator's matter: test_failure, test_nccl_culprit).
  int named_3 = 0;
  for (int r = 0; r < 3; ++r) {
    std::string text = scratch.read(r);
    ck_assert_msg(codes[static_cast<size_t>(r)] == kPeer, "rank %d exited %d: %s", r, codes[static_cast<size_t>(r)],
                  text.c_str());
    ck_assert_msg(text.find(" died") != std::string::npos && text.find("(NCCL: ") != std::string::npos,
                  "rank %d's error names no rank that died, or not NCCL's words: %s", r, text.c_str());
    named_3 += text.find("rank 3 on node node1 ") != std::string::npos;
  }
  ck_assert_msg(named_3 >= 1, "no survivor named rank 3 on node1: %s | %s | %s", scratch.read(0).c_str(),
                scratch.read(1).c_str(), scratch.read(2).c_str());
  ck_assert_int_eq(codes[3], 128 + SIGKILL);
  ck_assert_msg(secs < 15, "took %.1f s (NCCL timeout 3 s, CPU 5 s)", secs);
}
END_TEST

// A peer that stalls (NCCL never notices: STANDIN_NCCL_ON_DEATH=hang, and the rank sleeps): the
// work fails with a TimeoutError within the timeout, nothing hangs past it.
START_TEST(a_stalled_peer_times_out) {
  Scratch scratch;
  setenv("STANDIN_NCCL_ON_DEATH", "hang", 1);
  auto start = std::chrono::steady_clock::now();
  auto codes = ranks(scratch, 2, [](int rank, const std::shared_ptr<Store>& store) {
    NcclCommunicator nccl(*store, rank, 2, rank, Seconds(2), rank);
    float* buf = device_floats(10);
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(6));
      return static_cast<int>(kOk);
    }
    nccl.allreduce_async(buf, buf, 10, DataType::kFloat32, ReduceOp::kSum, nullptr).synchronize();
    return static_cast<int>(kWrong);
  });
  unsetenv("STANDIN_NCCL_ON_DEATH");
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ck_assert_msg(codes[0] == kTimeout, "rank 0 exited %d: %s", codes[0], scratch.read(0).c_str());
  ck_assert_msg(scratch.read(0).find("did not finish within LIBTRAIN_TIMEOUT") != std::string::npos, "%s",
                scratch.read(0).c_str());
  ck_assert_msg(secs < 10, "took %.1f s (timeout 2 s, the stalled rank 6 s)", secs);
}
END_TEST

Suite* make_suite(void) {
  if (!have_standin()) {
    std::printf("SKIP: libtrain built without NCCL, or the stand-in is not on LD_LIBRARY_PATH\n");
    std::exit(77);
  }
  Suite* s = suite_create("libtrain_nccl_engine");
  const char* only = getenv("CK_RUN_CASE");
  struct {
    const char* name;
    const TTest* test;
  } cases[] = {
      {"a_late_producer_is_waited_for_on_the_device", a_late_producer_is_waited_for_on_the_device},
      {"the_data_path_blocks_nothing_and_copies_nothing", the_data_path_blocks_nothing_and_copies_nothing},
      {"two_sub_communicators_interleave", two_sub_communicators_interleave},
      {"every_collective_through_the_engine", every_collective_through_the_engine},
      {"a_killed_rank_is_named_within_the_timeout", a_killed_rank_is_named_within_the_timeout},
      {"a_stalled_peer_times_out", a_stalled_peer_times_out},
  };
  for (auto& c : cases) {
    if (only && std::string(only) != c.name) continue;
    TCase* tc = tcase_create(c.name);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, c.test);
    suite_add_tcase(s, tc);
  }
  return s;
}
