// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// NcclCommunicator on the device seam (device.h: CUDA and NCCL): rank 0's unique id goes through
// the store under "nccl/id/0", and every rank's GPU under "nccl/gpu/<rank>" in the same round, so
// that ranks sharing a GPU fail with a message naming them (gpu_sharing.h) instead of NCCL's
// "invalid usage". A collective waits for its caller's stream through an event (`ready`), runs on
// the communicator's stream, and records a completion event; a watcher thread polls the oldest
// completion and ncclCommGetAsyncError, aborts the communicator on an error or past the timeout,
// and marks the work failed. The thread that then asks (done, synchronize, the next call) names
// who failed through the CPU communicator over the same ranks, when there is one (nccl.h).
#include "libtrain/nccl.h"

#include "libtrain/communicator.h"
#include "libtrain/errors.h"

#ifdef LIBTRAIN_HAVE_NCCL
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "device.h"
#include "gpu_sharing.h"

namespace libtrain {
namespace detail {

using Clock = std::chrono::steady_clock;

std::string nccl_error(device::Status rc, const char* what) {
  return std::string("libtrain: ") + what + ": " + device::words(rc);
}

// The calling rank's GPU: this host and the current device's PCI bus id.
RankGpu this_gpu(int rank) {
  RankGpu g;
  g.rank = rank;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  g.host = host;
  g.bus_id = device::pci_bus_id(device::current_device());
  return g;
}

struct NcclEngine;

}  // namespace detail

// One launch's (or group's) completion.
struct NcclWork::State {
  explicit State(std::shared_ptr<detail::NcclEngine> e) : engine(std::move(e)) {}
  ~State() { device::free_event(event); }
  std::shared_ptr<detail::NcclEngine> engine;
  device::Event event = nullptr;  // recorded on the communicator's stream after the work
  std::atomic<int> status{kPending};
  enum { kPending, kDone, kFailed };
};

namespace detail {

// What the communicator, its watcher thread and the handles share.
struct NcclEngine {
  static constexpr auto kGrace = std::chrono::milliseconds(20);
  static constexpr std::chrono::microseconds kFirstPause{50}, kLastPause{1000};
  int rank = 0, size = 0;
  Seconds timeout{300};
  Communicator* peers = nullptr;
  device::Stream stream = nullptr;
  device::Event ready = nullptr;  // recorded on a caller's stream, waited for by `stream`

  std::mutex comm_mu;            // the calls on comm, and its abort
  device::Comm comm = nullptr;   // nullptr once aborted

  std::mutex mu;                 // what follows
  std::condition_variable cv;    // a completion changed, or work was queued
  std::deque<std::shared_ptr<NcclWork::State>> outstanding;  // in the stream's order
  bool stopping = false;
  std::atomic<bool> failed{false};
  std::string raw;               // the failure in NCCL's words (or the timeout's)
  bool timed_out = false;
  std::thread watcher;

  std::mutex name_mu;            // naming the failure, once
  bool named = false;
  std::string broken;            // the failure as thrown: named when the CPU communicator could
  bool broken_timeout = false;

  std::shared_ptr<NcclWork::State> group;  // the group being made (the caller's thread only)

  // Aborts the communicator and marks every outstanding completion failed.
  void fail(const std::string& what, bool by_timeout) {
    {
      std::lock_guard<std::mutex> g(mu);
      if (!failed) {
        raw = what;
        timed_out = by_timeout;
        failed = true;  // before comm is gone: a call that finds no comm finds this
      }
    }
    {
      std::lock_guard<std::mutex> g(comm_mu);
      device::comm_abort(comm);
      comm = nullptr;
    }
    std::lock_guard<std::mutex> g(mu);
    for (auto& st : outstanding) st->status = NcclWork::State::kFailed;
    outstanding.clear();
    cv.notify_all();
  }

  // Names who failed, once: the CPU communicator's barrier fails naming the rank that died or
  // stalled; NCCL's words follow it.
  void name() {
    std::lock_guard<std::mutex> g(name_mu);
    if (named) return;
    named = true;
    {
      std::lock_guard<std::mutex> l(mu);
      broken = raw;
      broken_timeout = timed_out;
    }
    if (!peers) return;
    std::string nccl_said = " (NCCL: " + broken.substr(broken.find(": ") + 2) + ")";
    try {
      peers->barrier();
    } catch (const PeerError& e) {
      broken = e.what() + nccl_said;
      broken_timeout = false;
    } catch (const TimeoutError& e) {
      broken = e.what() + nccl_said;
      broken_timeout = true;
    } catch (const std::exception&) {
    }
  }

