// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Status helpers: errno formatting and context prefixes (see status.h).
#include "status.h"

#include <cstring>

namespace slipway::launcher {

Status Status::from_errno(std::string_view what, int errnum) {
  std::string m(what);
  m += ": ";
  m += std::strerror(errnum);
  return error(std::move(m), errnum);
}

Status Status::context(std::string_view prefix) const& {
  Status copy = *this;
  return std::move(copy).context(prefix);
}

Status Status::context(std::string_view prefix) && {
  if (ok()) return std::move(*this);
  std::string m(prefix);
  m += ": ";
  m += message_;
  message_ = std::move(m);
  return std::move(*this);
}

namespace detail {
Status sys_error(const char* file, int line, std::string_view what, int errnum) {
  const char* base = std::strrchr(file, '/');
  std::string m(what);
  m += ": ";
  m += std::strerror(errnum);
  return Status::error(std::move(m), errnum).at(std::string(base ? base + 1 : file) + ":" +
                                                std::to_string(line));
}
}  // namespace detail

}  // namespace slipway::launcher
