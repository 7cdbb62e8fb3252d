// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The stand-in CUDA runtime and NCCL (standin_cudart.c, standin_nccl.c) behave as the real ones
// do where libtrain relies on it: streams run their work in order on a thread of their own,
// events order streams without blocking the host, and collectives really reduce across ranks
// (processes forked here, 1, 2, 3 and 8 of them) for every data type and operation. Written
// against the real headers (cuda_runtime_api.h, nccl.h): the same tests can run on the real
// libraries, where those that need the stand-in's own calls (a simulated kernel, the counters)
// and more ranks than devices are skipped. One CTest test per case (CK_RUN_CASE), label
// gpu-standin.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <check.h>  // after the C++ headers: its macros break <ios>

namespace {

// The stand-in's own calls (standin.h), found at run time: null on the real libraries.
using KernelFn = int (*)(void*, unsigned, void*, const void*, size_t);
using CounterFn = long (*)(const char*);
using ResetFn = void (*)();
KernelFn standin_kernel() { return reinterpret_cast<KernelFn>(dlsym(RTLD_DEFAULT, "standin_kernel")); }
CounterFn standin_counter() { return reinterpret_cast<CounterFn>(dlsym(RTLD_DEFAULT, "standin_counter")); }
ResetFn standin_reset() { return reinterpret_cast<ResetFn>(dlsym(RTLD_DEFAULT, "standin_reset_counters")); }
bool on_standin() { return standin_counter() != nullptr; }

// In a rank: a failed check prints why and ends the rank with status 1.
#define RANK_CHECK(cond, ...)                                                   \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "rank check failed (%s:%d): ", __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                                       \
      std::fprintf(stderr, "\n");                                              \
      std::fflush(stderr);                                                     \
      _exit(1);                                                                \
    }                                                                          \
  } while (0)
#define CUDA_OK(call) RANK_CHECK((call) == cudaSuccess, "%s", #call)
#define NCCL_OK(call) RANK_CHECK((call) == ncclSuccess, "%s", #call)

struct Rank {
  int rank, size;
  ncclComm_t comm;
  cudaStream_t stream;
};

// Runs BODY on N ranks forked from here, each with its device, stream and communicator; passes
// when every rank exits 0 within TIMEOUT_S. A rank exiting with 77 (DIE_STATUS) is one the body
// ended on purpose. Returns the ranks' statuses.
constexpr int kDied = 77;
std::vector<int> run_ranks(int n, const std::function<void(Rank&)>& body, int timeout_s = 60) {
  int devices = 0;
  cudaGetDeviceCount(&devices);
  std::string dir;
  if (!getenv("STANDIN_NCCL_DIR")) {
    char tmpl[] = "/tmp/standin-nccl.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(tmpl));
    dir = tmpl;
    setenv("STANDIN_NCCL_DIR", tmpl, 1);
  }
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
      Rank me{r, n, nullptr, nullptr};
      CUDA_OK(cudaSetDevice(devices > 0 ? r % devices : 0));
      CUDA_OK(cudaStreamCreateWithFlags(&me.stream, cudaStreamNonBlocking));
      NCCL_OK(ncclCommInitRank(&me.comm, n, id, r));
      body(me);
      NCCL_OK(ncclCommDestroy(me.comm));
      CUDA_OK(cudaStreamDestroy(me.stream));
      std::fflush(nullptr);
      _exit(0);
    }
    pids.push_back(pid);
  }
  std::vector<int> statuses(n, -1);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int left = n;
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    for (int r = 0; r < n; ++r) {
      int st;
      if (statuses[r] == -1 && waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        statuses[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int r = 0; r < n; ++r) {
    if (statuses[r] == -1) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], nullptr, 0);
    }
  }
  if (!dir.empty()) {
    std::filesystem::remove_all(dir);
    unsetenv("STANDIN_NCCL_DIR");
  }
  for (int r = 0; r < n; ++r) ck_assert_msg(statuses[r] != -1, "rank %d of %d hung past %d s", r, n, timeout_s);
  return statuses;
}

void expect_all_pass(int n, const std::function<void(Rank&)>& body, int timeout_s = 60) {
  auto statuses = run_ranks(n, body, timeout_s);
  for (int r = 0; r < n; ++r) ck_assert_msg(statuses[r] == 0, "rank %d of %d exited %d", r, n, statuses[r]);
}

