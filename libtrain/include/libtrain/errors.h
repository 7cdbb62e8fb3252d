// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Typed exceptions thrown by libtrain. The policy (which error when, and what state the
// communicator is left in) is written down in libtrain/docs/errors.md.
#pragma once

#include <stdexcept>
#include <string>

namespace libtrain {

// Base of every libtrain error; catch this to catch them all.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A caller passed something libtrain cannot use (bad dtype for op, null buffer, bad root).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A system call failed; errno() says why. Raised with the call site in the message.
class SystemError : public Error {
 public:
  SystemError(const std::string& what, int err) : Error(what), errno_(err) {}
  int error_number() const { return errno_; }

 private:
  int errno_;
};

// Nothing arrived within LIBTRAIN_TIMEOUT seconds (a peer hung, or never started).
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A peer died, closed its connection, or aborted the collective after its own error.
class PeerError : public Error {
 public:
  using Error::Error;
};

// Ranks called different collectives, or the same one with different sizes / dtypes / ops.
class MismatchError : public Error {
 public:
  using Error::Error;
};

// Throws SystemError("<what>: <strerror> [file:line]") when `expr` returns -1.
#define LIBTRAIN_SYS(expr, what)                                                 \
  do {                                                                           \
    if ((expr) == -1) ::libtrain::detail::throw_system_error((what), __FILE__, __LINE__); \
  } while (0)

namespace detail {
[[noreturn]] void throw_system_error(const std::string& what, const char* file, int line);
[[noreturn]] void throw_system_error(const std::string& what, int err, const char* file, int line);
}  // namespace detail

}  // namespace libtrain
