// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// What the deep-learning wiring needs to know about a shared library without loading it: its
// soname, DT_NEEDED list, the symbol versions it needs from each dependency (GLIBC_2.34, ...), the
// versions it defines, and the names it exports. Read from the ELF dynamic section (elf(5)); every
// offset is bounds-checked because image files are hostile input.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace slipway::launcher {

// The versions a library needs from one of its dependencies (one Elf64_Verneed entry).
struct ElfVersionNeed {
  std::string file;                   // e.g. "libc.so.6"
  std::vector<std::string> versions;  // e.g. "GLIBC_2.34"
};

struct ElfInfo {
  std::string soname;                        // DT_SONAME; empty when absent
  std::vector<std::string> needed;           // DT_NEEDED, in order
  std::vector<ElfVersionNeed> version_needs;  // DT_VERNEED
  std::vector<std::string> version_defs;     // DT_VERDEF names, without the base (soname) entry
  std::vector<std::string> exported;         // defined dynamic symbols (only when asked for)
};

// Reads the ELF file `path` (64-bit, little-endian). `what` names it in errors.
Result<ElfInfo> read_elf(const std::string& path, bool with_symbols = false);
// The same for an open file (e.g. one opened inside an image root with RESOLVE_IN_ROOT).
Result<ElfInfo> read_elf_fd(int fd, const std::string& what, bool with_symbols = false);

// Every distinct token in the file that starts with `prefix` and continues with [A-Za-z0-9_.+-]
// characters (e.g. "ncclNetPlugin_v8", "NCCL version 2.28.9+cuda13.0"), in order of first
// appearance. Used on string tables that the dynamic section does not describe.
Result<std::vector<std::string>> find_tokens(int fd, const std::string& what, std::string_view prefix);

}  // namespace slipway::launcher