  [[noreturn]] void raise() {
    name();
    if (broken_timeout) throw TimeoutError(broken);
    throw PeerError(broken);
  }

  // Throws unless the communicator is usable.
  void check_live() {
    if (!failed) return;
    name();
    throw PeerError("libtrain: the NCCL communicator failed earlier (" + broken + "); create a new one");
  }

  void push(const std::shared_ptr<NcclWork::State>& st) {
    std::lock_guard<std::mutex> g(mu);
    if (failed)
      st->status = NcclWork::State::kFailed;
    else
      outstanding.push_back(st);
    cv.notify_all();
  }

  // The watcher: the oldest completion's event, else the communicator's error, else its time.
  // It polls from 50 us up to every ms while the same work is pending (done() and synchronize()
  // ask the event themselves, so this only bounds how late a failure or the timeout is seen).
  void watch() {
    std::unique_lock<std::mutex> lk(mu);
    const NcclWork::State* front_seen = nullptr;
    Clock::time_point front_since;
    auto pause = kFirstPause;
    while (true) {
      cv.wait(lk, [&] { return stopping || !outstanding.empty(); });
      if (stopping) return;
      auto front = outstanding.front();
      if (front.get() != front_seen) {
        front_seen = front.get();
        front_since = Clock::now();  // it waited for nothing of ours before
        pause = kFirstPause;
      }
      lk.unlock();
      std::string error;
      bool late = false, done = false;
      try {
        done = device::event_done(front->event);
        if (!done) {
          std::lock_guard<std::mutex> g(comm_mu);
          device::Status st = comm ? device::comm_async_error(comm) : 0;
          if (!device::ok(st)) error = nccl_error(st, "NCCL collective");
        }
        // A peer that finished its part and then exited is an error for the next collective,
        // not for this one if it completes: NCCL may flag the error just before the work's
        // event is reached, so the event gets a moment (kGrace) first.
        if (!error.empty()) {
          auto until = Clock::now() + kGrace;
          while (!(done = device::event_done(front->event)) && Clock::now() < until)
            std::this_thread::sleep_for(std::chrono::microseconds(100));
          if (done) error.clear();
        }
      } catch (const std::exception& e) {
        error = e.what();
      }
      if (!done && error.empty() && Clock::now() - front_since >= timeout_duration()) {
        error = "libtrain: NCCL collective did not finish within LIBTRAIN_TIMEOUT; a peer died or hung";
        late = true;
      }
      if (!error.empty()) {
        fail(error, late);
        lk.lock();
        continue;
      }
      lk.lock();
      if (done) {
        front->status = NcclWork::State::kDone;
        if (!outstanding.empty() && outstanding.front() == front) outstanding.pop_front();
        cv.notify_all();
        continue;
      }
      cv.wait_for(lk, pause);
      pause = std::min(pause * 2, kLastPause);
    }
  }

