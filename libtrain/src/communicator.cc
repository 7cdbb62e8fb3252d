// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Communicator front end: option parsing, the background worker that runs collectives in call
// order (so async handles overlap communication with computation), and timeline records.
#include "libtrain/communicator.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "engine.h"
#include "env.h"
#include "libtrain/bootstrap.h"
#include "libtrain/errors.h"
#include "libtrain/timeline.h"

namespace libtrain {

struct Work::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
};

void Work::wait() {
  if (!state_) return;
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Work::is_done() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

// Runs jobs in submission order on one thread. A synchronous call with nothing queued runs on
// the caller's thread instead (saves two thread hand-offs, ~10-20 us, on small messages); `busy_`
// keeps that inline job and the worker's jobs from overlapping.
class Communicator::Worker {
 public:
  Worker() : thread_([this] { run(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  Work submit(std::function<void()> job) {
    auto state = std::make_shared<Work::State>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.emplace_back([state, job = std::move(job)] {
        std::exception_ptr error;
        try { job(); } catch (...) { error = std::current_exception(); }
        std::lock_guard<std::mutex> l(state->mu);
        state->error = error;
        state->done = true;
        state->cv.notify_all();
      });
    }
    cv_.notify_all();
    return Work(state);
  }

  // Runs `job` here when the worker is idle; false when it must be queued instead.
  bool try_inline(const std::function<void()>& job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (busy_ || !queue_.empty()) return false;
      busy_ = true;
    }
    // Wakes the worker only when it has something to do: a wake-up per collective would put a
    // second thread on a CPU for nothing (measured: 3 futex calls and a context switch per
    // synchronous collective, on CPUs the node's ranks share).
    struct Release {
      Worker* w;
      ~Release() {
        bool wake;
        {
          std::lock_guard<std::mutex> lock(w->mu_);
          w->busy_ = false;
          wake = !w->queue_.empty() || w->stop_;
        }
        if (wake) w->cv_.notify_all();
      }
    } release{this};
    job();
    return true;
  }

 private:
  void run() {
    while (true) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return (stop_ && !busy_) || (!queue_.empty() && !busy_); });
        if (queue_.empty()) return;  // stop_ and drained
        job = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
      }
      job();
      {
        std::lock_guard<std::mutex> lock(mu_);
        busy_ = false;
      }
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  bool busy_ = false;
  std::thread thread_;
};

// Bounds of the settings below (env.h words the errors). Byte counts stay far below kAuto.
constexpr uint64_t kMaxBytes = uint64_t{1} << 40;
constexpr uint64_t kMinShmChunk = 4096, kMaxShmChunk = uint64_t{1} << 30;
constexpr uint64_t kMaxShmYieldUs = 60'000'000, kMaxRingSpinUs = 1'000'000, kMaxComputeThreads = 1 << 16;

CommunicatorOptions CommunicatorOptions::from_env() {
  using detail::env_whole;
  CommunicatorOptions o;
  o.timeout = timeout_from_env();
  o.shm_chunk_bytes = env_whole("LIBTRAIN_SHM_CHUNK", o.shm_chunk_bytes, kMinShmChunk, kMaxShmChunk, "bytes");
  o.shm_one_phase_bytes = env_whole("LIBTRAIN_SHM_ONE_PHASE", o.shm_one_phase_bytes, 0, kMaxBytes, "bytes");
  o.shm_yield_us = static_cast<int64_t>(
      env_whole("LIBTRAIN_SHM_YIELD_US", static_cast<uint64_t>(o.shm_yield_us), 0, kMaxShmYieldUs, "microseconds"));
  o.ring_whole_bytes = env_whole("LIBTRAIN_RING_WHOLE", o.ring_whole_bytes, 0, kMaxBytes, "bytes");
  o.ring_spin_us = static_cast<int64_t>(
      env_whole("LIBTRAIN_RING_SPIN_US", static_cast<uint64_t>(o.ring_spin_us), 0, kMaxRingSpinUs, "microseconds"));
  o.cma_min_bytes = env_whole("LIBTRAIN_CMA_MIN", o.cma_min_bytes, 0, kMaxBytes, "bytes");
  o.compute_threads = static_cast<int>(env_whole("LIBTRAIN_COMPUTE_THREADS", 0, 0, kMaxComputeThreads, "threads"));
  return o;
}

