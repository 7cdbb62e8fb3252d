// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The node's shared-memory segment: creation, attachment, the barrier every collective is built
// from, op-header agreement, failure propagation and the CMA probe (the algorithms are in
// shm_collectives.cc). Waits spin briefly, then sleep on a futex in the segment (FUTEX_WAIT on
// shared memory works across processes: futex(2)), checking the abort flag, peer liveness and the
// deadline every 20 ms. When the node's ranks outnumber its CPUs they yield instead of spinning.
// The op-header check rides on the first barrier of each collective, so small collectives cost
// one barrier.
#include "shm_group.h"

#include <linux/futex.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <fstream>
#include <random>
#include <sched.h>
#include <thread>

#include "auto_size.h"
#include "failure.h"
#include "libtrain/errors.h"
#include "socket.h"

namespace libtrain::detail {
namespace {

constexpr int kMaxLocal = kMaxLocalRanks;
constexpr int kSpins = 4000;
constexpr long kSleepNs = 20'000'000;
constexpr auto kIdleYield = std::chrono::nanoseconds(1500);
constexpr int kMaxIdleYields = 16;
constexpr size_t kAlign = 4096;
constexpr size_t kMaxSlotBytes = size_t{1} << 30;  // LIBTRAIN_SHM_CHUNK's bound (env.cc)
constexpr uint64_t kProbe = 0x4c54434d41505242;  // what a CMA probe must read back
constexpr size_t kAutoOnePhase = 16 * 1024;  // two-phase measured faster from 32 KiB (README)

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

void futex_wait(std::atomic<uint32_t>* addr, uint32_t expected, long ns) {
  timespec ts{0, ns};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* addr) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// A pid that no longer runs, or a zombie nobody reaped yet.
bool is_dead(pid_t pid) {
  if (::kill(pid, 0) == -1 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() &&
         (line[paren + 2] == 'Z' || line[paren + 2] == 'X');
}

}  // namespace

struct ShmGroup::Header {
  alignas(64) std::atomic<uint32_t> arrived;
  alignas(64) std::atomic<uint32_t> generation;
  std::atomic<uint32_t> sleepers;  // ranks in FUTEX_WAIT on generation: no syscall to wake nobody
  alignas(64) std::atomic<uint32_t> attached;
  std::atomic<uint32_t> aborted;
  char abort_msg[512];
  pid_t pids[kMaxLocal];
  OpHeader ops[2][kMaxLocal];  // indexed by seq parity: a fast rank never overwrites a live one
  // CMA: each rank's buffer for the current collective, written before its first barrier and
  // read by peers only between that barrier and the last one, so one entry per rank suffices.
  uint64_t addrs[kMaxLocal];
  uint8_t cma_ok[kMaxLocal];
  cpu_set_t cpus[kMaxLocal];  // where each rank may run: oversubscribed when ranks > their union
  // Barriers each rank entered: at a timeout the ranks behind the others are the ones that hung.
  // A cache line each: every rank writes its own at every barrier.
  struct alignas(64) Count {
    std::atomic<uint32_t> value;
  } entered[kMaxLocal];
  Count busy[kMaxLocal];  // set_busy_elsewhere
};

std::string ShmGroup::create_name() {
  std::random_device rd;
  uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char buf[64];
  std::snprintf(buf, sizeof(buf), "/libtrain-%d-%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(r));
  return buf;
}

// Every check comes before shm_open; from shm_open on, segment_ owns what exists, so a throw
// unmaps and (for the leader) unlinks it. slot_bytes_ is clamped only so that its rounding cannot
// overflow before the check below rejects the size.
ShmGroup::ShmGroup(const std::string& name, bool create, int local_rank, int local_size,
                   size_t slot_bytes, Seconds timeout)
    : slot_bytes_(round_up(std::min(slot_bytes, kMaxSlotBytes), kAlign)), chunk_bytes_(slot_bytes_),
      rank_(local_rank), size_(local_size), timeout_(timeout) {
  if (local_size < 1 || local_size > kMaxLocal)
    throw InvalidArgument("libtrain: " + std::to_string(local_size) + " ranks on one node; at most " +
                          std::to_string(kMaxLocal) + " are supported");
  if (local_rank < 0 || local_rank >= local_size)
    throw InvalidArgument("libtrain: local rank " + std::to_string(local_rank) + " outside a node of " +
                          std::to_string(local_size));
  if (slot_bytes == 0 || slot_bytes > kMaxSlotBytes)
    throw InvalidArgument("libtrain: shared-memory slot of " + std::to_string(slot_bytes) +
                          " bytes; use 1 to " + std::to_string(kMaxSlotBytes) + " (LIBTRAIN_SHM_CHUNK)");
  size_t header = round_up(sizeof(Header), kAlign);
  size_t bytes = header + slot_bytes_ * 2 * static_cast<size_t>(local_size);
  segment_ = create ? ShmSegment::create(name, bytes) : ShmSegment::open(name, bytes);
  hdr_ = static_cast<Header*>(segment_.data());
  base_ = static_cast<uint8_t*>(segment_.data()) + header;
  hdr_->pids[rank_] = ::getpid();
  cpu_set_t& mine = hdr_->cpus[rank_];
  if (::sched_getaffinity(0, sizeof(mine), &mine) != 0) {  // unknown: assume every online CPU
    CPU_ZERO(&mine);
    for (unsigned c = 0; c < std::thread::hardware_concurrency() && c < CPU_SETSIZE; ++c) CPU_SET(c, &mine);
  }
  hdr_->attached.fetch_add(1);  // a fresh segment is zero-filled: all counters start at 0
  futex_wake_all(&hdr_->attached);
}

uint8_t* ShmGroup::slot(int rank, int buf) const {
  return base_ + slot_bytes_ * static_cast<size_t>(2 * rank + buf);
}

void ShmGroup::wait_attached(const ShmTuning& tuning) {
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout_);
  uint32_t n;
  while ((n = hdr_->attached.load()) < static_cast<uint32_t>(size_)) {
    if (Clock::now() >= deadline)
      throw TimeoutError("libtrain: only " + std::to_string(n) + " of " + std::to_string(size_) +
                         " local ranks attached shared memory " + segment_.name() + " within LIBTRAIN_TIMEOUT");
    futex_wait(&hdr_->attached, n, kSleepNs);
  }
  segment_.unlink();  // the leader's name; the others' unlink() does nothing
  find_oversubscription();
  chunk_bytes_ = tuning.chunk_bytes == kAuto && oversubscribed_
                     ? std::min(slot_bytes_, kOversubscribedChunk)
                     : slot_bytes_;
  one_phase_bytes_ = tuning.one_phase_bytes != kAuto ? tuning.one_phase_bytes
                     : oversubscribed_                  ? 0
                                                        : kAutoOnePhase;
  yield_ = std::chrono::microseconds(tuning.yield_us);
  // Only this rank's waiting depends on it, so the ranks need not agree (their thread counts may
  // differ): the chunk sizes above, which must agree, stay on oversubscribed_.
  shares_cpus_ = oversubscribed_ ||
                 (tuning.compute_threads > 0 &&
                  static_cast<int64_t>(size_) * (tuning.compute_threads + 1) > cpus_);
  cma_min_bytes_ = tuning.cma_min_bytes;
  probe_cma(cma_min_bytes_ > 0);
}

// Every rank wrote its mask before counting itself attached, so all ranks compute the same
// answer (the one-phase size depends on it and must agree, or the barriers would not pair up).
void ShmGroup::find_oversubscription() {
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int j = 0; j < size_; ++j) CPU_OR(&all, &all, &hdr_->cpus[j]);
  cpus_ = CPU_COUNT(&all);
  oversubscribed_ = size_ > cpus_;
}

// Every rank reads a known word from every peer; CMA is used only if all of them could (the
// choice must be the same on every rank, or their barriers would not pair up). It needs the
// same user namespace and uid, a dumpable process (execve makes it so), no seccomp rule against
// process_vm_readv, and under Yama ptrace_scope=1 the PR_SET_PTRACER_ANY below (as OpenMPI's
// vader does), which lets processes of the same user read this one.
void ShmGroup::probe_cma(bool wanted) {
  static const volatile uint64_t probe = kProbe;
  if (wanted) ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);  // EINVAL without Yama: fine
  publish_address(const_cast<const uint64_t*>(&probe));
  barrier();
  bool ok = wanted;
  for (int j = 0; j < size_ && ok; ++j) {
    uint64_t got = 0;
    iovec local{&got, sizeof(got)}, remote{reinterpret_cast<void*>(hdr_->addrs[j]), sizeof(got)};
    ok = j == rank_ || (::process_vm_readv(hdr_->pids[j], &local, 1, &remote, 1, 0) ==
                            static_cast<ssize_t>(sizeof(got)) && got == kProbe);
  }
  hdr_->cma_ok[rank_] = ok ? 1 : 0;
  barrier();
  use_cma_ = true;
  for (int j = 0; j < size_; ++j) use_cma_ = use_cma_ && hdr_->cma_ok[j];
  barrier();  // nobody publishes a collective's address while a peer still reads cma_ok
}

