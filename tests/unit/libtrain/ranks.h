// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Test helpers: run a function as N ranks, either threads sharing an InMemoryStore or forked
// processes sharing a TcpStore served by a child process, and closed-form expected values.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "libtrain/communicator.h"
#include "libtrain/errors.h"
#include "libtrain/store.h"
#include "libtrain/tcp_store.h"
#include "libtrain/types.h"

namespace testing {

using RankFn = std::function<void(int rank, const std::shared_ptr<libtrain::Store>& store)>;

// Runs fn(rank, store) on n threads; returns the first error message ("" when all passed).
inline std::string run_threads(int n, const RankFn& fn) {
  auto store = std::make_shared<libtrain::InMemoryStore>();
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r, store);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = "rank " + std::to_string(r) + ": " + e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (!e.empty()) return e;
  return "";
}

// Starts a TcpStore server in a child process of its own and returns its pid and port; it serves
// until *DONE_FD (the write end of a pipe, left open here) is closed or this process dies. The
// server is not a thread of the test process because that process forks the ranks: a child
// forked while another thread holds a lock has it held forever. glibc's malloc takes its locks
// around fork(); ASan's allocator (GCC 12) and TSan do not, and ranks hung in their first
// malloc (ASan: libtrain_test_failure's leaders_disagree, a rank in asan_calloc waiting on the
// allocator's mutex, the server thread's at fork time) or were refused ("ThreadSanitizer:
// starting new threads after multi-threaded fork is not supported").
inline pid_t start_store_server(double timeout_s, int* port, int* done_fd) {
  int ready[2], done[2];
  if (pipe(ready) != 0 || pipe(done) != 0) throw std::runtime_error("pipe failed");
  pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    close(done[1]);
    int p = -1;
    try {
      libtrain::TcpStore server("127.0.0.1", 0, true, libtrain::Seconds(timeout_s));
      p = server.port();
      (void)!write(ready[1], &p, sizeof p);
      char c;
      ssize_t got;
      do got = read(done[0], &c, 1);
      while (got < 0 && errno == EINTR);
    } catch (...) {
      (void)!write(ready[1], &p, sizeof p);
    }
    _exit(0);
  }
  close(ready[1]);
  close(done[0]);
  *port = -1;
  if (pid < 0 || read(ready[0], port, sizeof *port) != sizeof *port || *port <= 0)
    throw std::runtime_error("the store server did not start");
  close(ready[0]);
  *done_fd = done[1];
  return pid;
}

// Forks n processes running fn(rank, store); each exits with fn's return code (an uncaught
// exception exits 99). Returns the exit codes by rank (128 + signal when killed). Rank
// `kill_last` (a rank that stops itself), if any, is killed once every other rank has exited.
inline std::vector<int> run_processes(int n, const std::function<int(int, const std::shared_ptr<libtrain::Store>&)>& fn,
                                      double timeout_s = 30, int kill_last = -1) {
  int port = 0, done_fd = -1;
  pid_t server = start_store_server(timeout_s, &port, &done_fd);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      close(done_fd);
      int rc = 99;
      try {
        auto store = std::make_shared<libtrain::TcpStore>("127.0.0.1", port, false, libtrain::Seconds(timeout_s));
        rc = fn(r, store);
      } catch (...) {
      }
      _exit(rc);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(static_cast<size_t>(n), -1);
  auto reap = [&](int r) {
    int status = 0;
    waitpid(pids[static_cast<size_t>(r)], &status, 0);
    codes[static_cast<size_t>(r)] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  };
  for (int r = 0; r < n; ++r)
    if (r != kill_last) reap(r);
  if (kill_last >= 0 && kill_last < n) {
    kill(pids[static_cast<size_t>(kill_last)], SIGKILL);
    reap(kill_last);
  }
  close(done_fd);
  waitpid(server, nullptr, 0);
  return codes;
}

// Each rank's error message, written by the rank (a forked process) into a file of a fresh
// directory, read by the test afterwards; the directory goes with the object.
class Messages {
 public:
  Messages() {
    char tmpl[] = "/tmp/libtrain-test-messages-XXXXXX";
    if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
  }
  ~Messages() { std::filesystem::remove_all(dir_); }
  Messages(const Messages&) = delete;
  Messages& operator=(const Messages&) = delete;
  const std::string& dir() const { return dir_; }
  void write(int rank, const std::string& text) const { std::ofstream(path(rank)) << text; }
  std::string read(int rank) const {
    std::ifstream in(path(rank));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

 private:
  std::string path(int rank) const { return dir_ + "/message." + std::to_string(rank); }
  std::string dir_;
};

// Rank r's element i: small signed integers, exact in every dtype (bfloat16 included).
inline double value_of(int r, size_t i) {
  double g = static_cast<double>(i % 7 + 1);
  return (i % 2 ? -1.0 : 1.0) * (r + 1) * g;
}

inline double expected(libtrain::ReduceOp op, libtrain::DataType dtype, int n, size_t i) {
  double g = static_cast<double>(i % 7 + 1), s = i % 2 ? -1.0 : 1.0;
  double sum = s * g * n * (n + 1) / 2;
  switch (op) {
    case libtrain::ReduceOp::kSum: return sum;
    case libtrain::ReduceOp::kMin: return s > 0 ? g : -g * n;
    case libtrain::ReduceOp::kMax: return s > 0 ? g * n : -g;
    default: break;
  }
  bool integer = dtype == libtrain::DataType::kInt32 || dtype == libtrain::DataType::kInt64;
  return integer ? std::trunc(sum / n) : sum / n;
}

inline void store_value(void* buf, libtrain::DataType dtype, size_t i, double v) {
  using libtrain::DataType;
  switch (dtype) {
    case DataType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = v; break;
    case DataType::kInt32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
    case DataType::kFloat16: static_cast<uint16_t*>(buf)[i] = libtrain::float_to_half(static_cast<float>(v)); break;
    case DataType::kBFloat16: static_cast<uint16_t*>(buf)[i] = libtrain::float_to_bfloat16(static_cast<float>(v)); break;
    case DataType::kUint8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
  }
}

inline double load_value(const void* buf, libtrain::DataType dtype, size_t i) {
  using libtrain::DataType;
  switch (dtype) {
    case DataType::kFloat32: return static_cast<const float*>(buf)[i];
    case DataType::kFloat64: return static_cast<const double*>(buf)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(buf)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case DataType::kFloat16: return libtrain::half_to_float(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kBFloat16: return libtrain::bfloat16_to_float(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kUint8: return static_cast<const uint8_t*>(buf)[i];
  }
  return 0;
}

// Tolerance: exact for sums/min/max of these integers; averages round in the dtype.
inline double tolerance(libtrain::DataType dtype, double want) {
  using libtrain::DataType;
  double rel = dtype == DataType::kFloat16 ? 1e-3 : dtype == DataType::kBFloat16 ? 8e-3
             : dtype == DataType::kFloat32 ? 1e-6 : 1e-12;
  return std::fabs(want) * rel;
}

// The awkward element counts of a collective over n ranks (docs/conventions.md, "Tests").
inline std::vector<size_t> counts_for(int n, size_t large) {
  size_t un = static_cast<size_t>(n);
  return {0, 1, un - 1 ? un - 1 : 2, un + 1, large, large / 3 * un + un / 2 + 1};
}

}  // namespace testing
