// import_as_user() and EuidRoot (see import_child.h). The child reports through a pipe in records
// "<type><length>:<bytes>": P = a progress line, E = an error (errno then message), R = the image.
#include "import_child.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "log.h"
#include "runtime/run_in.h"

namespace slipway::spank {
namespace {

void put(std::string& out, std::string_view s) {
  out += std::to_string(s.size()) + ":";
  out.append(s);
}

void put_list(std::string& out, const std::vector<std::string>& v) {
  put(out, std::to_string(v.size()));
  for (const auto& s : v) put(out, s);
}

// Reads one "<length>:<bytes>" field at `pos`; false when the data is cut short.
bool take(std::string_view in, size_t& pos, std::string& field) {
  size_t colon = in.find(':', pos);
  if (colon == std::string_view::npos) return false;
  size_t len = std::stoul(std::string(in.substr(pos, colon - pos)));
  if (colon + 1 + len > in.size()) return false;
  field.assign(in.substr(colon + 1, len));
  pos = colon + 1 + len;
  return true;
}

bool take_list(std::string_view in, size_t& pos, std::vector<std::string>& v) {
  std::string count;
  if (!take(in, pos, count)) return false;
  v.resize(std::stoul(count));
  for (auto& s : v)
    if (!take(in, pos, s)) return false;
  return true;
}

std::string encode(const launcher::ImportedImage& img) {
  std::string out;
  put(out, img.manifest_digest);
  put(out, img.rootfs);
  put(out, img.was_cached ? "1" : "0");
  put_list(out, img.config.env);
  put_list(out, img.config.entrypoint);
  put_list(out, img.config.cmd);
  put(out, img.config.working_dir);
  put(out, img.config.user);
  put(out, img.squashfs);
  return out;
}

bool decode(std::string_view in, launcher::ImportedImage& img) {
  size_t pos = 0;
  std::string cached;
  return take(in, pos, img.manifest_digest) && take(in, pos, img.rootfs) &&
         take(in, pos, cached) && (img.was_cached = cached == "1", true) &&
         take_list(in, pos, img.config.env) && take_list(in, pos, img.config.entrypoint) &&
         take_list(in, pos, img.config.cmd) && take(in, pos, img.config.working_dir) &&
         take(in, pos, img.config.user) && take(in, pos, img.squashfs);
}

void send(int fd, char type, std::string_view body) {
  std::string rec(1, type);
  put(rec, body);
  for (size_t off = 0; off < rec.size();) {
    ssize_t n = write(fd, rec.data() + off, rec.size() - off);
    if (n <= 0 && errno != EINTR) return;
    if (n > 0) off += static_cast<size_t>(n);
  }
}

[[noreturn]] void child(const StepIds& ids, const ImportWork& work, int fd) {
  prctl(PR_SET_NAME, "slipway-import", 0, 0, 0);  // what ps and top show admins (and tests)
  auto who = launcher::become_user(ids.uid, ids.gid);
  if (!who.ok()) {
    send(fd, 'E', std::to_string(who.error_number()) + " " + who.message());
    _exit(1);
  }
  auto img = work([fd](std::string_view line) { send(fd, 'P', line); });
  if (img.ok()) send(fd, 'R', encode(*img));
  else send(fd, 'E', std::to_string(img.status().error_number()) + " " + img.status().message());
  _exit(0);
}

}  // namespace

namespace {
// setresuid(2) as the kernel does it: for the calling thread only (glibc's wrapper would apply it
// to every thread of the process).
int thread_seteuid(uid_t euid) {
  return static_cast<int>(syscall(SYS_setresuid, static_cast<uid_t>(-1), euid, static_cast<uid_t>(-1)));
}
}  // namespace

OnlyThisThreadIsTheUser::OnlyThisThreadIsTheUser() : user_(geteuid()) {
  if (getuid() != 0 || user_ == 0) return;
  if (seteuid(0) != 0) return;  // every thread root again
  active_ = true;
  if (thread_seteuid(user_) != 0) log_error("cannot act as the job user in user_init");
}

OnlyThisThreadIsTheUser::~OnlyThisThreadIsTheUser() {
  // This thread is the user, as Slurm left it; the others stay root (see import_child.h).
  if (active_ && geteuid() != user_ && thread_seteuid(user_) != 0)
    log_error("cannot return to the job user's identity after user_init");
}

EuidRoot::EuidRoot() : saved_(geteuid()) {
  raised_ = getuid() == 0 && saved_ != 0 && thread_seteuid(0) == 0;
}

EuidRoot::~EuidRoot() {
  if (raised_ && thread_seteuid(saved_) != 0) log_error("cannot return to the job user's identity");
}

launcher::Result<launcher::ImportedImage> import_as_user(
    const StepIds& ids, const ImportWork& work,
    const std::function<void(std::string_view)>& progress) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return launcher::Status::from_errno("pipe2", errno);
  launcher::UniqueFd rd(fds[0]), wr(fds[1]);
  EuidRoot root;  // slurmstepd's other threads act as root again while we wait
  pid_t pid = fork();
  if (pid < 0) return launcher::Status::from_errno("fork the import", errno);
  if (pid == 0) child(ids, work, wr.get());
  wr.reset();
  launcher::Result<launcher::ImportedImage> result =
      launcher::Status::error("the import process died before it finished", EIO);
  auto handle = [&](char type, const std::string& field) {
    if (type == 'P') progress(field);
    if (type == 'E') {
      size_t sp = field.find(' ');
      result = launcher::Status::error(field.substr(sp + 1), std::stoi(field.substr(0, sp)));
    }
    launcher::ImportedImage img;
    if (type == 'R' && decode(field, img)) result = std::move(img);
  };
  // Records are handled as they arrive, so progress lines appear while the import runs.
  std::string buf, field;
  size_t pos = 0;
  char chunk[65536];
  ssize_t n;
  while ((n = read(rd.get(), chunk, sizeof chunk)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) buf.append(chunk, static_cast<size_t>(n));
    for (size_t next = pos + 1; pos < buf.size() && take(buf, next, field); next = pos + 1) {
      handle(buf[pos], field);
      pos = next;
    }
  }
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  return result;
}

}  // namespace slipway::spank
