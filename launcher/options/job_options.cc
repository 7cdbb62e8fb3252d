// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The option table and the validation of each option's value (see options.h).
#include "options/job_options.h"

#include <algorithm>
#include <array>
#include <charconv>

#include "common/text.h"

namespace slipway::launcher {
namespace {

constexpr int kMaxGpusPerTask = 64;

Status bad(std::string_view option, std::string_view value, std::string_view fix) {
  return Status::error("--" + std::string(option) + "='" + std::string(value) + "' " +
                           std::string(fix),
                       EINVAL);
}

// CWD/PATH without a doubled slash when CWD is "/".
std::string join(std::string_view cwd, std::string_view path) {
  std::string out(cwd);
  if (out.empty() || out.back() != '/') out += '/';
  return out + std::string(path);
}

bool has_dotdot(std::string_view path) {
  for (auto c : split(path, '/'))
    if (c == "..") return true;
  return false;
}

// Whether PATH, taken from the container's root, climbs above it through "..".
bool climbs_out(std::string_view path) {
  int depth = 0;
  for (auto c : split(path, '/')) {
    if (c == "..") {
      if (--depth < 0) return true;
    } else if (!c.empty() && c != ".") {
      ++depth;
    }
  }
  return false;
}

// pyxis/enroot write a registry as "REGISTRY#REPO" (nvcr.io#nvidia/pytorch:24.01-py3), with an
// optional "USER@" in front for enroot's credentials; Docker writes "REGISTRY/REPO".
Status set_image(JobOptions& o, std::string_view v, std::string_view) {
  if (v.empty()) return bad("container-image", v, "needs an image, e.g. --container-image=ubuntu");
  std::string image(v);
  size_t hash = image.find('#');
  if (hash != std::string::npos && image.find('/') > hash && image.find(':', hash) != hash + 1) {
    if (size_t at = image.find('@'); at < hash) image.erase(0, at + 1);  // enroot's USER@
    image[image.find('#')] = '/';
  }
  o.container_image = std::move(image);
  return Status();
}

Status set_mounts(JobOptions& o, std::string_view v, std::string_view cwd) {
  auto m = parse_mounts(v, cwd);
  SLIPWAY_TRY(m);
  o.mounts.insert(o.mounts.end(), m->begin(), m->end());
  return Status();
}

// A path inside the container, made absolute and normal as pyxis has it: relative to the
// container's root, where ".." of "/" is "/" (the working directory is entered after pivot_root,
// so no spelling can lead outside).
std::string container_path(std::string_view v) {
  std::vector<std::string_view> parts;
  for (auto c : split(v, '/')) {
    if (c.empty() || c == ".") continue;
    if (c == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(c);
  }
  std::string out;
  for (auto c : parts) out += "/" + std::string(c);
  return out.empty() ? "/" : out;
}

Status set_workdir(JobOptions& o, std::string_view v, std::string_view) {
  if (v.empty()) return bad("container-workdir", v, "needs a directory inside the container, e.g. /work");
  o.workdir = container_path(v);
  return Status();
}

Status set_name(JobOptions& o, std::string_view v, std::string_view) {
  auto colon = v.find(':');
  std::string_view name = v.substr(0, colon), mode = colon == v.npos ? "auto" : v.substr(colon + 1);
  if (name.empty() || name.size() > 64 ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") !=
          name.npos ||
      name[0] == '.')
    return bad("container-name", v, "needs a NAME of letters, digits, '_', '.', '-' (64 at most)");
  constexpr std::array<std::pair<std::string_view, NameMode>, 4> kModes = {
      {{"auto", NameMode::kAuto}, {"create", NameMode::kCreate}, {"exec", NameMode::kExec},
       {"no_exec", NameMode::kNoExec}}};
  auto it = std::find_if(kModes.begin(), kModes.end(), [&](auto& m) { return m.first == mode; });
  if (it == kModes.end())
    return bad("container-name", v, "has an unknown mode; use NAME[:create|exec|no_exec|auto]");
  o.container_name = std::string(name);
  o.name_mode = it->second;
  return Status();
}

Status set_save(JobOptions& o, std::string_view v, std::string_view cwd) {
  if (v.empty()) return bad("container-save", v, "needs a file path, e.g. --container-save=img.tar");
  o.save_path = v[0] == '/' ? std::string(v) : join(cwd, v);
  return Status();
}

Status set_env_names(JobOptions& o, std::string_view v, std::string_view) {
  for (auto n : split(v, ',')) {
    if (n.empty() || n.find_first_of("= ") != n.npos || (n[0] >= '0' && n[0] <= '9'))
      return bad("container-env", v, "takes variable names separated by commas, e.g. PATH,HOME");
    o.env_names.emplace_back(n);
  }
  return Status();
}

Status set_unshare(JobOptions& o, std::string_view v, std::string_view) {
  for (auto n : split(v, ',')) {
    if (n == "net") o.unshare.net = true;
    else if (n == "ipc") o.unshare.ipc = true;
    else if (n == "uts") o.unshare.uts = true;
    else
      return bad("container-unshare", v,
                 "names an unknown namespace '" + std::string(n) +
                     "'; it takes net, ipc and uts, separated by commas");
  }
  return Status();
}

Status set_dl_gpus(JobOptions& o, std::string_view v, std::string_view) {
  auto g = parse_dl_gpus(v);
  SLIPWAY_TRY(g);
  o.dl_gpus = *g;
  return Status();
}

Status set_dl_host_libs(JobOptions& o, std::string_view v, std::string_view) {
  o.dl_host_libs.clear();
  for (auto n : split(v, ',')) {
    if (n.empty() || n.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") != n.npos)
      return bad("dl-host-libs", v, "takes lowercase set names separated by commas, e.g. mpi,nccl");
    o.dl_host_libs.emplace_back(n);
  }
  return Status();
}

// A flag sets one tri-state field; its --no- twin clears it.
template <std::optional<bool> JobOptions::*Field, bool Value>
Status set_flag(JobOptions& o, std::string_view, std::string_view) {
  o.*Field = Value;
  return Status();
}

Status set_entrypoint_log(JobOptions& o, std::string_view, std::string_view) {
  o.entrypoint_log = true;
  return Status();
}

Status set_dl_explain(JobOptions& o, std::string_view, std::string_view) {
  o.dl_explain = true;
  return Status();
}

constexpr std::array kOptions = {
    OptionSpec{OptionId::kContainerImage, "container-image", "IMAGE",
               "[slipway] run the step in the container IMAGE: [REGISTRY/]REPO[:TAG][@DIGEST], "
               "docker://..., an OCI or docker archive (./img.tar), an OCI layout directory or an "
               "enroot squashfs file (./img.sqsh)",
               "CONTAINER_IMAGE", set_image},
    OptionSpec{OptionId::kContainerMounts, "container-mounts", "SRC[:DST[:FLAGS]][,...]",
               "[slipway] bind host paths into the container; FLAGS joined by '+': ro, rw, "
               "rbind, norbind, noexec (nosuid, nodev, private, rprivate: always so); SRC tmpfs "
               "mounts a fresh tmpfs, umount removes the mount at DST",
               "CONTAINER_MOUNTS", set_mounts},
    OptionSpec{OptionId::kContainerWorkdir, "container-workdir", "PATH",
               "[slipway] working directory inside the container", "CONTAINER_WORKDIR",
               set_workdir},
    OptionSpec{OptionId::kContainerName, "container-name", "NAME[:create|exec|no_exec|auto]",
               "[slipway] keep the container's filesystem under NAME and reuse it in later steps "
               "(of this job, or of later jobs with container_scope=global)",
               "CONTAINER_NAME", set_name},
    OptionSpec{OptionId::kContainerSave, "container-save", "PATH",
               "[slipway] save the container's filesystem to PATH (an OCI archive that "
               "--container-image accepts) when the step ends",
               "CONTAINER_SAVE", set_save},
    OptionSpec{OptionId::kContainerMountHome, "container-mount-home", nullptr,
               "[slipway] bind the user's home directory (the site default decides otherwise)",
               "CONTAINER_MOUNT_HOME", set_flag<&JobOptions::mount_home, true>},
    OptionSpec{OptionId::kNoContainerMountHome, "no-container-mount-home", nullptr,
               "[slipway] do not bind the user's home directory", nullptr,
               set_flag<&JobOptions::mount_home, false>},
    OptionSpec{OptionId::kContainerRemapRoot, "container-remap-root", nullptr,
               "[slipway] be root inside the container (package managers work; nothing gains "
               "privilege outside)",
               "CONTAINER_REMAP_ROOT", set_flag<&JobOptions::remap_root, true>},
    OptionSpec{OptionId::kNoContainerRemapRoot, "no-container-remap-root", nullptr,
               "[slipway] keep the job user's uid inside the container", nullptr,
               set_flag<&JobOptions::remap_root, false>},
    OptionSpec{OptionId::kContainerEntrypoint, "container-entrypoint", nullptr,
               "[slipway] run the image's entrypoint once per node before the tasks start",
               "CONTAINER_ENTRYPOINT", set_flag<&JobOptions::entrypoint, true>},
    OptionSpec{OptionId::kNoContainerEntrypoint, "no-container-entrypoint", nullptr,
               "[slipway] do not run the image's entrypoint", nullptr,
               set_flag<&JobOptions::entrypoint, false>},
    OptionSpec{OptionId::kContainerEntrypointLog, "container-entrypoint-log", nullptr,
               "[slipway] show the entrypoint's output", "CONTAINER_ENTRYPOINT_LOG",
               set_entrypoint_log},
    OptionSpec{OptionId::kContainerWritable, "container-writable", nullptr,
               "[slipway] make the container's root writable (a tmpfs overlay: the image is "
               "never modified)",
               "CONTAINER_WRITABLE", set_flag<&JobOptions::writable, true>},
    OptionSpec{OptionId::kContainerReadonly, "container-readonly", nullptr,
               "[slipway] make the container's root read-only", nullptr,
               set_flag<&JobOptions::writable, false>},
    OptionSpec{OptionId::kContainerEnv, "container-env", "NAME[,NAME...]",
               "[slipway] keep the job's value of these variables over the image's",
               "CONTAINER_ENV", set_env_names},
    OptionSpec{OptionId::kContainerUnshare, "container-unshare", "net,ipc,uts",
               "[slipway] give the node's container its own network, IPC or UTS namespace",
               "CONTAINER_UNSHARE", set_unshare},
    OptionSpec{OptionId::kDlGpus, "dl-gpus", "N|auto|none",
               "[slipway] GPUs per task, chosen by local rank from the step's GPUs on the node "
               "(auto: divide them evenly among the node's tasks; none: no GPU); without it, the "
               "GPUs the container's NVIDIA_VISIBLE_DEVICES asks for, as with pyxis",
               "DL_GPUS", set_dl_gpus},
    OptionSpec{OptionId::kDlHostLibs, "dl-host-libs", "SET[,SET...]",
               "[slipway] inject these site-configured host library sets (e.g. mpi,nccl) into the "
               "container, ahead of the image's copies",
               "DL_HOST_LIBS", set_dl_host_libs},
    OptionSpec{OptionId::kDlExplain, "dl-explain", nullptr,
               "[slipway] print what each task would get (binds, environment, injected "
               "libraries) and why, without running the command",
               nullptr, set_dl_explain},
};

const OptionSpec* find_option(OptionId id) {
  for (const auto& o : kOptions)
    if (o.id == id) return &o;
  return nullptr;
}

// Pairs of flags that contradict each other when both are given.
constexpr std::array<std::pair<OptionId, OptionId>, 4> kOpposites = {{
    {OptionId::kContainerMountHome, OptionId::kNoContainerMountHome},
    {OptionId::kContainerRemapRoot, OptionId::kNoContainerRemapRoot},
    {OptionId::kContainerEntrypoint, OptionId::kNoContainerEntrypoint},
    {OptionId::kContainerWritable, OptionId::kContainerReadonly},
}};

std::optional<bool> parse_bool(std::string_view v) {
  if (v == "1" || v == "true" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "no" || v.empty()) return false;
  return std::nullopt;
}

}  // namespace

std::span<const OptionSpec> option_table() { return kOptions; }

std::string mount_source_missing(const std::string& source) {
  return "--container-mounts: source path does not exist: '" + source + "'";
}

Result<DlGpus> parse_dl_gpus(std::string_view text) {
  DlGpus g;
  if (text == "none" || text == "auto") {
    g.mode = text == "none" ? DlGpus::Mode::kNone : DlGpus::Mode::kAuto;
    return g;
  }
  int n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || n < 1 ||
      n > kMaxGpusPerTask)
    return bad("dl-gpus", text,
               "is not valid; use a count from 1 to " + std::to_string(kMaxGpusPerTask) +
                   ", 'auto' or 'none'");
  g.mode = DlGpus::Mode::kCount;
  g.count = n;
  return g;
}

// tmpfs(5) options a tmpfs:DST entry may give, each with what its value must look like.
bool is_tmpfs_option(std::string_view flag) {
  const size_t eq = flag.find('=');
  if (eq == flag.npos || eq + 1 == flag.size()) return false;
  const std::string_view key = flag.substr(0, eq), value = flag.substr(eq + 1);
  auto all_of = [&](std::string_view chars, std::string_view v) {
    return !v.empty() && v.find_first_not_of(chars) == v.npos;
  };
  auto is_count = [&](std::string_view v, std::string_view suffixes) {
    if (!v.empty() && suffixes.find(v.back()) != suffixes.npos) v.remove_suffix(1);
    return all_of("0123456789", v);
  };
  if (key == "size") return is_count(value, "kKmMgG%");
  if (key == "nr_inodes") return is_count(value, "kKmMgG");
  if (key == "mode") return value.size() <= 4 && all_of("01234567", value);
  if (key == "huge")
    return value == "never" || value == "always" || value == "within_size" || value == "advise";
  return false;
}

// pyxis passes FLAGS to enroot as mount options; these are the ones that mean something here.
// Binds are always nosuid and nodev, and private: the container's mount namespace never
// propagates mounts to or from the host, so slave and shared are refused rather than ignored.
Status apply_mount_flag(MountSpec& m, std::string_view flag, std::string_view entry) {
  if (flag == "ro") m.read_only = true;
  else if (flag == "rw") m.read_only = false;
  else if (flag == "rbind") m.recursive = true;
  else if (flag == "norbind") m.recursive = false;
  else if (flag == "noexec") m.no_exec = true;
  else if (flag == "unbindable" || flag == "runbindable") m.unbindable = true;
  else if (flag == "nosuid" || flag == "nodev" || flag == "private" || flag == "rprivate") {
  } else if (flag == "slave" || flag == "rslave" || flag == "shared" || flag == "rshared")
    return bad("container-mounts", entry,
               "asks for propagation '" + std::string(flag) +
                   "'; container mounts are always private here: use private or drop it");
  else if (m.kind == MountSpec::Kind::kTmpfs && flag.find('=') != flag.npos) {
    if (!is_tmpfs_option(flag))
      return bad("container-mounts", entry,
                 "has a bad tmpfs option '" + std::string(flag) +
                     "'; use size=N[k|m|g|%], mode=OCTAL, nr_inodes=N[k|m|g], "
                     "huge=never|always|within_size|advise");
    m.tmpfs_options += (m.tmpfs_options.empty() ? "" : ",") + std::string(flag);
  } else
    return bad("container-mounts", entry,
               "has an unknown flag '" + std::string(flag) +
                   "'; use ro, rw, rbind, norbind, noexec, nosuid, nodev, private, rprivate, "
                   "unbindable (tmpfs: also size=, mode=, nr_inodes=, huge=)");
  return Status();
}

Result<std::vector<MountSpec>> parse_mounts(std::string_view text, std::string_view cwd) {
  std::vector<MountSpec> out;
  for (auto entry : split(text, ',')) {
    auto f = split(entry, ':');
    MountSpec m;
    if (entry.empty() || f.size() > 3 || f[0].empty())
      return bad("container-mounts", entry, "is malformed; use SRC[:DST[:FLAGS]][,...]");
    if (f[0] == "tmpfs" || f[0] == "umount") {
      m.kind = f[0] == "tmpfs" ? MountSpec::Kind::kTmpfs : MountSpec::Kind::kUmount;
      if (f.size() < 2)
        return bad("container-mounts", entry, "needs a destination: " + std::string(f[0]) + ":/DST");
    }
    m.source = !m.is_bind() || f[0][0] == '/' ? std::string(f[0]) : join(cwd, f[0]);
    m.destination = f.size() > 1 ? std::string(f[1]) : m.source;
    // enroot resolves the destination in the root and refuses one that leaves it, which pyxis
    // users see as "Cross-device link" (musl's strerror(EXDEV)).
    if (m.destination.empty() || m.destination[0] != '/' || has_dotdot(m.destination))
      return bad("container-mounts", entry,
                 "needs an absolute destination inside the container, e.g. /data:/data" +
                     std::string(climbs_out(m.destination)
                                     ? " ('" + m.destination + "' leaves the root: Cross-device link)"
                                     : ""));
    if (m.kind == MountSpec::Kind::kUmount && f.size() > 2)
      return bad("container-mounts", entry, "takes no flags: umount:/DST");
    if (m.is_bind() && has_dotdot(m.source))
      return bad("container-mounts", entry, "has '..' in its source; give a plain path");
    for (auto flag : f.size() > 2 ? split(f[2], '+') : std::vector<std::string_view>{})
      SLIPWAY_TRY(apply_mount_flag(m, flag, entry));
    out.push_back(std::move(m));
  }
  return out;
}

// The flag opposite to `id`, if it is one of a pair.
std::optional<OptionId> opposite(OptionId id) {
  for (auto [a, b] : kOpposites) {
    if (a == id) return b;
    if (b == id) return a;
  }
  return std::nullopt;
}

bool contains(const std::vector<OptionId>& v, OptionId id) {
  return std::find(v.begin(), v.end(), id) != v.end();
}

Status apply_option(JobOptions& opts, OptionId id, const char* arg, std::string_view cwd,
                    bool inherited) {
  const OptionSpec* spec = find_option(id);
  if (!spec) return Status::error("unknown option", EINVAL);
  std::string_view value = arg ? arg : "";
  if (spec->arginfo && !arg) return bad(spec->name, value, "needs a value");
  if (auto other = opposite(id); other && contains(opts.given, *other)) {
    const bool other_inherited = contains(opts.inherited, *other);
    if (inherited && !other_inherited) return Status();  // the explicit opposite stays
    if (!inherited && other_inherited) std::erase(opts.given, *other);
  }
  SLIPWAY_TRY(spec->apply(opts, value, cwd));
  opts.given.push_back(id);
  if (inherited) opts.inherited.push_back(id);
  return Status();
}

Status apply_env_defaults(JobOptions& opts, const EnvLookup& getenv, bool honor_pyxis,
                          std::string_view cwd) {
  auto is_given = [&](OptionId id) {
    return std::find(opts.given.begin(), opts.given.end(), id) != opts.given.end();
  };
  for (const auto& o : kOptions) {
    if (!o.env || is_given(o.id)) continue;
    // A flag's --no- twin given on the command line also beats the environment.
    bool twin_given = false;
    for (auto [a, b] : kOpposites) twin_given |= (a == o.id && is_given(b)) || (b == o.id && is_given(a));
    if (twin_given) continue;
    std::string var = std::string("SLIPWAY_") + o.env;
    auto value = getenv(var);
    if (!value && honor_pyxis) value = getenv(var = std::string("PYXIS_") + o.env);
    if (!value) continue;
    Status st;
    if (o.arginfo) {
      st = o.apply(opts, *value, cwd);
    } else if (auto b = parse_bool(*value); !b) {
      st = Status::error(var + "='" + *value + "' must be 1 or 0", EINVAL);
    } else if (*b) {
      st = o.apply(opts, "", cwd);
    } else {
      for (auto [a, neg] : kOpposites)
        if (a == o.id) st = find_option(neg)->apply(opts, "", cwd);
    }
    SLIPWAY_TRY(std::move(st).context("environment " + var));
  }
  return Status();
}

Status validate_options(const JobOptions& opts) {
  auto is_given = [&](OptionId id) {
    return std::find(opts.given.begin(), opts.given.end(), id) != opts.given.end();
  };
  for (auto [a, b] : kOpposites)
    if (is_given(a) && is_given(b))
      return Status::error(std::string("--") + find_option(a)->name + " and --" +
                               find_option(b)->name + " contradict each other; give one",
                           EINVAL);
  if (!opts.wants_container()) {
    for (OptionId id : opts.given) {
      if (id >= OptionId::kDlGpus) continue;  // --dl-* options also apply without a container
      return Status::error(std::string("--") + find_option(id)->name +
                               " needs --container-image (or --container-name of an existing "
                               "container)",
                           EINVAL);
    }
  }
  if (opts.name_mode == NameMode::kCreate && opts.container_image.empty())
    return Status::error("--container-name=" + opts.container_name +
                             ":create needs --container-image to create it from",
                         EINVAL);
  return Status();
}

}  // namespace slipway::launcher
