// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Timeline writer: one JSON object per line so a trace cut short by a crash is still readable
// after appending "]". Timestamps are microseconds since the Timeline was created.
#include "libtrain/timeline.h"

#include <cerrno>

#include "libtrain/errors.h"

namespace libtrain {
namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

}  // namespace

Timeline::Timeline(const std::string& path, int rank)
    : path_(path), rank_(rank), origin_(Clock::now()) {
  file_ = std::fopen(path.c_str(), "w");
  if (!file_) detail::throw_system_error("open timeline '" + path + "'", __FILE__, __LINE__);
  std::fputs("[\n", file_);
  std::fprintf(file_,
               "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": "
               "\"rank %d\"}}",
               rank_, rank_);
  first_ = false;
}

Timeline::~Timeline() {
  if (!file_) return;
  std::fputs("\n]\n", file_);
  std::fclose(file_);
}

void Timeline::record(const std::string& name, const std::string& category,
                      Clock::time_point start, Clock::time_point end, const std::string& args_json,
                      int thread) {
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  long long ts = duration_cast<microseconds>(start - origin_).count();
  long long dur = duration_cast<microseconds>(end - start).count();
  std::lock_guard<std::mutex> lock(mu_);
  std::fprintf(file_,
               "%s{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %lld, \"dur\": %lld, "
               "\"pid\": %d, \"tid\": %d, \"args\": {%s}}",
               first_ ? "" : ",\n", escape(name).c_str(), escape(category).c_str(), ts, dur, rank_,
               thread, args_json.c_str());
  first_ = false;
}

void Timeline::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  std::fflush(file_);
}

std::string Timeline::path_for_rank(const std::string& pattern, int rank) {
  size_t at = pattern.find("%r");
  if (at == std::string::npos) return rank == 0 ? pattern : std::string();
  return pattern.substr(0, at) + std::to_string(rank) + pattern.substr(at + 2);
}

}  // namespace libtrain
