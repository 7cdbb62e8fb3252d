// run_tool() (see run_tool.h).
#include "common/run_tool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <csignal>
#include <cstring>

#include "common/unique_fd.h"

namespace slipway::launcher {
namespace {

constexpr std::array kToolDirs = {"/usr/bin/", "/usr/local/bin/", "/bin/"};

}  // namespace

std::string last_line(int fd) {
  struct stat st;
  if (::fstat(fd, &st) == -1 || st.st_size == 0) return "";
  const off_t from = st.st_size > 4096 ? st.st_size - 4096 : 0;
  std::string text(static_cast<size_t>(st.st_size - from), '\0');
  ssize_t n = ::pread(fd, text.data(), text.size(), from);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  size_t nl = text.rfind('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

std::string find_tool(const char* name) {
  for (const char* dir : kToolDirs) {
    std::string p = std::string(dir) + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

std::string run_tool(const std::vector<std::string>& argv, int out_fd, int keep_fd,
                     uint64_t max_output, const std::vector<std::string>& extra_env) {
  UniqueFd err(::memfd_create("slipway-tool-stderr", MFD_CLOEXEC));
  if (!err.valid()) return std::string("memfd_create: ") + strerror(errno);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  char path_env[] = "PATH=/usr/bin:/bin", lang_env[] = "LC_ALL=C";
  std::vector<char*> envp = {path_env, lang_env};
  for (const auto& e : extra_env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  struct rlimit limit = {max_output, max_output};
  sigset_t none;
  sigemptyset(&none);
  // Only async-signal-safe calls between fork and exec: the caller may have threads.
  pid_t pid = ::fork();
  if (pid == -1) return std::string("fork: ") + strerror(errno);
  if (pid == 0) {
    int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null == -1 || ::dup2(null, 0) == -1 || ::dup2(out_fd, 1) == -1 ||
        ::dup2(err.get(), 2) == -1 || (keep_fd >= 0 && ::fcntl(keep_fd, F_SETFD, 0) == -1) ||
        ::setrlimit(RLIMIT_FSIZE, &limit) == -1)
      ::_exit(126);
    ::signal(SIGXFSZ, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) == -1)
    if (errno != EINTR) return std::string("waitpid: ") + strerror(errno);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ)
    return "its output passed the unpack limit (" + std::to_string(max_output >> 20) +
           " MiB of tar; a decompression bomb?)";
  std::string why = last_line(err.get());
  if (why.empty())
    why = WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                            : "signal " + std::to_string(WTERMSIG(status));
  return why;
}

}  // namespace slipway::launcher
