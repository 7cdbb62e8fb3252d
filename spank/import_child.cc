// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// import_as_user() and EuidRoot (see import_child.h). The child reports through a pipe in records
// "<type><length>:<bytes>": P = a progress line, E = an error (errno then message), R = the image's
// identity (ImportedImage::manifest_digest), after "1 " if it was cached, else "0 ".
#include "import_child.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <utility>

#include "log.h"
#include "common/child.h"
#include "image/cache.h"

namespace slipway::spank {
namespace {

void put(std::string& out, std::string_view s) {
  out += std::to_string(s.size()) + ":";
  out.append(s);
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

void send(int fd, char type, std::string_view body) {
  std::string rec(1, type);
  put(rec, body);
  for (size_t off = 0; off < rec.size();) {
    ssize_t n = write(fd, rec.data() + off, rec.size() - off);
    if (n <= 0 && errno != EINTR) return;
    if (n > 0) off += static_cast<size_t>(n);
  }
}

// The import, in the child (already the user): progress lines as they come, then the image's
// identity and whether it was cached ("1 sha256:..."), or the error (errno then message).
int import_body(const ImportWork& work, int fd) {
  auto img = work([fd](std::string_view line) { send(fd, 'P', line); });
  if (img.ok()) send(fd, 'R', std::string(img->was_cached ? "1 " : "0 ") + img->manifest_digest);
  else send(fd, 'E', std::to_string(img.status().error_number()) + " " + img.status().message());
  return 0;
}

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

namespace {

// One import in a child that is the user: the image's identity, or why it failed.
launcher::Result<std::pair<std::string, bool>> import_identity(
    const StepIds& ids, const ImportWork& work, const std::function<void(std::string_view)>& progress) {
  EuidRoot root;  // slurmstepd's other threads act as root again while we wait
  auto child = launcher::spawn({.name = "slipway-import", .uid = ids.uid, .gid = ids.gid},
                               [&](int fd) { return import_body(work, fd); });
  if (!child.ok()) return child.status().context("start the import");
  std::optional<launcher::Status> failed;
  std::string identity;
  bool was_cached = false;
  auto handle = [&](char type, const std::string& field) {
    if (type == 'P') progress(field);
    size_t sp = field.find(' ');
    if (type == 'E' && sp != std::string::npos)
      failed = launcher::Status::error(field.substr(sp + 1), std::atoi(field.c_str()));
    if (type == 'R' && sp != std::string::npos) {
      was_cached = field[0] == '1';
      identity = field.substr(sp + 1);
    }
  };
  // Records are handled as they arrive, so progress lines appear while the import runs.
  std::string buf, field;
  size_t pos = 0;
  char chunk[65536];
  ssize_t n;
  while ((n = read(child->report_fd(), chunk, sizeof chunk)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) buf.append(chunk, static_cast<size_t>(n));
    for (size_t next = pos + 1; pos < buf.size() && take(buf, next, field); next = pos + 1) {
      handle(buf[pos], field);
      pos = next;
    }
  }
  const launcher::ChildExit done = child->wait();
  if (failed) return *failed;
  if (identity.empty())
    return launcher::Status::error("the import process died before it finished (" + done.why() + ")",
                                   EIO);
  return std::make_pair(identity, was_cached);
}

}  // namespace

launcher::Result<launcher::ImportedImage> import_as_user(
    const StepIds& ids, const std::string& cache_dir, const ImportWork& work,
    const std::function<void(std::string_view)>& progress) {
  for (int attempt = 0;; ++attempt) {
    auto imported = import_identity(ids, work, progress);
    SLIPWAY_TRY(imported);
    // The image as the cache holds it, read here as the user (this thread's identity again).
    auto image = launcher::find_recorded_image(launcher::NodeCache(cache_dir), imported->first);
    if (image.ok()) image->was_cached = imported->second;
    // Removed (slipway rm, gc) between its import and this read: import it once more.
    if (image.ok() || image.status().error_number() != ENOENT || attempt == 1) return image;
  }
}

}  // namespace slipway::spank
