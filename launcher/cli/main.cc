// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// `slipway`: the user-facing command. Subcommands are one table (kCommands); each lives in its own
// function and reports errors as one line "slipway: ..." on stderr with exit status 1 (2 for usage).
// Settings come from the environment (SLIPWAY_CACHE_DIR, SLIPWAY_DEFAULT_REGISTRY,
// SLIPWAY_INSECURE_REGISTRIES, SLIPWAY_CA_FILE), as an admin-free user sets them in a module file.
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "cli/cli_common.h"
#include "options/save.h"

namespace slipway::launcher::cli {
int cmd_doctor(std::vector<std::string>& args);  // doctor.cc
int cmd_images(std::vector<std::string>& args);  // cache_commands.cc
int cmd_rm(std::vector<std::string>& args);      // cache_commands.cc
int cmd_gc(std::vector<std::string>& args);      // cache_commands.cc
int cmd_check(std::vector<std::string>& args);   // cache_commands.cc
namespace {

// import IMAGE [--squashfs PATH]: with --squashfs, the image also becomes one squashfs file, for a
// shared filesystem (--container-image=PATH then starts from it on every node, as with pyxis).
int cmd_import(std::vector<std::string>& args) {
  std::string squashfs;
  if (args.size() == 3 && args[1] == "--squashfs") squashfs = args[2];
  else if (args.size() == 2 && args[1].rfind("--squashfs=", 0) == 0) squashfs = args[1].substr(11);
  else if (args.size() != 1) return fail("usage: slipway import IMAGE [--squashfs PATH]"), 2;
  if (args.size() > 1) {
    if (squashfs.empty()) return fail("import: --squashfs needs a file path, e.g. --squashfs=img.sqsh"), 2;
    if (char cwd[4096]; squashfs[0] != '/' && getcwd(cwd, sizeof cwd))
      squashfs = std::string(cwd) + "/" + squashfs;
    if (auto st = check_save_target(squashfs, "--squashfs"); !st.ok())
      return fail("import: " + st.message()), 2;
  }
  auto img = import_text(args[0]);
  if (!img.ok()) return fail(import_failed(args[0], img.status()).message());
  if (!squashfs.empty()) {
    if (auto st = squash_directory(img->rootfs, squashfs); !st.ok()) return fail(st.message());
    printf("%s %s\n", img->manifest_digest.c_str(), squashfs.c_str());
    return 0;
  }
  printf("%s %s\n", img->manifest_digest.c_str(), img->rootfs.c_str());
  return 0;
}

int cmd_help(std::vector<std::string>&);

struct Command {
  const char* name;
  const char* usage;
  int (*run)(std::vector<std::string>& args);
};

constexpr std::array kCommands = {
    Command{"run", "run --container-image=IMAGE [--container-*...] -- COMMAND [ARGS...]\n"
                   "                   run COMMAND in the image; under srun, the tasks of a node "
                   "share one container",
            cmd_run},
    Command{"import", "import IMAGE [--squashfs PATH]\n"
                      "                   import IMAGE into the node cache; print its digest and root\n"
                      "                   (with --squashfs: write it as one squashfs file at PATH)",
            cmd_import},
    Command{"doctor", "doctor [--cache-dir=DIR] [--registry=HOST:PORT] [--host-libs=SPEC]\n"
                      "       [--fabric-devices=LIST]\n"
                      "                   check this node for what containers need; say how to fix it",
            cmd_doctor},
    Command{"images", "images           list the cached images: digest, size, last use, in use",
            cmd_images},
    Command{"rm", "rm IMAGE...      remove images (digest, digest prefix or name) from the cache",
            cmd_rm},
    Command{"gc", "gc --keep SIZE   remove least recently used images until the cache fits SIZE",
            cmd_gc},
    Command{"check", "check [IMAGE...] verify cached images: files present, every blob's sha256",
            cmd_check},
    Command{"help", "help             this text", cmd_help},
};

int cmd_help(std::vector<std::string>&) {
  printf("usage: slipway COMMAND [ARGS...]\n\ncommands:\n");
  for (const auto& c : kCommands) printf("  slipway %s\n", c.usage);
  printf("  slipway --version\n\n'slipway COMMAND --help' shows one command; man slipway.\n");
  return 0;
}

// `slipway COMMAND --help`: an -h or --help before any "--" (after it, the words belong to the
// command run in the container).
bool asks_for_help(const std::vector<std::string>& args) {
  for (const auto& a : args) {
    if (a == "--") return false;
    if (a == "--help" || a == "-h") return true;
  }
  return false;
}

}  // namespace
}  // namespace slipway::launcher::cli

int main(int argc, char** argv) {
  using namespace slipway::launcher::cli;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") args = {"help"};
  if (args[0] == "--version" || args[0] == "version") {
    printf("slipway %s\n", SLIPWAY_VERSION);
    return 0;
  }
  for (const auto& c : kCommands) {
    if (args[0] != c.name) continue;
    args.erase(args.begin());
    if (asks_for_help(args)) {
      printf("usage: slipway %s\n", c.usage);
      return 0;
    }
    return c.run(args);
  }
  return fail("unknown command '" + args[0] + "'; see 'slipway help'"), 2;
}
