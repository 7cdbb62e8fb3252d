// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Parsing and printing of image references (see image_ref.h for the grammar). Pure string work
// except for the working directory lookup that makes relative local paths absolute.
#include "image/image_ref.h"

#include <unistd.h>

#include <array>
#include <cerrno>

namespace slipway::launcher {
namespace {

constexpr size_t kMaxNameLength = 255;
constexpr size_t kMaxTagLength = 128;

bool is_lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool is_word(char c) {
  return is_lower_alnum(c) || (c >= 'A' && c <= 'Z') || c == '_';
}
bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// One path component of a repository: [a-z0-9]+ ((\.|_|__|-+)[a-z0-9]+)*
bool is_valid_component(std::string_view c) {
  if (c.empty() || !is_lower_alnum(c.front()) || !is_lower_alnum(c.back())) return false;
  size_t i = 0;
  while (i < c.size()) {
    if (is_lower_alnum(c[i])) { ++i; continue; }
    size_t j = i;
    while (j < c.size() && !is_lower_alnum(c[j])) ++j;
    std::string_view sep = c.substr(i, j - i);
    bool dashes = sep.find_first_not_of('-') == std::string_view::npos;
    if (sep != "." && sep != "_" && sep != "__" && !dashes) return false;
    i = j;
  }
  return true;
}

bool is_valid_tag(std::string_view t) {
  if (t.empty() || t.size() > kMaxTagLength || !is_word(t[0])) return false;
  for (char c : t)
    if (!is_word(c) && c != '.' && c != '-') return false;
  return true;
}

// host[:port]: letters, digits, '-', '.', and an optional numeric port. IPv6 is not supported.
bool is_valid_registry(std::string_view r) {
  size_t colon = r.find(':');
  std::string_view host = r.substr(0, colon);
  if (host.empty() || host.front() == '-' || host.front() == '.') return false;
  for (char c : host)
    if (!is_word(c) && c != '-' && c != '.') return false;
  if (colon == std::string_view::npos) return true;
  std::string_view port = r.substr(colon + 1);
  if (port.empty() || port.size() > 5) return false;
  for (char c : port)
    if (c < '0' || c > '9') return false;
  return true;
}

bool looks_like_registry(std::string_view first) {
  return first.find_first_of(".:") != std::string_view::npos || first == "localhost";
}

std::string canonical_registry(std::string_view r) {
  if (r == "docker.io" || r == "index.docker.io") return std::string(kDockerHubRegistry);
  return std::string(r);
}

Status bad_ref(std::string_view text, std::string_view why) {
  return Status::error("invalid image reference '" + std::string(text) + "': " + std::string(why),
                       EINVAL);
}

Result<std::string> absolute_path(std::string_view p, const RefDefaults& d) {
  if (p.empty()) return Status::error("empty image path", EINVAL);
  if (p.front() == '/') return std::string(p);
  std::string cwd = d.cwd;
  if (cwd.empty()) {
    std::array<char, 4096> buf{};
    if (!::getcwd(buf.data(), buf.size())) return Status::from_errno("getcwd", errno);
    cwd = buf.data();
  }
  if (starts_with(p, "./")) p.remove_prefix(2);
  if (cwd.back() != '/') cwd += '/';
  return cwd + std::string(p);
}

Result<ImageRef> parse_local(std::string_view p, ImageRef::Kind kind, const RefDefaults& d) {
  ImageRef ref;
  ref.kind = kind;
  auto abs = absolute_path(p, d);
  SLIPWAY_TRY(abs);
  ref.path = std::move(*abs);
  return ref;
}

bool is_archive_name(std::string_view p) {
  for (std::string_view ext : {".tar", ".tar.gz", ".tgz", ".tar.zst"})
    if (ends_with(p, ext)) return true;
  return false;
}

// Splits "[REGISTRY/]REPO" and normalises Docker Hub names.
Status parse_name(std::string_view text, std::string_view name, const RefDefaults& d,
                  ImageRef& ref) {
  size_t slash = name.find('/');
  std::string_view repo = name;
  ref.registry = canonical_registry(d.default_registry);
  if (slash != std::string_view::npos && looks_like_registry(name.substr(0, slash))) {
    if (!is_valid_registry(name.substr(0, slash))) return bad_ref(text, "bad registry host");
    ref.registry = canonical_registry(name.substr(0, slash));
    repo = name.substr(slash + 1);
  }
  if (repo.empty()) return bad_ref(text, "no repository name");
  for (size_t start = 0;;) {
    size_t end = repo.find('/', start);
    std::string_view comp = repo.substr(start, end == std::string_view::npos ? end : end - start);
    if (!is_valid_component(comp))
      return bad_ref(text, "repository '" + std::string(repo) +
                               "' must be lowercase letters, digits and separators (. _ __ -)");
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  ref.repository = std::string(repo);
  if (ref.registry == kDockerHubRegistry && repo.find('/') == std::string_view::npos)
    ref.repository = "library/" + ref.repository;
  return Status();
}

Result<ImageRef> parse_remote(std::string_view text, std::string_view s, const RefDefaults& d) {
  ImageRef ref;
  if (s.empty()) return bad_ref(text, "empty reference");
  if (size_t at = s.find('@'); at != std::string_view::npos) {
    ref.digest = std::string(s.substr(at + 1));
    if (starts_with(ref.digest, "sha512:") || starts_with(ref.digest, "sha384:"))
      return bad_ref(text, "only sha256 digests are supported");
    if (!is_valid_digest(ref.digest))
      return bad_ref(text, "digest must be 'sha256:' and 64 lowercase hex digits");
    s = s.substr(0, at);
  }
  size_t colon = s.rfind(':');
  size_t slash = s.rfind('/');
  if (colon != std::string_view::npos && (slash == std::string_view::npos || colon > slash)) {
    ref.tag = std::string(s.substr(colon + 1));
    if (!is_valid_tag(ref.tag)) return bad_ref(text, "bad tag '" + ref.tag + "'");
    s = s.substr(0, colon);
  }
  if (s.size() > kMaxNameLength) return bad_ref(text, "name longer than 255 characters");
  SLIPWAY_TRY(parse_name(text, s, d, ref));
  // Counted again once normalised: the canonical name (registry-1.docker.io/library/NAME) is what
  // the cache records and str() prints, and it must parse back (tests/fuzz found Docker Hub names
  // of 230-255 characters whose canonical form was refused as too long).
  if (ref.registry.size() + 1 + ref.repository.size() > kMaxNameLength)
    return bad_ref(text, "name longer than 255 characters once its registry is added (" +
                             ref.registry + "/" + ref.repository.substr(0, 16) + "...)");
  if (ref.tag.empty() && ref.digest.empty()) ref.tag = "latest";
  return ref;
}

}  // namespace

bool is_valid_digest(std::string_view digest) {
  constexpr std::string_view kPrefix = "sha256:";
  if (!starts_with(digest, kPrefix) || digest.size() != kPrefix.size() + 64) return false;
  for (char c : digest.substr(kPrefix.size()))
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::string ImageRef::str() const {
  if (kind == Kind::kDaemon) return (daemon == "docker" ? "dockerd://" : "podman://") + repository;
  if (kind != Kind::kRegistry) return path;
  std::string s = registry + "/" + repository;
  if (!tag.empty()) s += ":" + tag;
  if (!digest.empty()) s += "@" + digest;
  return s;
}

Result<ImageRef> parse_image_ref(std::string_view text, const RefDefaults& defaults) {
  std::string_view s = text;
  if (starts_with(s, "docker-archive:"))
    return parse_local(s.substr(15), ImageRef::Kind::kArchive, defaults);
  if (starts_with(s, "oci-archive:"))
    return parse_local(s.substr(12), ImageRef::Kind::kArchive, defaults);
  if (starts_with(s, "oci:")) return parse_local(s.substr(4), ImageRef::Kind::kOciLayout, defaults);
  if (starts_with(s, "/") || starts_with(s, "./") || starts_with(s, "../") || s == "." ||
      s == "..") {
    auto kind = is_archive_name(s) ? ImageRef::Kind::kArchive : ImageRef::Kind::kOciLayout;
    return parse_local(s, kind, defaults);
  }
  for (auto [scheme, daemon] : {std::pair{"dockerd://", "docker"}, {"podman://", "podman"}}) {
    if (!starts_with(s, scheme)) continue;
    std::string_view name = s.substr(std::string_view(scheme).size());
    // NAME goes to the tool as one argument: no option ('-'), no blank, nothing empty.
    if (name.empty() || name[0] == '-' || name.find_first_of(" \t\n") != std::string_view::npos)
      return Status::error("image '" + std::string(text) + "': give the image's name after " +
                               scheme + ", e.g. " + scheme + "ubuntu:22.04",
                           EINVAL);
    ImageRef ref;
    ref.kind = ImageRef::Kind::kDaemon;
    ref.daemon = daemon;
    ref.repository = std::string(name);
    return ref;
  }
  if (starts_with(s, "docker://")) s.remove_prefix(9);
  return parse_remote(text, s, defaults);
}

}  // namespace slipway::launcher
