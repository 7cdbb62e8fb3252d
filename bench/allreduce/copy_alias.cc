// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// copy_alias: does this CPU copy slowly when the destination is a few bytes ahead of the source
// modulo 4096? The kernel's copies between user buffers and socket memory are `rep movsb` on
// x86 (copy_user with FSRM/ERMS), and glibc's memcpy uses it too at these sizes. On the AMD EPYC
// of our development VM both ran 16x slower at distances 1-15 and up to 1.4x at 20-28 and 48,
// which is why libtrain's TCP ring keeps its stream 64-byte aligned (libtrain/src/socket.h).
// Run it on a cluster node to see whether the effect exists there:
//
//   build/bench/allreduce/copy_alias [bytes]     (default 65536)
//
// Prints, per distance (dst - src) mod 4096, the best time of `rep movsb` and of memcpy, and
// their ratio to distance 0. No MPI; one process.
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

using Clock = std::chrono::steady_clock;

void rep_movsb(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
#else
  std::memcpy(dst, src, n);
#endif
}

template <class Copy>
double best_ns(Copy copy, char* dst, const char* src, size_t n) {
  double best = 1e30;
  for (int i = 0; i < 200; ++i) {
    auto t0 = Clock::now();
    copy(dst, src, n);
    asm volatile("" : : "r"(dst) : "memory");  // keep the copy
    best = std::min(best, std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : 65536;
  size_t span = n + 3 * 4096;
  auto* src = static_cast<char*>(mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  auto* dst = static_cast<char*>(mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (src == MAP_FAILED || dst == MAP_FAILED) {
    std::perror("copy_alias: mmap");
    return 1;
  }
  std::memset(src, 1, span);
  std::memset(dst, 2, span);
  auto movsb = [](char* d, const char* s, size_t len) { rep_movsb(d, s, len); };
  auto libc = [](char* d, const char* s, size_t len) { std::memcpy(d, s, len); };
  const char* s = src + 4096;
  double base_movsb = best_ns(movsb, dst + 4096, s, n), base_libc = best_ns(libc, dst + 4096, s, n);
  std::printf("# %zu-byte copies; distance = (dst - src) mod 4096; time in ns (ratio to distance 0)\n", n);
  std::printf("%9s %18s %18s\n", "distance", "rep movsb", "memcpy");
  for (int d : {0, 4, 8, 12, 16, 20, 24, 28, 32, 48, 64, 4032, 4080, 4088}) {
    double m = best_ns(movsb, dst + 4096 + d, s, n), c = best_ns(libc, dst + 4096 + d, s, n);
    std::printf("%9d %10.0f (%4.1fx) %10.0f (%4.1fx)\n", d, m, m / base_movsb, c, c / base_libc);
  }
  return 0;
}