void ShmGroup::publish_address(const void* p) {
  hdr_->addrs[rank_] = reinterpret_cast<uint64_t>(p);
}

uint64_t ShmGroup::hdr_addr(int rank) const { return hdr_->addrs[rank]; }

// Copies `bytes` from `remote` in local rank `peer`'s memory; the kernel checks the range, so a
// wrong address fails with EFAULT instead of corrupting anything.
void ShmGroup::read_peer(int peer, uint64_t remote, void* local, size_t bytes) {
  auto* dst = static_cast<uint8_t*>(local);
  for (size_t done = 0; done < bytes;) {
    iovec l{dst + done, bytes - done}, r{reinterpret_cast<void*>(remote + done), bytes - done};
    ssize_t n = ::process_vm_readv(hdr_->pids[peer], &l, 1, &r, 1, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ESRCH) throw_dead(peer);
    check_peers();  // an abort or a death explains the failure better than errno
    LIBTRAIN_SYS(-1, "process_vm_readv from local rank " + std::to_string(peer));
  }
}

void ShmGroup::abort(const std::string& why) noexcept {
  uint32_t expected = 0;
  if (hdr_->aborted.compare_exchange_strong(expected, 2)) {
    std::snprintf(hdr_->abort_msg, sizeof(hdr_->abort_msg), "%s", why.c_str());
    hdr_->aborted.store(1);
  }
  futex_wake_all(&hdr_->generation);
}