Communicator::Communicator(std::shared_ptr<Store> store, int rank, int size, const std::string& node,
                           CommunicatorOptions options) {
  PrefixStore scoped(std::move(store), options.prefix);
  engine_ = std::make_unique<Engine>(scoped, rank, size, node, options);
  topo_ = engine_->topology();
  timeline_ = options.timeline;
  worker_ = std::make_unique<Worker>();
}

Communicator::~Communicator() = default;  // the worker drains its queue before the engine goes

Work Communicator::run(std::string name, const std::string& args, std::function<void()> body) {
  auto timeline = timeline_;
  return worker_->submit([timeline, name = std::move(name), args, body = std::move(body)] {
    auto start = Timeline::Clock::now();
    body();
    if (timeline) timeline->record(name, "collective", start, Timeline::Clock::now(), args);
  });
}

static std::string args_json(size_t count, DataType dtype, const char* extra = nullptr) {
  std::string s = "\"count\": " + std::to_string(count) + ", \"dtype\": \"" + dtype_name(dtype) +
                  "\", \"bytes\": " + std::to_string(count * dtype_size(dtype));
  if (extra) s += std::string(", ") + extra;
  return s;
}

Work Communicator::allreduce_async(void* data, size_t count, DataType dtype, ReduceOp op, std::string name) {
  check_op(dtype, op);
  if (count && !data) throw InvalidArgument("libtrain: allreduce of a null buffer");
  std::string op_arg = std::string("\"op\": \"") + op_name(op) + "\"";
  return run(name.empty() ? "allreduce" : name, args_json(count, dtype, op_arg.c_str()),
             [=, this] { engine_->allreduce(data, count, dtype, op); });
}

Work Communicator::broadcast_async(void* data, size_t count, DataType dtype, int root, std::string name) {
  if (count && !data) throw InvalidArgument("libtrain: broadcast of a null buffer");
  std::string root_arg = "\"root\": " + std::to_string(root);
  return run(name.empty() ? "broadcast" : name, args_json(count, dtype, root_arg.c_str()),
             [=, this] { engine_->broadcast(data, count, dtype, root); });
}

Work Communicator::allgather_async(const void* in, void* out, size_t count, DataType dtype, std::string name) {
  if (count && (!in || !out)) throw InvalidArgument("libtrain: allgather of a null buffer");
  return run(name.empty() ? "allgather" : name, args_json(count, dtype),
             [=, this] { engine_->allgather(in, out, count, dtype); });
}

void Communicator::run_sync(std::string name, const std::string& args, std::function<void()> body) {
  auto timed = [&] {
    auto start = Timeline::Clock::now();
    body();
    if (timeline_) timeline_->record(name, "collective", start, Timeline::Clock::now(), args);
  };
  if (!worker_->try_inline(timed)) run(std::move(name), args, std::move(body)).wait();
}

void Communicator::allreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  check_op(dtype, op);
  if (count && !data) throw InvalidArgument("libtrain: allreduce of a null buffer");
  std::string op_arg = std::string("\"op\": \"") + op_name(op) + "\"";
  run_sync("allreduce", args_json(count, dtype, op_arg.c_str()),
           [&] { engine_->allreduce(data, count, dtype, op); });
}

void Communicator::broadcast(void* data, size_t count, DataType dtype, int root) {
  if (count && !data) throw InvalidArgument("libtrain: broadcast of a null buffer");
  std::string root_arg = "\"root\": " + std::to_string(root);
  run_sync("broadcast", args_json(count, dtype, root_arg.c_str()),
           [&] { engine_->broadcast(data, count, dtype, root); });
}

void Communicator::allgather(const void* in, void* out, size_t count, DataType dtype) {
  if (count && (!in || !out)) throw InvalidArgument("libtrain: allgather of a null buffer");
  run_sync("allgather", args_json(count, dtype), [&] { engine_->allgather(in, out, count, dtype); });
}

void Communicator::barrier() {
  run_sync("barrier", "", [this] { engine_->barrier(); });
}

}  // namespace libtrain
