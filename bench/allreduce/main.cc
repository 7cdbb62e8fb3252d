// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// allreduce_bench: run under mpirun (e.g. `mpirun -np 2 allreduce_bench`). For each size from
// --min to --max bytes (x4 steps by default) every implementation runs the same float32 sum in
// place; the table prints nccl-tests columns per implementation, then ratios and the fraction
// of the memory-copy bound (busbw bound = per-rank concurrent copy GB/s x 2(n-1)/n).
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "harness.h"

namespace bench {
namespace {

struct Result {
  double time_us = 0, algbw = 0, busbw = 0;
  long wrong = 0;
};

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double max_over_ranks(double v) {
  double out = v;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

// Elements != n(n+1)/2 after one allreduce of (rank+1), summed over ranks.
long count_wrong(Impl& impl, float* buf, size_t count, const World& w) {
  std::fill(buf, buf + count, static_cast<float>(w.rank + 1));
  impl.allreduce(buf, count);
  float want = static_cast<float>(w.size * (w.size + 1) / 2);
  long wrong = 0, total = 0;
  for (size_t i = 0; i < count; ++i) wrong += buf[i] != want;
  MPI_Allreduce(&wrong, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

// Checks the result and sizes a timed loop of ~0.25 s (the warm-up call sets its length).
int prepare(Impl& impl, float* buf, size_t count, const World& w, Result& r) {
  r.wrong = count_wrong(impl, buf, count, w);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = now();
  impl.allreduce(buf, count);
  int iters = static_cast<int>(std::clamp(0.25 / std::max(max_over_ranks(now() - t0), 1e-7), 2.0, 200.0));
  MPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return iters;
}

// Seconds per call over one timed loop: the slowest rank's mean.
double time_loop(Impl& impl, float* buf, size_t count, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = now();
  for (int i = 0; i < iters; ++i) impl.allreduce(buf, count);
  return max_over_ranks(now() - t0) / iters;
}

// Every implementation at one size: `best_of` rounds, each timing one loop of every
// implementation in turn, keeping each one's fastest loop. Interleaving the rounds puts a burst
// of load from elsewhere (this machine is shared; load only ever slows a loop) on all of them
// alike instead of on whichever happened to be running.
std::vector<Result> measure_all(std::vector<std::unique_ptr<Impl>>& impls, float* buf,
                                size_t count, const World& w, int best_of) {
  std::vector<Result> results(impls.size());
  std::vector<int> iters(impls.size());
  std::vector<double> secs(impls.size(), 1e30);
  for (size_t k = 0; k < impls.size(); ++k) iters[k] = prepare(*impls[k], buf, count, w, results[k]);
  for (int rep = 0; rep < best_of; ++rep)
    for (size_t k = 0; k < impls.size(); ++k)
      secs[k] = std::min(secs[k], time_loop(*impls[k], buf, count, iters[k]));
  double bytes = static_cast<double>(count) * sizeof(float);
  for (size_t k = 0; k < impls.size(); ++k) {
    results[k].time_us = secs[k] * 1e6;
    results[k].algbw = bytes / secs[k] / 1e9;
    results[k].busbw = results[k].algbw * 2.0 * (w.size - 1) / w.size;
  }
  return results;
}

// STREAM-style copy: every rank copies `bytes` at once; returns per-rank GB/s (best of 5).
double copy_bandwidth(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    std::memcpy(b.data(), a.data(), bytes);
    best = std::min(best, max_over_ranks(now() - t0));
  }
  return static_cast<double>(bytes) / best / 1e9;
}

size_t parse_size(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return static_cast<size_t>(v);
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  using namespace bench;
  MPI_Init(&argc, &argv);
  World w;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
  size_t min_bytes = 4096, max_bytes = 256u << 20, factor = 4;
  int best_of = 1;
  size_t offset = 0;  // bytes the buffer starts past what the allocator gave (a multiple of 4)
  std::vector<std::string> which = {"libtrain", "openmpi", "gloo"};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--min")) min_bytes = parse_size(argv[i + 1]);
    if (!std::strcmp(argv[i], "--max")) max_bytes = parse_size(argv[i + 1]);
    if (!std::strcmp(argv[i], "--factor")) factor = parse_size(argv[i + 1]);
    if (!std::strcmp(argv[i], "--only")) which = {argv[i + 1]};
    if (!std::strcmp(argv[i], "--best-of")) best_of = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--offset")) offset = parse_size(argv[i + 1]);
  }
  char host[256] = {};
  if (w.rank == 0) gethostname(host, sizeof(host) - 1);
  MPI_Bcast(host, sizeof(host), MPI_CHAR, 0, MPI_COMM_WORLD);
  w.master_host = host;

  std::vector<std::unique_ptr<Impl>> impls;
  for (const auto& name : which) {
    if (name == "libtrain") impls.push_back(make_libtrain(w));
    if (name == "openmpi") impls.push_back(make_mpi(w));
    if (name == "gloo") impls.push_back(make_gloo(w));
  }
  double copy = copy_bandwidth(std::min<size_t>(max_bytes, 256u << 20));
  double bound = copy * 2.0 * (w.size - 1) / w.size;
  std::vector<float> storage((max_bytes + offset) / sizeof(float) + 1);
  float* buf = storage.data() + offset / sizeof(float);
  if (w.rank == 0) {
    std::printf("# allreduce float32 sum, %d ranks; copy bound: %.2f GB/s per rank -> busbw bound %.2f GB/s;"
                " best of %d\n", w.size, copy, bound, best_of);
    std::printf("#%11s %12s %6s", "size", "count", "type");
    for (auto& impl : impls)
      std::printf(" | %-8s %9s %7s %7s %5s", impl->name().c_str(), "time(us)", "algbw", "busbw", "wrong");
    std::printf(" | %s\n", impls.size() == 3 ? "lt/mpi lt/gloo lt/bound" : "");
  }
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    size_t count = bytes / sizeof(float);
    std::vector<Result> results = measure_all(impls, buf, count, w, best_of);
    if (w.rank != 0) continue;
    std::printf("%12zu %12zu %6s", bytes, count, "float");
    for (auto& r : results)
      std::printf(" | %8s %9.1f %7.2f %7.2f %5ld", "", r.time_us, r.algbw, r.busbw, r.wrong);
    if (results.size() == 3)
      std::printf(" | %6.2f %7.2f %8.2f", results[0].busbw / results[1].busbw,
                  results[0].busbw / results[2].busbw, results[0].busbw / bound);
    std::printf("\n");
    std::fflush(stdout);
  }
  impls.clear();
  MPI_Finalize();
  return 0;
}