  Clock::duration timeout_duration() const { return std::chrono::duration_cast<Clock::duration>(timeout); }
};

}  // namespace detail

NcclWork::NcclWork() = default;
NcclWork::~NcclWork() = default;
NcclWork::NcclWork(const NcclWork&) = default;
NcclWork& NcclWork::operator=(const NcclWork&) = default;
NcclWork::NcclWork(std::shared_ptr<State> state) : state_(std::move(state)) {}

void NcclWork::wait(DeviceStream stream) const {
  if (!state_) return;
  if (state_->status == State::kFailed) state_->engine->raise();
  device::wait_event(stream, state_->event);
}

// An aborted communicator's stream goes on (its work dropped, as NCCL's kernels are), so the
// event of work that failed completes too: a completion counts only if the watcher did not fail it.
bool NcclWork::done() const {
  if (!state_) return true;
  int s = state_->status;
  if (s == State::kFailed) state_->engine->raise();
  if (s == State::kDone) return true;
  if (!device::event_done(state_->event)) return false;
  if (state_->engine->failed && state_->status != State::kDone) state_->engine->raise();
  return true;
}

// Polls done() (which throws the communicator's error), from 10 us up to every 100 us, woken
// early by the watcher; the watcher's timeout ends it, and for work that outlived its
// communicator (no watcher any more) the timeout counted from here.
void NcclWork::synchronize() const {
  if (!state_) return;
  auto& e = *state_->engine;
  auto deadline = detail::Clock::now() + e.timeout_duration();
  std::chrono::microseconds pause{10};
  while (!done()) {
    std::unique_lock<std::mutex> lk(e.mu);
    if (e.stopping && detail::Clock::now() >= deadline)
      throw TimeoutError("libtrain: NCCL collective did not finish within LIBTRAIN_TIMEOUT; a peer died or hung");
    e.cv.wait_for(lk, pause);
    pause = std::min(pause * 2, std::chrono::microseconds(100));
  }
}

bool nccl_available() { return true; }

int cuda_device_count() { return device::device_count(); }

struct NcclCommunicator::Impl {
  std::shared_ptr<detail::NcclEngine> engine = std::make_shared<detail::NcclEngine>();
  std::shared_ptr<NcclWork::State> last;  // the last work queued (the stream runs in order)

