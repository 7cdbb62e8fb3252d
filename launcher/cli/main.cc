// `slipway`: the user-facing command. Subcommands are one table (kCommands); each lives in its own
// function and reports errors as one line "slipway: ..." on stderr with exit status 1 (2 for usage).
// Settings come from the environment (SLIPWAY_CACHE_DIR, SLIPWAY_DEFAULT_REGISTRY,
// SLIPWAY_INSECURE_REGISTRIES, SLIPWAY_CA_FILE), as an admin-free user sets them in a module file.
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "image/image_ref.h"
#include "image/import.h"
#include "runtime/container.h"

namespace slipway::launcher {
namespace {

int fail(const std::string& m) {
  fprintf(stderr, "slipway: %s\n", m.c_str());
  return 1;
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = getenv(name);
  return v && *v ? std::string(v) : fallback;
}

std::vector<std::string> env_list(const char* name) {
  std::vector<std::string> out;
  std::string v = env_or(name, "");
  size_t i = 0;
  while (i < v.size()) {
    size_t j = v.find(',', i);
    if (j == std::string::npos) j = v.size();
    if (j > i) out.push_back(v.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

ImportOptions import_options() {
  ImportOptions o;
  o.cache_dir = env_or("SLIPWAY_CACHE_DIR", default_cache_dir(getuid()));
  o.registry.insecure_registries = env_list("SLIPWAY_INSECURE_REGISTRIES");
  o.registry.ca_file = env_or("SLIPWAY_CA_FILE", "");
  std::string creds = env_or("HOME", "/") + "/.config/slipway/credentials";
  if (access(creds.c_str(), R_OK) == 0) o.registry.credentials_file = creds;
  if (isatty(STDERR_FILENO))
    o.progress = [](std::string_view line) {
      fprintf(stderr, "slipway: %.*s\n", static_cast<int>(line.size()), line.data());
    };
  return o;
}

Result<ImportedImage> import_text(const std::string& text) {
  RefDefaults d;
  d.default_registry = env_or("SLIPWAY_DEFAULT_REGISTRY", std::string(kDockerHubRegistry));
  auto ref = parse_image_ref(text, d);
  SLIPWAY_TRY(ref);
  return import_image(*ref, import_options());
}

int cmd_import(std::vector<std::string>& args) {
  if (args.size() != 1) return fail("usage: slipway import IMAGE"), 2;
  auto img = import_text(args[0]);
  if (!img.ok()) return fail(img.status().message());
  printf("%s %s\n", img->manifest_digest.c_str(), img->rootfs.c_str());
  return 0;
}

struct RunFlags {
  std::string image, workdir;
  bool writable = false, remap_root = false;
  std::vector<std::string> command;
};

Result<RunFlags> parse_run(const std::vector<std::string>& args) {
  RunFlags f;
  size_t i = 0;
  for (; i < args.size() && args[i] != "--"; ++i) {
    const std::string& a = args[i];
    auto value = [&](std::string_view prefix) { return a.substr(prefix.size()); };
    if (a.rfind("--container-image=", 0) == 0) f.image = value("--container-image=");
    else if (a.rfind("--container-workdir=", 0) == 0) f.workdir = value("--container-workdir=");
    else if (a == "--container-writable") f.writable = true;
    else if (a == "--container-readonly") f.writable = false;
    else if (a == "--container-remap-root") f.remap_root = true;
    else if (a == "--no-container-remap-root") f.remap_root = false;
    else return Status::error("run: unknown option '" + a + "'; see 'slipway help'", EINVAL);
  }
  if (f.image.empty()) return Status::error("run: --container-image=IMAGE is required", EINVAL);
  if (i + 1 >= args.size()) return Status::error("run: no command after '--'", EINVAL);
  f.command.assign(args.begin() + static_cast<long>(i) + 1, args.end());
  return f;
}

int cmd_run(std::vector<std::string>& args) {
  auto flags = parse_run(args);
  if (!flags.ok()) return fail(flags.status().message()), 2;
  auto img = import_text(flags->image);
  if (!img.ok()) return fail(img.status().message());
  LaunchSpec spec;
  spec.rootfs = img->rootfs;
  spec.scratch_dir = import_options().cache_dir + "/mnt";
  (void)!mkdir(spec.scratch_dir.c_str(), 0700);
  spec.uid = getuid();
  spec.gid = getgid();
  spec.remap_root = flags->remap_root;
  spec.writable = flags->writable;
  char cwd[4096];
  spec.workdir = !flags->workdir.empty() ? flags->workdir : (getcwd(cwd, sizeof cwd) ? cwd : "/");
  std::string home = env_or("HOME", "");
  if (!home.empty() && access(home.c_str(), F_OK) == 0) spec.binds.push_back({home, home});
  if (flags->workdir.empty() && spec.workdir != "/") spec.binds.push_back({spec.workdir, spec.workdir});
  spec.host_files = {"/etc/hosts", "/etc/resolv.conf"};
  for (const auto& kv : img->config.env) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string name = kv.substr(0, eq);
    setenv(name.c_str(), kv.c_str() + eq + 1, name == "PATH" ? 1 : 0);
  }
  auto st = enter_container(spec);
  if (!st.ok()) return fail("cannot start the container: " + st.message());
  prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  std::vector<char*> argv;
  for (auto& a : flags->command) argv.push_back(a.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  return fail("cannot run '" + flags->command[0] + "' in the container: " + strerror(errno)), 127;
}

int cmd_help(std::vector<std::string>&);

struct Command {
  const char* name;
  const char* usage;
  int (*run)(std::vector<std::string>& args);
};

constexpr std::array kCommands = {
    Command{"run", "run --container-image=IMAGE [--container-writable] [--container-remap-root] "
                   "[--container-workdir=DIR] -- COMMAND [ARGS...]",
            cmd_run},
    Command{"import", "import IMAGE    import IMAGE into the node cache; print its digest and root",
            cmd_import},
    Command{"help", "help             this text", cmd_help},
};

int cmd_help(std::vector<std::string>&) {
  printf("usage: slipway COMMAND [ARGS...]\n\ncommands:\n");
  for (const auto& c : kCommands) printf("  slipway %s\n", c.usage);
  return 0;
}

}  // namespace
}  // namespace slipway::launcher

int main(int argc, char** argv) {
  using namespace slipway::launcher;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") args = {"help"};
  for (const auto& c : kCommands) {
    if (args[0] != c.name) continue;
    args.erase(args.begin());
    return c.run(args);
  }
  return fail("unknown command '" + args[0] + "'; see 'slipway help'"), 2;
}
