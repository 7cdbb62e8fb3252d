// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Timeline: a Chrome / Perfetto trace (JSON array of "X" events) of every collective, written
// when LIBTRAIN_TIMELINE=file.json is set. Load it in chrome://tracing or ui.perfetto.dev.
#pragma once

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

namespace libtrain {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  // Opens `path` for writing (throws SystemError); `rank` becomes the trace's process id.
  Timeline(const std::string& path, int rank);
  ~Timeline();  // closes the JSON array
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // One complete event. `args_json` is a JSON object body without braces ("\"bytes\": 4").
  void record(const std::string& name, const std::string& category, Clock::time_point start,
              Clock::time_point end, const std::string& args_json = {}, int thread = 1);
  void flush();
  const std::string& path() const { return path_; }

  // The path rank `rank` writes for LIBTRAIN_TIMELINE=`pattern`: "%r" is replaced by the rank;
  // without "%r" only rank 0 writes (empty string for the others).
  static std::string path_for_rank(const std::string& pattern, int rank);

 private:
  std::mutex mu_;
  std::FILE* file_ = nullptr;
  std::string path_;
  int rank_;
  bool first_ = true;
  Clock::time_point origin_;
};

}  // namespace libtrain