// ---------------------------------------------------------------- values by data type

const ncclDataType_t kTypes[] = {ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64,
                                 ncclUint64, ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16};
const ncclRedOp_t kOps[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
const char* type_name(ncclDataType_t t) {
  static const char* names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                "float16", "float32", "float64", "bfloat16"};
  return names[t];
}
const char* op_name(ncclRedOp_t op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  return names[op];
}
size_t type_size(ncclDataType_t t) {
  static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  return sizes[t];
}
bool is_unsigned(ncclDataType_t t) { return t == ncclUint8 || t == ncclUint32 || t == ncclUint64; }

// Small integers, exact in every type (float16 and bfloat16 hold every integer up to 256).
uint16_t to_half(double v) {  // v: an integer, |v| <= 2048
  if (v == 0) return 0;
  uint16_t sign = v < 0 ? 0x8000 : 0;
  double a = std::fabs(v);
  int e = std::ilogb(a);
  auto mant = static_cast<uint16_t>(std::lround((a / std::ldexp(1.0, e) - 1.0) * 1024));
  return static_cast<uint16_t>(sign | (e + 15) << 10 | mant);
}
double from_half(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}
uint16_t to_bf16(double v) {
  float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);  // exact for these values
}
double from_bf16(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void put(void* p, ncclDataType_t t, size_t i, double v) {
  switch (t) {
    case ncclInt8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case ncclUint8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case ncclInt32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case ncclUint32: static_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(v); break;
    case ncclInt64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case ncclUint64: static_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(v); break;
    case ncclFloat16: static_cast<uint16_t*>(p)[i] = to_half(v); break;
    case ncclFloat32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case ncclFloat64: static_cast<double*>(p)[i] = v; break;
    default: static_cast<uint16_t*>(p)[i] = to_bf16(v); break;
  }
}
double get(const void* p, ncclDataType_t t, size_t i) {
  switch (t) {
    case ncclInt8: return static_cast<const int8_t*>(p)[i];
    case ncclUint8: return static_cast<const uint8_t*>(p)[i];
    case ncclInt32: return static_cast<const int32_t*>(p)[i];
    case ncclUint32: return static_cast<const uint32_t*>(p)[i];
    case ncclInt64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case ncclUint64: return static_cast<double>(static_cast<const uint64_t*>(p)[i]);
    case ncclFloat16: return from_half(static_cast<const uint16_t*>(p)[i]);
    case ncclFloat32: return static_cast<const float*>(p)[i];
    case ncclFloat64: return static_cast<const double*>(p)[i];
    default: return from_bf16(static_cast<const uint16_t*>(p)[i]);
  }
}

// Rank r's element i for OP, chosen so every result is a small integer, exact in every type: sums
// and averages of 2r + i%3 (the average of n ranks is n-1 + i%3), products of 1s and 2s (at most
// 2^4 on 8 ranks), extremes of values in -3..7 (0..10 for unsigned types).
double value(ncclRedOp_t op, ncclDataType_t t, int r, size_t i) {
  switch (op) {
    case ncclProd: return (i % 2 == 1 && r % 2 == 1) ? 2 : 1;
    case ncclMax:
    case ncclMin: return static_cast<double>((r * 7 + i) % 11) - (is_unsigned(t) ? 0 : 3);
    default: return 2.0 * r + static_cast<double>(i % 3);
  }
}
double expected(ncclRedOp_t op, ncclDataType_t t, int n, size_t i) {
  double acc = value(op, t, 0, i);
  for (int r = 1; r < n; ++r) {
    double v = value(op, t, r, i);
    acc = op == ncclProd ? acc * v : op == ncclMax ? std::max(acc, v) : op == ncclMin ? std::min(acc, v) : acc + v;
  }
  return op == ncclAvg ? acc / n : acc;
}

// Device memory holding HOST's bytes; and back.
void* to_device(const std::vector<char>& host) {
  void* d = nullptr;
  CUDA_OK(cudaMalloc(&d, host.size() ? host.size() : 1));
  CUDA_OK(cudaMemcpy(d, host.data(), host.size(), cudaMemcpyHostToDevice));
  return d;
}
std::vector<char> to_host(const void* d, size_t bytes) {
  std::vector<char> host(bytes);
  CUDA_OK(cudaMemcpy(host.data(), d, bytes, cudaMemcpyDeviceToHost));
  return host;
}

constexpr size_t kCount = 1001;

// allreduce of every type with every operation, checked element by element; in place for sum.
void allreduce_everything(Rank& me) {
  for (ncclDataType_t t : kTypes) {
    for (ncclRedOp_t op : kOps) {
      std::vector<char> in(kCount * type_size(t));
      for (size_t i = 0; i < kCount; ++i) put(in.data(), t, i, value(op, t, me.rank, i));
      void* send = to_device(in);
      void* recv = send;
      if (op != ncclSum) CUDA_OK(cudaMalloc(&recv, in.size()));
      NCCL_OK(ncclAllReduce(send, recv, kCount, t, op, me.comm, me.stream));
      CUDA_OK(cudaStreamSynchronize(me.stream));
      auto out = to_host(recv, in.size());
      for (size_t i = 0; i < kCount; ++i) {
        // Exact, but for a floating-point average on the real NCCL, which multiplies by 1/n
        // before it sums: within the type's rounding then.
        double want = expected(op, t, me.size, i), got = get(out.data(), t, i);
        double tolerance = op != ncclAvg || on_standin() ? 0
                           : t == ncclFloat16 || t == ncclBfloat16 ? 1e-2 * std::fabs(want) + 1e-2
                           : t == ncclFloat32                       ? 1e-6 * std::fabs(want)
                           : t == ncclFloat64                       ? 1e-12 * std::fabs(want)
                                                                    : 0;
        RANK_CHECK(std::fabs(got - want) <= tolerance, "allreduce %s %s on %d ranks, element %zu: %g, want %g", type_name(t), op_name(op),
                   me.size, i, got, want);
      }
      if (recv != send) cudaFree(recv);
      cudaFree(send);
    }
  }
}

}  // namespace

