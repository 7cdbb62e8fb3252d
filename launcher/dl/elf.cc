// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// ELF dynamic-section reader (see elf.h). The file is mapped read-only; every structure is fetched
// through Image::at(), which refuses anything outside the mapping, so a truncated or malicious
// library gives an error, never a crash. Addresses in the dynamic section are virtual: they are
// turned into file offsets through the PT_LOAD segments (elf(5), "Program header").
#include "dl/elf.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <optional>

#include "common/unique_fd.h"

namespace slipway::launcher {
namespace {

// A read-only mapping of a whole file.
class Mapping {
 public:
  static Result<Mapping> of(int fd, const std::string& what) {
    struct stat st;
    if (fstat(fd, &st) != 0) return Status::from_errno("stat " + what, errno);
    Mapping m;
    m.size_ = static_cast<size_t>(st.st_size);
    if (m.size_ == 0) return m;
    void* p = mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) return Status::from_errno("mmap " + what, errno);
    m.data_ = static_cast<const char*>(p);
    return m;
  }
  Mapping() = default;
  Mapping(Mapping&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(o.size_) {}
  Mapping& operator=(Mapping&&) = delete;
  ~Mapping() {
    if (data_) munmap(const_cast<char*>(data_), size_);
  }
  std::string_view bytes() const { return {data_ ? data_ : "", data_ ? size_ : 0}; }

  template <class T>
  const T* at(uint64_t off) const {
    if (!data_ || off > size_ || size_ - off < sizeof(T)) return nullptr;
    return reinterpret_cast<const T*>(data_ + off);
  }
  // A NUL-terminated string at `off`, or nullopt if it runs past the end.
  std::optional<std::string> str(uint64_t off) const {
    if (!data_ || off >= size_) return std::nullopt;
    const void* end = memchr(data_ + off, 0, size_ - off);
    if (!end) return std::nullopt;
    return std::string(data_ + off, static_cast<const char*>(end));
  }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

struct Dynamic {
  std::vector<uint64_t> needed;
  std::optional<uint64_t> soname, strtab, verneed, verdef;
  uint64_t verneednum = 0, verdefnum = 0;
};

class Reader {
 public:
  Reader(const Mapping& m, std::string what) : m_(m), what_(std::move(what)) {}

  Result<ElfInfo> read(bool with_symbols) {
    const auto* eh = m_.at<Elf64_Ehdr>(0);
    if (!eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0)
      return Status::error(what_ + " is not an ELF file", ENOEXEC);
    if (eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ident[EI_DATA] != ELFDATA2LSB)
      return Status::error(what_ + " is not a 64-bit little-endian ELF file", ENOEXEC);
    eh_ = eh;
    SLIPWAY_TRY(read_dynamic());
    ElfInfo info;
    if (!dyn_.strtab) return info;  // a static executable: nothing dynamic
    SLIPWAY_TRY(fill_names(info));
    SLIPWAY_TRY(read_verneed(info));
    SLIPWAY_TRY(read_verdef(info));
    if (with_symbols) read_symbols(info);
    return info;
  }

 private:
  Status bad(const std::string& part) const {
    return Status::error(what_ + ": malformed ELF " + part, ENOEXEC);
  }

  const Elf64_Phdr* phdr(size_t i) const {
    return m_.at<Elf64_Phdr>(eh_->e_phoff + i * sizeof(Elf64_Phdr));
  }

  // Virtual address to file offset, through the PT_LOAD segment that holds it.
  std::optional<uint64_t> offset_of(uint64_t vaddr) const {
    for (size_t i = 0; i < eh_->e_phnum; ++i) {
      const auto* p = phdr(i);
      if (p && p->p_type == PT_LOAD && vaddr >= p->p_vaddr && vaddr - p->p_vaddr < p->p_filesz)
        return vaddr - p->p_vaddr + p->p_offset;
    }
    return std::nullopt;
  }

  Status read_dynamic() {
    for (size_t i = 0; i < eh_->e_phnum; ++i) {
      const auto* p = phdr(i);
      if (!p) return bad("program header");
      if (p->p_type != PT_DYNAMIC) continue;
      for (uint64_t off = p->p_offset; off + sizeof(Elf64_Dyn) <= p->p_offset + p->p_filesz;
           off += sizeof(Elf64_Dyn)) {
        const auto* d = m_.at<Elf64_Dyn>(off);
        if (!d) return bad("dynamic section");
        if (d->d_tag == DT_NULL) break;
        note(*d);
      }
    }
    return Status();
  }

  void note(const Elf64_Dyn& d) {
    const uint64_t v = d.d_un.d_val;
    switch (d.d_tag) {
      case DT_NEEDED: dyn_.needed.push_back(v); break;
      case DT_SONAME: dyn_.soname = v; break;
      case DT_STRTAB: dyn_.strtab = offset_of(v); break;
      case DT_VERNEED: dyn_.verneed = offset_of(v); break;
      case DT_VERNEEDNUM: dyn_.verneednum = v; break;
      case DT_VERDEF: dyn_.verdef = offset_of(v); break;
      case DT_VERDEFNUM: dyn_.verdefnum = v; break;
      default: break;
    }
  }

  std::optional<std::string> dynstr(uint64_t off) const { return m_.str(*dyn_.strtab + off); }

  Status fill_names(ElfInfo& info) const {
    for (uint64_t n : dyn_.needed) {
      auto s = dynstr(n);
      if (!s) return bad("DT_NEEDED");
      info.needed.push_back(*s);
    }
    if (dyn_.soname) {
      auto s = dynstr(*dyn_.soname);
      if (!s) return bad("DT_SONAME");
      info.soname = *s;
    }
    return Status();
  }

  // Elf64_Verneed entries, each with a chain of Elf64_Vernaux (one per needed version).
  Status read_verneed(ElfInfo& info) const {
    if (!dyn_.verneed) return Status();
    uint64_t off = *dyn_.verneed;
    for (uint64_t i = 0; i < dyn_.verneednum && i < 4096; ++i) {
      const auto* vn = m_.at<Elf64_Verneed>(off);
      if (!vn) return bad("version needs");
      ElfVersionNeed need;
      auto file = dynstr(vn->vn_file);
      if (!file) return bad("version needs");
      need.file = *file;
      uint64_t aoff = off + vn->vn_aux;
      for (unsigned j = 0; j < vn->vn_cnt; ++j) {
        const auto* va = m_.at<Elf64_Vernaux>(aoff);
        auto name = va ? dynstr(va->vna_name) : std::nullopt;
        if (!name) return bad("version needs");
        need.versions.push_back(*name);
        aoff += va->vna_next;
      }
      info.version_needs.push_back(std::move(need));
      if (vn->vn_next == 0) break;
      off += vn->vn_next;
    }
    return Status();
  }

  Status read_verdef(ElfInfo& info) const {
    if (!dyn_.verdef) return Status();
    uint64_t off = *dyn_.verdef;
    for (uint64_t i = 0; i < dyn_.verdefnum && i < 4096; ++i) {
      const auto* vd = m_.at<Elf64_Verdef>(off);
      if (!vd) return bad("version definitions");
      if (!(vd->vd_flags & VER_FLG_BASE) && vd->vd_cnt > 0) {
        const auto* va = m_.at<Elf64_Verdaux>(off + vd->vd_aux);
        auto name = va ? dynstr(va->vda_name) : std::nullopt;
        if (!name) return bad("version definitions");
        info.version_defs.push_back(*name);
      }
      if (vd->vd_next == 0) break;
      off += vd->vd_next;
    }
    return Status();
  }

  // Defined symbols of .dynsym, found through the section headers (present in every library a
  // linker produced; a stripped-of-sections file simply exports nothing here).
  void read_symbols(ElfInfo& info) const {
    for (size_t i = 0; i < eh_->e_shnum; ++i) {
      const auto* sh = m_.at<Elf64_Shdr>(eh_->e_shoff + i * sizeof(Elf64_Shdr));
      if (!sh || sh->sh_type != SHT_DYNSYM || sh->sh_entsize != sizeof(Elf64_Sym)) continue;
      const auto* strsh = m_.at<Elf64_Shdr>(eh_->e_shoff + sh->sh_link * sizeof(Elf64_Shdr));
      if (!strsh) return;
      for (uint64_t off = sh->sh_offset; off + sizeof(Elf64_Sym) <= sh->sh_offset + sh->sh_size;
           off += sizeof(Elf64_Sym)) {
        const auto* sym = m_.at<Elf64_Sym>(off);
        if (!sym) return;
        if (sym->st_shndx == SHN_UNDEF || sym->st_name == 0) continue;
        if (auto name = m_.str(strsh->sh_offset + sym->st_name)) info.exported.push_back(*name);
      }
    }
  }

  const Mapping& m_;
  std::string what_;
  const Elf64_Ehdr* eh_ = nullptr;
  Dynamic dyn_;
};

bool is_token_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '+' || c == '-';
}

}  // namespace

Result<ElfInfo> read_elf_fd(int fd, const std::string& what, bool with_symbols) {
  auto m = Mapping::of(fd, what);
  SLIPWAY_TRY(m);
  return Reader(*m, what).read(with_symbols);
}

Result<ElfInfo> read_elf(const std::string& path, bool with_symbols) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::from_errno("open " + path, errno);
  return read_elf_fd(fd.get(), path, with_symbols);
}

Result<std::vector<std::string>> find_tokens(int fd, const std::string& what,
                                             std::string_view prefix) {
  auto m = Mapping::of(fd, what);
  SLIPWAY_TRY(m);
  std::string_view all = m->bytes();
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = all.find(prefix, pos)) != std::string_view::npos) {
    size_t end = pos + prefix.size();
    while (end < all.size() && is_token_char(all[end])) ++end;
    std::string tok(all.substr(pos, end - pos));
    bool seen = false;
    for (const auto& t : out) seen = seen || t == tok;
    if (!seen) out.push_back(std::move(tok));
    pos = end;
  }
  return out;
}

}  // namespace slipway::launcher
