// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// run_tool() (see run_tool.h).
#include "common/run_tool.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <csignal>

namespace slipway::launcher {
namespace {

constexpr std::array kToolDirs = {"/usr/bin/", "/usr/local/bin/", "/bin/"};

}  // namespace

std::string find_tool(const char* name) {
  for (const char* dir : kToolDirs) {
    std::string p = std::string(dir) + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

std::string run_tool(const std::vector<std::string>& argv, int out_fd, int keep_fd,
                     uint64_t max_output, const std::vector<std::string>& extra_env) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  char path_env[] = "PATH=/usr/bin:/bin", lang_env[] = "LC_ALL=C";
  std::vector<char*> envp = {path_env, lang_env};
  for (const auto& e : extra_env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const struct rlimit limit = {max_output, max_output};
  auto child = spawn({.capture_stderr = true}, [&](int) {
    int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null == -1 || ::dup2(null, 0) == -1 || ::dup2(out_fd, 1) == -1 ||
        (keep_fd >= 0 && ::fcntl(keep_fd, F_SETFD, 0) == -1) || ::setrlimit(RLIMIT_FSIZE, &limit) == -1)
      return 126;
    ::execve(args[0], args.data(), envp.data());
    return 127;
  });
  if (!child.ok()) return child.status().message();
  const ChildExit done = child->wait();
  if (done.ok()) return "";
  if (WIFSIGNALED(done.status) && WTERMSIG(done.status) == SIGXFSZ)
    return "its output passed the unpack limit (" + std::to_string(max_output >> 20) +
           " MiB of tar; a decompression bomb?)";
  return done.stderr_line.empty() ? done.why() : done.stderr_line;
}

}  // namespace slipway::launcher