START_TEST(allreduce_every_type_and_op_on_1_rank) { expect_all_pass(1, allreduce_everything); }
END_TEST

START_TEST(allreduce_every_type_and_op_on_2_ranks) { expect_all_pass(2, allreduce_everything); }
END_TEST

START_TEST(allreduce_every_type_and_op_on_3_ranks) { expect_all_pass(3, allreduce_everything); }
END_TEST

START_TEST(allreduce_every_type_and_op_on_8_ranks) { expect_all_pass(8, allreduce_everything, 120); }
END_TEST

// broadcast (and in-place bcast) and reduce from every root, in float32 and int64.
START_TEST(broadcast_and_reduce_from_every_root) {
  expect_all_pass(3, [](Rank& me) {
    for (ncclDataType_t t : {ncclFloat32, ncclInt64, ncclBfloat16}) {
      for (int root = 0; root < me.size; ++root) {
        std::vector<char> in(kCount * type_size(t));
        for (size_t i = 0; i < kCount; ++i) put(in.data(), t, i, 10.0 * me.rank + static_cast<double>(i % 7));
        void* send = to_device(in);
        void* recv = nullptr;
        CUDA_OK(cudaMalloc(&recv, in.size()));
        NCCL_OK(ncclBroadcast(send, recv, kCount, t, root, me.comm, me.stream));
        NCCL_OK(ncclBcast(send, kCount, t, root, me.comm, me.stream));
        CUDA_OK(cudaStreamSynchronize(me.stream));
        auto a = to_host(recv, in.size()), b = to_host(send, in.size());
        for (size_t i = 0; i < kCount; ++i) {
          double want = 10.0 * root + static_cast<double>(i % 7);
          RANK_CHECK(get(a.data(), t, i) == want && get(b.data(), t, i) == want, "broadcast %s from %d, element %zu",
                     type_name(t), root, i);
        }
        for (size_t i = 0; i < kCount; ++i) put(in.data(), t, i, value(ncclSum, t, me.rank, i));
        CUDA_OK(cudaMemcpy(send, in.data(), in.size(), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(recv, 0, in.size()));
        NCCL_OK(ncclReduce(send, recv, kCount, t, ncclSum, root, me.comm, me.stream));
        CUDA_OK(cudaStreamSynchronize(me.stream));
        auto c = to_host(recv, in.size());
        for (size_t i = 0; i < kCount; ++i) {
          double want = me.rank == root ? expected(ncclSum, t, me.size, i) : 0;  // only the root's is written
          RANK_CHECK(get(c.data(), t, i) == want, "reduce %s to %d, element %zu: %g, want %g", type_name(t), root, i,
                     get(c.data(), t, i), want);
        }
        cudaFree(send);
        cudaFree(recv);
      }
    }
  });
}
END_TEST

// allgather (and in place) and reduce_scatter on 3 and 8 ranks.
START_TEST(allgather_and_reduce_scatter) {
  for (int n : {3, 8}) {
    expect_all_pass(n, [](Rank& me) {
      const ncclDataType_t t = ncclFloat16;
      const size_t es = type_size(t), total = kCount * static_cast<size_t>(me.size);
      std::vector<char> mine(kCount * es);
      for (size_t i = 0; i < kCount; ++i) put(mine.data(), t, i, me.rank * 3.0 + static_cast<double>(i % 5));
      void* send = to_device(mine);
      void *gathered = nullptr, *in_place = nullptr;
      CUDA_OK(cudaMalloc(&gathered, total * es));
      CUDA_OK(cudaMalloc(&in_place, total * es));
      CUDA_OK(cudaMemcpy(static_cast<char*>(in_place) + me.rank * kCount * es, mine.data(), mine.size(),
                         cudaMemcpyHostToDevice));
      NCCL_OK(ncclAllGather(send, gathered, kCount, t, me.comm, me.stream));
      NCCL_OK(ncclAllGather(static_cast<char*>(in_place) + me.rank * kCount * es, in_place, kCount, t, me.comm,
                            me.stream));
      // reduce_scatter: every rank gives total elements; rank r gets the sums of slice r.
      std::vector<char> all(total * es);
      for (size_t i = 0; i < total; ++i) put(all.data(), t, i, value(ncclSum, t, me.rank, i));
      void* rs_in = to_device(all);
      void* rs_out = nullptr;
      CUDA_OK(cudaMalloc(&rs_out, kCount * es));
      NCCL_OK(ncclReduceScatter(rs_in, rs_out, kCount, t, ncclSum, me.comm, me.stream));
      CUDA_OK(cudaStreamSynchronize(me.stream));
      auto g = to_host(gathered, total * es), p = to_host(in_place, total * es), rs = to_host(rs_out, kCount * es);
      for (int r = 0; r < me.size; ++r) {
        for (size_t i = 0; i < kCount; ++i) {
          double want = r * 3.0 + static_cast<double>(i % 5);
          RANK_CHECK(get(g.data(), t, r * kCount + i) == want, "allgather, rank %d's element %zu", r, i);
          RANK_CHECK(get(p.data(), t, r * kCount + i) == want, "allgather in place, rank %d's element %zu", r, i);
        }
      }
      for (size_t i = 0; i < kCount; ++i) {
        double want = expected(ncclSum, t, me.size, me.rank * kCount + i);
        RANK_CHECK(get(rs.data(), t, i) == want, "reduce_scatter element %zu: %g, want %g", i, get(rs.data(), t, i),
                   want);
      }
      cudaFree(send);
      cudaFree(gathered);
      cudaFree(in_place);
      cudaFree(rs_in);
      cudaFree(rs_out);
    });
  }
}
END_TEST

// alltoall: rank r sends 100*r + j to rank j; every rank gets 100*r + itself from each r.
START_TEST(alltoall_on_3_ranks) {
  expect_all_pass(3, [](Rank& me) {
    const size_t count = 17;
    std::vector<int32_t> in(count * 3);
    for (int j = 0; j < 3; ++j)
      for (size_t i = 0; i < count; ++i) in[j * count + i] = 100 * me.rank + 10 * j + static_cast<int32_t>(i);
    std::vector<char> bytes(reinterpret_cast<char*>(in.data()), reinterpret_cast<char*>(in.data() + in.size()));
    void* send = to_device(bytes);
    void* recv = nullptr;
    CUDA_OK(cudaMalloc(&recv, bytes.size()));
    NCCL_OK(ncclAlltoAll(send, recv, count, ncclInt32, me.comm, me.stream));
    CUDA_OK(cudaStreamSynchronize(me.stream));
    auto out = to_host(recv, bytes.size());
    auto* got = reinterpret_cast<int32_t*>(out.data());
    for (int r = 0; r < 3; ++r)
      for (size_t i = 0; i < count; ++i)
        RANK_CHECK(got[r * count + i] == 100 * r + 10 * me.rank + static_cast<int32_t>(i), "alltoall from %d, %zu: %d",
                   r, i, got[r * count + i]);
    cudaFree(send);
    cudaFree(recv);
  });
}
END_TEST

// send/recv around a ring of 8 in one group (receive first, then send: without the group's
// semantics every rank would wait for its left neighbour forever), twice.
START_TEST(send_recv_ring_in_a_group_on_8_ranks) {
  expect_all_pass(8, [](Rank& me) {
    const int right = (me.rank + 1) % me.size, left = (me.rank + me.size - 1) % me.size;
    for (int round = 0; round < 2; ++round) {
      std::vector<double> v(64, me.rank * 1000.0 + round);
      std::vector<char> bytes(reinterpret_cast<char*>(v.data()), reinterpret_cast<char*>(v.data() + v.size()));
      void* send = to_device(bytes);
      void* recv = nullptr;
      CUDA_OK(cudaMalloc(&recv, bytes.size()));
      NCCL_OK(ncclGroupStart());
      NCCL_OK(ncclRecv(recv, v.size(), ncclFloat64, left, me.comm, me.stream));
      NCCL_OK(ncclSend(send, v.size(), ncclFloat64, right, me.comm, me.stream));
      NCCL_OK(ncclGroupEnd());
      CUDA_OK(cudaStreamSynchronize(me.stream));
      auto out = to_host(recv, bytes.size());
      auto* got = reinterpret_cast<double*>(out.data());
      for (size_t i = 0; i < v.size(); ++i)
        RANK_CHECK(got[i] == left * 1000.0 + round, "round %d: from %d got %g", round, left, got[i]);
      cudaFree(send);
      cudaFree(recv);
    }
  });
}
END_TEST

// Several collectives in one group, on 3 ranks: each gives its own result.
START_TEST(collectives_in_a_group) {
  expect_all_pass(3, [](Rank& me) {
    std::vector<float> a(10, static_cast<float>(me.rank + 1)), b(10, static_cast<float>(me.rank));
    std::vector<char> ab(reinterpret_cast<char*>(a.data()), reinterpret_cast<char*>(a.data() + a.size()));
    std::vector<char> bb(reinterpret_cast<char*>(b.data()), reinterpret_cast<char*>(b.data() + b.size()));
    void* da = to_device(ab);
    void* db = to_device(bb);
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclAllReduce(da, da, a.size(), ncclFloat32, ncclSum, me.comm, me.stream));
    NCCL_OK(ncclAllReduce(db, db, b.size(), ncclFloat32, ncclMax, me.comm, me.stream));
    NCCL_OK(ncclGroupEnd());
    CUDA_OK(cudaStreamSynchronize(me.stream));
    auto ra = to_host(da, ab.size()), rb = to_host(db, bb.size());
    RANK_CHECK(reinterpret_cast<float*>(ra.data())[9] == 6.0f, "grouped sum: %g", reinterpret_cast<float*>(ra.data())[9]);
    RANK_CHECK(reinterpret_cast<float*>(rb.data())[9] == 2.0f, "grouped max: %g", reinterpret_cast<float*>(rb.data())[9]);
    cudaFree(da);
    cudaFree(db);
  });
}
END_TEST