  // Queues CALL(comm, stream) as one piece of work: after the caller's stream's work when
  // CALLER_ORDER, and in the group being made, if any.
  NcclWork launch(const char* what, bool caller_order, DeviceStream caller,
                  const std::function<device::Status(device::Comm, device::Stream)>& call) {
    auto& e = *engine;
    e.check_live();
    std::shared_ptr<NcclWork::State> st = e.group;
    device::Status rc = 0;
    {
      std::lock_guard<std::mutex> g(e.comm_mu);
      if (!e.comm) {
        // aborted by the watcher since check_live(): fail as the next call would
      } else {
        if (!st) {
          st = std::make_shared<NcclWork::State>(engine);
          st->event = device::new_event();
          if (caller_order) {
            device::record(e.ready, caller);
            device::wait_event(e.stream, e.ready);
          }
        }
        rc = call(e.comm, e.stream);
        if (device::ok(rc) && !e.group) device::record(st->event, e.stream);
      }
    }
    if (!st) e.check_live();
    if (!device::ok(rc)) {
      e.fail(detail::nccl_error(rc, what), false);
      e.raise();
    }
    if (e.group) return NcclWork(st);
    e.push(st);
    last = st;
    return NcclWork(st);
  }
};

NcclCommunicator::NcclCommunicator(Store& store, int rank, int size, int local_rank, Seconds timeout,
                                   int device, Communicator* peers)
    : impl_(std::make_shared<Impl>()) {
  auto& e = *impl_->engine;
  e.rank = rank;
  e.size = size;
  e.timeout = timeout;
  e.peers = peers;
  int devices = device::device_count();
  if (devices == 0) throw Error("libtrain: NCCL needs a CUDA device and none is visible");
  device::set_device(device >= 0 ? device : local_rank % devices);
  device::Id id{};
  if (rank == 0) {
    device::Status rc = device::unique_id(&id);
    if (!device::ok(rc)) throw PeerError(detail::nccl_error(rc, "ncclGetUniqueId"));
    store.set("nccl/id/0", Bytes(id.begin(), id.end()));
  }
  store.set("nccl/gpu/" + std::to_string(rank), to_bytes(encode_rank_gpu(detail::this_gpu(rank))));
  store.publish(timeout);
  std::vector<RankGpu> gpus;
  for (int r = 0; r < size; ++r)
    gpus.push_back(decode_rank_gpu(r, to_string(store.get("nccl/gpu/" + std::to_string(r), timeout))));
  if (auto shared = shared_gpu_message(gpus); !shared.empty()) throw InvalidArgument(shared);
  Bytes got = store.get("nccl/id/0", timeout);
  if (got.size() != id.size()) throw Error("libtrain: malformed NCCL unique id in the store");
  std::memcpy(id.data(), got.data(), id.size());
  e.stream = device::new_stream();
  e.ready = device::new_event();
  device::Status rc = device::comm_init(&e.comm, size, id, rank);
  if (!device::ok(rc)) {
    device::free_event(e.ready);
    device::free_stream(e.stream);
    throw PeerError(detail::nccl_error(rc, "ncclCommInitRank"));
  }
  e.watcher = std::thread([engine = impl_->engine.get()] { engine->watch(); });
}

NcclCommunicator::~NcclCommunicator() {
  auto& e = *impl_->engine;
  {
    std::lock_guard<std::mutex> g(e.mu);
    e.stopping = true;
    e.cv.notify_all();
  }
  e.watcher.join();
  {
    std::lock_guard<std::mutex> g(e.comm_mu);
    device::comm_destroy(e.comm);
    e.comm = nullptr;
  }
  device::free_event(e.ready);
  e.ready = nullptr;
  // The stream goes once the work on it is done (CUDA's rule); handles may still wait for it.
  device::free_stream(e.stream);
}

int NcclCommunicator::rank() const { return impl_->engine->rank; }
int NcclCommunicator::size() const { return impl_->engine->size; }

NcclWork NcclCommunicator::allreduce_async(const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
                                           DeviceStream caller) {
  return impl_->launch("ncclAllReduce", true, caller, [&](device::Comm c, device::Stream s) {
    return device::allreduce(in, out, count, dtype, op, c, s);
  });
}
NcclWork NcclCommunicator::broadcast_async(const void* in, void* out, size_t count, DataType dtype, int root,
                                           DeviceStream caller) {
  return impl_->launch("ncclBroadcast", true, caller, [&](device::Comm c, device::Stream s) {
    return device::broadcast(in, out, count, dtype, root, c, s);
  });
}
NcclWork NcclCommunicator::allgather_async(const void* in, void* out, size_t count, DataType dtype,
                                           DeviceStream caller) {
  return impl_->launch("ncclAllGather", true, caller, [&](device::Comm c, device::Stream s) {
    return device::allgather(in, out, count, dtype, c, s);
  });
}
NcclWork NcclCommunicator::reduce_scatter_async(const void* in, void* out, size_t count, DataType dtype,
                                                ReduceOp op, DeviceStream caller) {
  return impl_->launch("ncclReduceScatter", true, caller, [&](device::Comm c, device::Stream s) {
    return device::reduce_scatter(in, out, count, dtype, op, c, s);
  });
}
NcclWork NcclCommunicator::alltoall_async(const void* in, void* out, size_t count, DataType dtype,
                                          DeviceStream caller) {
  return impl_->launch("ncclAlltoAll", true, caller, [&](device::Comm c, device::Stream s) {
    return device::alltoall(in, out, count, dtype, c, s);
  });
}
// PEER must be another rank of the communicator.
static void check_peer(const char* what, int peer, int rank, int size) {
  if (peer < 0 || peer >= size || peer == rank)
    throw InvalidArgument(std::string("libtrain: ") + what + " rank " + std::to_string(peer) +
                          ": not another rank of the communicator's " + std::to_string(size) + " (this is " +
                          std::to_string(rank) + ")");
}

NcclWork NcclCommunicator::send_async(const void* in, size_t count, DataType dtype, int peer, DeviceStream caller) {
  check_peer("send to", peer, rank(), size());
  return impl_->launch("ncclSend", true, caller, [&](device::Comm c, device::Stream s) {
    return device::send(in, count, dtype, peer, c, s);
  });
}
NcclWork NcclCommunicator::recv_async(void* out, size_t count, DataType dtype, int peer, DeviceStream caller) {
  check_peer("receive from", peer, rank(), size());
  return impl_->launch("ncclRecv", true, caller, [&](device::Comm c, device::Stream s) {
    return device::recv(out, count, dtype, peer, c, s);
  });
}

NcclWork NcclCommunicator::group(DeviceStream caller, const std::function<void()>& calls) {
  auto& e = *impl_->engine;
  if (e.group) throw InvalidArgument("libtrain: NCCL groups do not nest");
  e.check_live();
  auto st = std::make_shared<NcclWork::State>(impl_->engine);
  st->event = device::new_event();
  device::Status rc = 0;
  {
    std::lock_guard<std::mutex> g(e.comm_mu);
    if (e.comm) {
      device::record(e.ready, caller);
      device::wait_event(e.stream, e.ready);
      rc = device::group_start();
    }
  }
  e.check_live();
  if (!device::ok(rc)) {
    e.fail(detail::nccl_error(rc, "ncclGroupStart"), false);
    e.raise();
  }
  e.group = st;
  try {
    calls();
  } catch (...) {
    e.group = nullptr;
    device::group_end();
    throw;
  }
  e.group = nullptr;
  {
    std::lock_guard<std::mutex> g(e.comm_mu);
    rc = device::group_end();
    if (device::ok(rc) && e.comm) device::record(st->event, e.stream);
  }
  if (!device::ok(rc)) {
    e.fail(detail::nccl_error(rc, "ncclGroupEnd"), false);
    e.raise();
  }
  e.check_live();
  e.push(st);
  impl_->last = st;
  return NcclWork(st);
}

void NcclCommunicator::allreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  impl_->launch("ncclAllReduce", false, nullptr, [&](device::Comm c, device::Stream s) {
    return device::allreduce(data, data, count, dtype, op, c, s);
  });
}

