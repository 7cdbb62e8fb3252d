// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Status and Result: how launcher code reports failure without printing, exiting or throwing.
// A Status carries one line meant for the user (what failed, and how to fix it) plus the errno that
// caused it; callers add context with `context()` as the error travels up. The SLIPWAY_SYS family
// checks a system call and records the call site in `where()` (docs/conventions.md, "Errors"):
// for the logs of whoever debugs it, not in the user's line.
#pragma once

#include <cerrno>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace slipway::launcher {

class [[nodiscard]] Status {
 public:
  Status() = default;

  static Status error(std::string message, int errnum = 0) {
    Status s;
    s.failed_ = true;
    s.message_ = std::move(message);
    s.errno_ = errnum;
    return s;
  }
  // "WHAT: strerror(errnum)".
  static Status from_errno(std::string_view what, int errnum);

  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  int error_number() const { return errno_; }
  const std::string& message() const { return message_; }
  // "container.cc:120" for an error from SLIPWAY_SYS; else empty.
  const std::string& where() const { return where_; }
  Status at(std::string where) && {
    where_ = std::move(where);
    return std::move(*this);
  }

  // Prefix the message: "PREFIX: message". Returns *this unchanged when ok.
  Status context(std::string_view prefix) const&;
  Status context(std::string_view prefix) &&;

 private:
  bool failed_ = false;
  int errno_ = 0;
  std::string message_;
  std::string where_;
};

// A value or the Status explaining why there is none (std::expected is C++23).
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  Status status() const { return ok() ? Status() : std::get<1>(v_); }

 private:
  std::variant<T, Status> v_;
};

inline Status to_status(const Status& s) { return s; }
template <class T>
Status to_status(const Result<T>& r) {
  return r.status();
}

namespace detail {
Status sys_error(const char* file, int line, std::string_view what, int errnum);
}  // namespace detail

}  // namespace slipway::launcher

// Check a system call that returns -1 and sets errno; on failure return a Status like
//   "mount /proc: Operation not permitted", where() "container.cc:120".
// WHAT is anything std::string can be built from.
#define SLIPWAY_SYS(call, what)                                                          \
  do {                                                                                   \
    if ((call) == -1) {                                                                  \
      int slipway_errno_ = errno;                                                        \
      return ::slipway::launcher::detail::sys_error(__FILE__, __LINE__, (what), slipway_errno_); \
    }                                                                                    \
  } while (0)

// Propagate a failed Status (or a Result's status).
#define SLIPWAY_TRY(expr)                                                 \
  do {                                                                    \
    auto&& slipway_st_ = (expr);                                          \
    if (!slipway_st_.ok()) return ::slipway::launcher::to_status(slipway_st_); \
  } while (0)