// A stream runs its work in order on its own: the host is not held while a slow kernel runs,
// the stream is "not ready" meanwhile, and a copy queued after the kernel sees what it wrote.
START_TEST(a_stream_runs_its_work_in_order_without_the_host) {
  KernelFn kernel = standin_kernel();
  cudaStream_t s;
  ck_assert_int_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  int *dev = nullptr, late = 42, host = 0;
  ck_assert_int_eq(cudaMalloc(reinterpret_cast<void**>(&dev), sizeof(int)), cudaSuccess);
  ck_assert_int_eq(cudaMemsetAsync(dev, 0, sizeof(int), s), cudaSuccess);
  auto t0 = std::chrono::steady_clock::now();
  ck_assert_int_eq(kernel(s, 300, dev, &late, sizeof late), 0);
  ck_assert_int_eq(cudaMemcpyAsync(&host, dev, sizeof host, cudaMemcpyDeviceToHost, s), cudaSuccess);
  double queued_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ck_assert_msg(queued_ms < 150, "queueing took %.0f ms: the host waited for the kernel", queued_ms);
  ck_assert_int_eq(cudaStreamQuery(s), cudaErrorNotReady);
  ck_assert_int_eq(host, 0);
  ck_assert_int_eq(cudaStreamSynchronize(s), cudaSuccess);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ck_assert_msg(ms >= 290, "the kernel took %.0f ms, not 300", ms);
  ck_assert_int_eq(host, 42);
  ck_assert_int_eq(cudaStreamQuery(s), cudaSuccess);
  cudaFree(dev);
  cudaStreamDestroy(s);
}
END_TEST