void NcclCommunicator::broadcast(void* data, size_t count, DataType dtype, int root) {
  impl_->launch("ncclBroadcast", false, nullptr, [&](device::Comm c, device::Stream s) {
    return device::broadcast(data, data, count, dtype, root, c, s);
  });
}

void NcclCommunicator::allgather(const void* in, void* out, size_t count, DataType dtype) {
  impl_->launch("ncclAllGather", false, nullptr, [&](device::Comm c, device::Stream s) {
    return device::allgather(in, out, count, dtype, c, s);
  });
}

// Everything queued is done when the last of it is: the stream runs in order.
void NcclCommunicator::synchronize() {
  if (impl_->last) NcclWork(impl_->last).synchronize();
  if (impl_->engine->failed) impl_->engine->raise();
}

}  // namespace libtrain

#else  // !LIBTRAIN_HAVE_NCCL

namespace libtrain {

struct NcclWork::State {};
NcclWork::NcclWork() = default;
NcclWork::~NcclWork() = default;
NcclWork::NcclWork(const NcclWork&) = default;
NcclWork& NcclWork::operator=(const NcclWork&) = default;
NcclWork::NcclWork(std::shared_ptr<State> state) : state_(std::move(state)) {}
void NcclWork::wait(DeviceStream) const {}
bool NcclWork::done() const { return true; }
void NcclWork::synchronize() const {}

bool nccl_available() { return false; }
int cuda_device_count() { return 0; }
struct NcclCommunicator::Impl {};
NcclCommunicator::NcclCommunicator(Store&, int, int, int, Seconds, int, Communicator*) {
  throw Error("libtrain: built without NCCL (CUDA/NCCL not found at configure time)");
}
NcclCommunicator::~NcclCommunicator() = default;
NcclWork NcclCommunicator::allreduce_async(const void*, void*, size_t, DataType, ReduceOp, DeviceStream) { return {}; }
NcclWork NcclCommunicator::broadcast_async(const void*, void*, size_t, DataType, int, DeviceStream) { return {}; }
NcclWork NcclCommunicator::allgather_async(const void*, void*, size_t, DataType, DeviceStream) { return {}; }
NcclWork NcclCommunicator::reduce_scatter_async(const void*, void*, size_t, DataType, ReduceOp, DeviceStream) {
  return {};
}
NcclWork NcclCommunicator::alltoall_async(const void*, void*, size_t, DataType, DeviceStream) { return {}; }
NcclWork NcclCommunicator::send_async(const void*, size_t, DataType, int, DeviceStream) { return {}; }
NcclWork NcclCommunicator::recv_async(void*, size_t, DataType, int, DeviceStream) { return {}; }
NcclWork NcclCommunicator::group(DeviceStream, const std::function<void()>&) { return {}; }
void NcclCommunicator::allreduce(void*, size_t, DataType, ReduceOp) {}
void NcclCommunicator::broadcast(void*, size_t, DataType, int) {}
void NcclCommunicator::allgather(const void*, void*, size_t, DataType) {}
void NcclCommunicator::synchronize() {}
int NcclCommunicator::rank() const { return 0; }
int NcclCommunicator::size() const { return 0; }

}  // namespace libtrain
#endif