void ShmGroup::set_identity(std::vector<int> global_ranks, std::string node) {
  global_ranks_ = std::move(global_ranks);
  node_ = std::move(node);
}

std::string ShmGroup::who(int local) const {
  if (static_cast<int>(global_ranks_.size()) != size_) return "local rank " + std::to_string(local);
  return rank_on_node(global_ranks_[static_cast<size_t>(local)], node_) + " (local rank " +
         std::to_string(local) + ")";
}

void ShmGroup::throw_dead(int local) const {
  throw PeerError("libtrain: " + who(local) + " died during a collective (pid " +
                  std::to_string(hdr_->pids[local]) + " is gone)");
}

void ShmGroup::set_busy_elsewhere(bool busy) noexcept {
  hdr_->busy[rank_].value.store(busy ? 1 : 0, std::memory_order_relaxed);
}

// The ranks that entered the fewest barriers: the ones the others wait for.
std::vector<int> ShmGroup::laggards() const {
  uint32_t least = hdr_->entered[rank_].value.load(std::memory_order_relaxed);
  for (int i = 0; i < size_; ++i)
    least = std::min(least, hdr_->entered[i].value.load(std::memory_order_relaxed));
  std::vector<int> out;
  for (int i = 0; i < size_; ++i)
    if (i != rank_ && hdr_->entered[i].value.load(std::memory_order_relaxed) == least) out.push_back(i);
  return out;
}

void ShmGroup::throw_stalled() const {
  std::string behind;
  for (int i : laggards()) behind += (behind.empty() ? "" : ", ") + who(i);
  if (behind.empty()) behind = "a local rank";
  throw TimeoutError("libtrain: " + behind + " did not reach the collective within LIBTRAIN_TIMEOUT "
                     "while the other ranks of its node waited: it hung, was stopped, or stopped "
                     "calling collectives");
}

void ShmGroup::check_peers() {
  if (hdr_->aborted.load() == 1) throw RelayedFailure(hdr_->abort_msg);
  for (int i = 0; i < size_; ++i)
    if (i != rank_ && is_dead(hdr_->pids[i])) throw_dead(i);
}