// Events: a point in a stream; another stream waits on it without blocking the host; query,
// synchronize and the time between two.
START_TEST(an_event_orders_two_streams_without_the_host) {
  KernelFn kernel = standin_kernel();
  cudaStream_t producer, consumer;
  cudaEvent_t start, ready;
  ck_assert_int_eq(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  ck_assert_int_eq(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
  ck_assert_int_eq(cudaEventCreate(&start), cudaSuccess);
  ck_assert_int_eq(cudaEventCreateWithFlags(&ready, cudaEventDefault), cudaSuccess);
  ck_assert_int_eq(cudaEventQuery(ready), cudaSuccess);  // never recorded: complete
  int *a = nullptr, *b = nullptr, seven = 7, host = 0;
  ck_assert_int_eq(cudaMalloc(reinterpret_cast<void**>(&a), sizeof(int)), cudaSuccess);
  ck_assert_int_eq(cudaMalloc(reinterpret_cast<void**>(&b), sizeof(int)), cudaSuccess);
  ck_assert_int_eq(cudaMemset(a, 0, sizeof(int)), cudaSuccess);
  ck_assert_int_eq(cudaEventRecord(start, producer), cudaSuccess);
  ck_assert_int_eq(kernel(producer, 250, a, &seven, sizeof seven), 0);
  ck_assert_int_eq(cudaEventRecord(ready, producer), cudaSuccess);
  ck_assert_int_eq(cudaStreamWaitEvent(consumer, ready, 0), cudaSuccess);
  ck_assert_int_eq(cudaMemcpyAsync(b, a, sizeof(int), cudaMemcpyDeviceToDevice, consumer), cudaSuccess);
  ck_assert_int_eq(cudaMemcpyAsync(&host, b, sizeof(int), cudaMemcpyDeviceToHost, consumer), cudaSuccess);
  ck_assert_int_eq(cudaEventQuery(ready), cudaErrorNotReady);
  ck_assert_int_eq(cudaStreamQuery(consumer), cudaErrorNotReady);
  ck_assert_int_eq(cudaStreamSynchronize(consumer), cudaSuccess);
  ck_assert_int_eq(host, 7);  // copied after the producer's late write, not before it
  ck_assert_int_eq(cudaEventSynchronize(ready), cudaSuccess);
  float ms = 0;
  ck_assert_int_eq(cudaEventElapsedTime(&ms, start, ready), cudaSuccess);
  ck_assert_msg(ms >= 240 && ms < 5000, "elapsed %.1f ms, not about 250", static_cast<double>(ms));
  cudaEventDestroy(start);
  cudaEventDestroy(ready);
  cudaFree(a);
  cudaFree(b);
  cudaStreamDestroy(producer);
  cudaStreamDestroy(consumer);
}
END_TEST

// A collective on 2 ranks reads its input when the stream reaches it: a producer kernel that
// writes it late, on another stream the collective's waits for through an event, is still seen.
START_TEST(a_collective_waits_for_a_late_producer_through_an_event) {
  expect_all_pass(2, [](Rank& me) {
    KernelFn kernel = standin_kernel();
    cudaStream_t producer;
    cudaEvent_t done;
    CUDA_OK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
    CUDA_OK(cudaEventCreate(&done));
    std::vector<float> late(100, static_cast<float>(me.rank + 1));
    float* buf = nullptr;
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&buf), late.size() * sizeof(float)));
    CUDA_OK(cudaMemsetAsync(buf, 0, late.size() * sizeof(float), producer));
    RANK_CHECK(kernel(producer, 200 + 100 * me.rank, buf, late.data(), late.size() * sizeof(float)) == 0, "kernel");
    CUDA_OK(cudaEventRecord(done, producer));
    CUDA_OK(cudaStreamWaitEvent(me.stream, done, 0));
    NCCL_OK(ncclAllReduce(buf, buf, late.size(), ncclFloat32, ncclSum, me.comm, me.stream));
    RANK_CHECK(cudaStreamQuery(me.stream) == cudaErrorNotReady, "the collective finished before its input was made");
    CUDA_OK(cudaStreamSynchronize(me.stream));
    std::vector<float> out(late.size());
    CUDA_OK(cudaMemcpy(out.data(), buf, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (float v : out) RANK_CHECK(v == 3.0f, "sum of the late inputs: %g, want 3", static_cast<double>(v));
    cudaEventDestroy(done);
    cudaStreamDestroy(producer);
    cudaFree(buf);
  });
}
END_TEST

// The counters: copies by direction (cudaMemcpyDefault resolved by the pointers) and each call
// that blocks the host; a collective and the calls that do not block count nothing.
START_TEST(the_counters_count_copies_and_host_blocking_calls) {
  CounterFn counter = standin_counter();
  standin_reset()();
  ck_assert_int_eq(counter("no such counter"), -1);
  cudaStream_t s;
  cudaEvent_t e;
  ck_assert_int_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ck_assert_int_eq(cudaEventCreate(&e), cudaSuccess);
  char host[64] = {1}, back[64];
  void *d1 = nullptr, *d2 = nullptr;
  ck_assert_int_eq(cudaMalloc(&d1, sizeof host), cudaSuccess);
  ck_assert_int_eq(cudaMalloc(&d2, sizeof host), cudaSuccess);
  ck_assert_int_eq(cudaMemcpy(d1, host, sizeof host, cudaMemcpyHostToDevice), cudaSuccess);
  ck_assert_int_eq(cudaMemcpyAsync(d2, d1, sizeof host, cudaMemcpyDefault, s), cudaSuccess);
  ck_assert_int_eq(cudaMemcpyAsync(back, d2, sizeof host, cudaMemcpyDefault, s), cudaSuccess);
  ck_assert_int_eq(cudaMemcpyAsync(back, host, sizeof host, cudaMemcpyHostToHost, s), cudaSuccess);
  ck_assert_int_eq(cudaEventRecord(e, s), cudaSuccess);
  ck_assert_int_eq(cudaStreamWaitEvent(nullptr, e, 0), cudaSuccess);
  while (cudaEventQuery(e) != cudaSuccess) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ck_assert_int_eq(counter("memcpy_htod"), 1);
  ck_assert_int_eq(counter("memcpy_dtod"), 1);
  ck_assert_int_eq(counter("memcpy_dtoh"), 1);
  ck_assert_int_eq(counter("memcpy_htoh"), 1);
  ck_assert_int_eq(counter("stream_synchronize"), 0);
  ck_assert_int_eq(counter("event_synchronize"), 0);
  ck_assert_int_eq(counter("device_synchronize"), 0);
  ck_assert_int_eq(cudaStreamSynchronize(s), cudaSuccess);
  ck_assert_int_eq(cudaEventSynchronize(e), cudaSuccess);
  ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
  ck_assert_int_eq(counter("stream_synchronize"), 1);
  ck_assert_int_eq(counter("event_synchronize"), 1);
  ck_assert_int_eq(counter("device_synchronize"), 1);
  standin_reset()();
  ck_assert_int_eq(counter("memcpy_htod"), 0);
  cudaEventDestroy(e);
  cudaStreamDestroy(s);
  cudaFree(d1);
  cudaFree(d2);
}
END_TEST

// A peer that died: the survivor's collective stays pending (NCCL's kernels wait), its
// communicator reports ncclRemoteError, and ncclCommAbort ends the wait.
START_TEST(a_dead_peer_is_a_remote_error_and_abort_ends_the_wait) {
  auto statuses = run_ranks(2, [](Rank& me) {
    if (me.rank == 1) _exit(kDied);
    float x = 1;
    float* d = nullptr;
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&d), sizeof x));
    NCCL_OK(ncclAllReduce(d, d, 1, ncclFloat32, ncclSum, me.comm, me.stream));
    ncclResult_t async = ncclSuccess;
    for (int i = 0; i < 2000 && async == ncclSuccess; ++i) {
      RANK_CHECK(cudaStreamQuery(me.stream) == cudaErrorNotReady, "the allreduce finished without its peer");
      NCCL_OK(ncclCommGetAsyncError(me.comm, &async));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    RANK_CHECK(async == ncclRemoteError, "ncclCommGetAsyncError: %d, not ncclRemoteError", async);
    NCCL_OK(ncclCommAbort(me.comm));
    for (int i = 0; i < 2000 && cudaStreamQuery(me.stream) != cudaSuccess; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    RANK_CHECK(cudaStreamQuery(me.stream) == cudaSuccess, "the stream still waits after ncclCommAbort");
    cudaFree(d);
    std::fflush(nullptr);
    _exit(0);
  });
  ck_assert_int_eq(statuses[1], kDied);
  ck_assert_msg(statuses[0] == 0, "the surviving rank exited %d", statuses[0]);
}
END_TEST