// CPUs to spare: spin briefly, then sleep. Shared (shares_cpus()), spinning would steal the CPU the
// awaited rank or this rank's own compute threads need (measured: bench/torch/README.md), and a futex sleep costs every waiter a wake-up syscall and two context
// switches per barrier, which dominated small collectives with 4 ranks on 2 CPUs: yield the CPU
// instead (as OpenMPI's mpi_yield_when_idle does) for up to yield_, then sleep.
void ShmGroup::wait_generation(uint32_t gen) {
  auto passed = [&] { return hdr_->generation.load(std::memory_order_acquire) != gen; };
  for (int i = 0, limit = shares_cpus_ ? 0 : kSpins; i < limit; ++i) {
    if (passed()) return;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  auto now = Clock::now();
  auto deadline = now + std::chrono::duration_cast<Clock::duration>(timeout_);
  auto yield_until = shares_cpus_ ? now + yield_ : now;
  auto next_check = now + std::chrono::nanoseconds(kSleepNs);
  int idle_yields = 0;
  bool extended = false;
  while (!passed()) {
    if ((now = Clock::now()) >= next_check) {
      next_check = now + std::chrono::nanoseconds(kSleepNs);
      try {
        check_peers();
      } catch (const PeerError&) {
        // A peer may have completed this barrier and then failed: the barrier still counts.
        if (passed()) return;
        throw;
      }
      if (now >= deadline) {
        // Waiting for ranks that wait elsewhere under their own timeout: once more, so that
        // theirs fires first and their report names whom they waited for.
        auto behind = laggards();
        bool elsewhere = !behind.empty() && !extended;
        for (int i : behind) elsewhere = elsewhere && hdr_->busy[i].value.load(std::memory_order_relaxed);
        if (!elsewhere) throw_stalled();
        extended = true;
        deadline = now + std::chrono::duration_cast<Clock::duration>(timeout_);
      }
    }
    if (now < yield_until) {
      ::sched_yield();
      // A yield that returns at once (~0.6 us here; ~3 us when it ran another task) means no
      // other task wants this CPU: keep that up and this CPU stays busy doing nothing while
      // the awaited ranks queue on the other CPUs (measured: 4 ranks on 2 CPUs then ran at a
      // third of their speed, stuck that way). Sleep instead, so the CPU goes idle and the
      // scheduler pulls a waiting rank over.
      idle_yields = Clock::now() - now < kIdleYield ? idle_yields + 1 : 0;
      if (idle_yields >= kMaxIdleYields) yield_until = now;
      continue;
    }
    // Dekker pairing with barrier(): I publish sleepers then re-read generation (inside
    // FUTEX_WAIT, atomically); the last arriver publishes generation then reads sleepers. With
    // seq_cst one of us sees the other, so a wake-up is never lost.
    hdr_->sleepers.fetch_add(1);
    futex_wait(&hdr_->generation, gen, kSleepNs);
    hdr_->sleepers.fetch_sub(1);
  }
}

void ShmGroup::barrier() {
  if (hdr_->aborted.load()) check_peers();
  hdr_->entered[rank_].value.store(++barriers_, std::memory_order_relaxed);
  uint32_t gen = hdr_->generation.load(std::memory_order_acquire);
  if (hdr_->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(size_)) {
    hdr_->arrived.store(0, std::memory_order_relaxed);
    hdr_->generation.fetch_add(1);
    if (hdr_->sleepers.load()) futex_wake_all(&hdr_->generation);
  } else {
    wait_generation(gen);
  }
  if (pending_) check_headers();
}

void ShmGroup::agree(const OpHeader& mine) {
  hdr_->ops[mine.seq & 1][rank_] = mine;
  pending_ = &hdr_->ops[mine.seq & 1][rank_];
}

void ShmGroup::finish() {
  if (pending_) barrier();
}

void ShmGroup::check_headers() {
  OpHeader mine = *pending_;
  pending_ = nullptr;
  const auto& table = hdr_->ops[mine.seq & 1];
  for (int i = 0; i < size_; ++i)
    if (!(table[i] == mine))
      throw MismatchError("libtrain: ranks disagree on the collective: this rank called " +
                          describe(mine) + ", local rank " + std::to_string(i) + " called " +
                          describe(table[i]));
}

}  // namespace libtrain::detail