namespace {

// Each case: how many ranks it starts, and whether it needs the stand-in's own calls.
struct Case {
  const char* name;
  const TTest* test;
  int ranks;
  bool standin_only;
};
const Case kCases[] = {
    {"allreduce_every_type_and_op_on_1_rank", allreduce_every_type_and_op_on_1_rank, 1, false},
    {"allreduce_every_type_and_op_on_2_ranks", allreduce_every_type_and_op_on_2_ranks, 2, false},
    {"allreduce_every_type_and_op_on_3_ranks", allreduce_every_type_and_op_on_3_ranks, 3, false},
    {"allreduce_every_type_and_op_on_8_ranks", allreduce_every_type_and_op_on_8_ranks, 8, false},
    {"broadcast_and_reduce_from_every_root", broadcast_and_reduce_from_every_root, 3, false},
    {"allgather_and_reduce_scatter", allgather_and_reduce_scatter, 8, false},
    {"alltoall_on_3_ranks", alltoall_on_3_ranks, 3, false},
    {"send_recv_ring_in_a_group_on_8_ranks", send_recv_ring_in_a_group_on_8_ranks, 8, false},
    {"collectives_in_a_group", collectives_in_a_group, 3, false},
    {"a_stream_runs_its_work_in_order_without_the_host", a_stream_runs_its_work_in_order_without_the_host, 1, true},
    {"an_event_orders_two_streams_without_the_host", an_event_orders_two_streams_without_the_host, 1, true},
    {"a_collective_waits_for_a_late_producer_through_an_event", a_collective_waits_for_a_late_producer_through_an_event,
     2, true},
    {"the_counters_count_copies_and_host_blocking_calls", the_counters_count_copies_and_host_blocking_calls, 1, true},
    {"a_dead_peer_is_a_remote_error_and_abort_ends_the_wait", a_dead_peer_is_a_remote_error_and_abort_ends_the_wait, 2,
     true},
};

// Why CASE cannot run here, or nullptr: on the real libraries, the stand-in's own calls are
// missing, and NCCL takes one device per rank.
const char* cannot_run(const Case& c) {
  static char why[160];
  if (on_standin()) return nullptr;
  if (c.standin_only) return "it needs the stand-in's own calls (standin.h)";
  int devices = 0;
  cudaGetDeviceCount(&devices);
  if (devices >= c.ranks) return nullptr;
  std::snprintf(why, sizeof why, "%d ranks need %d devices, this machine has %d", c.ranks, c.ranks, devices);
  return why;
}

}  // namespace

// Every case that can run here, each its own TCase (CK_RUN_CASE=NAME runs one); exits 77
// (skipped) when the one CK_RUN_CASE names cannot run here.
int main() {
  const char* only = getenv("CK_RUN_CASE");
  Suite* s = suite_create("gpu_standin");
  for (const Case& c : kCases) {
    const char* why = cannot_run(c);
    if (only && std::strcmp(only, c.name) == 0 && why) {
      std::printf("skipped: %s: %s\n", c.name, why);
      return 77;
    }
    if (why) {
      std::printf("skipped: %s: %s\n", c.name, why);
      continue;
    }
    TCase* tc = tcase_create(c.name);
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, c.test);
    suite_add_tcase(s, tc);
  }
  SRunner* sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
