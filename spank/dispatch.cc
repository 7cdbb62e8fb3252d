// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The SPANK entry points and nothing else: each one catches every exception (nothing may throw
// through slurmstepd) and hands over to the file for its Slurm context. Only the symbols declared
// here are exported (see spank_slipway.lds and the nm test).
#include "spank_c.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <exception>
#include <string>

#include "log.h"
#include "plugin_state.h"
#include "remote_env.h"

#define SLIPWAY_EXPORT __attribute__((visibility("default")))

// SPANK_PLUGIN() defines const arrays, which C++ gives internal linkage unless declared extern "C"
// first; slurmstepd finds the plugin by these names.
extern "C" {
SLIPWAY_EXPORT extern const char plugin_name[];
SLIPWAY_EXPORT extern const char plugin_type[];
SLIPWAY_EXPORT extern const unsigned int plugin_version;
SLIPWAY_EXPORT extern const unsigned int spank_plugin_version;
}
SPANK_PLUGIN(slipway, 1)

namespace slipway::spank {

PluginState& state() {
  static PluginState s;
  return s;
}

namespace {

template <class F>
int guarded(const char* where, F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    log_error(std::string(where) + ": internal error: " + e.what());
  } catch (...) {
    log_error(std::string(where) + ": internal error");
  }
  return -1;
}

std::string working_directory() {
  char buf[4096];
  return getcwd(buf, sizeof buf) ? std::string(buf) : std::string("/");
}

// srun inside sbatch or salloc also gets the allocation's options, which Slurm passes in
// SLURM_SPANK__SLURM_SPANK_OPTION_<plugin>_<option> (dashes as underscores) and feeds to this
// callback like the command line's.
std::string inherited_option_variable(OptionId id) {
  for (const auto& o : option_table()) {
    if (o.id != id) continue;
    std::string var = std::string("SLURM_SPANK__SLURM_SPANK_OPTION_slipway_") + o.name;
    std::replace(var.begin(), var.end(), '-', '_');
    return var;
  }
  return "";
}

bool is_inherited(OptionId id) { return getenv(inherited_option_variable(id).c_str()) != nullptr; }

int on_option(int val, const char* optarg, int remote) {
  // In slurmstepd the options are read with spank_option_getopt() instead (load_remote_options).
  if (remote) return 0;
  return guarded("option", [&] {
    const auto id = static_cast<OptionId>(val);
    auto st = apply_option(state().options, id, optarg, working_directory(), is_inherited(id));
    if (st.ok()) return 0;
    log_error(st.message());
    return -1;
  });
}

// spank_option_register() keeps a pointer: the array lives as long as the plugin.
std::array<spank_option, 32> g_spank_options{};

int register_options(spank_t sp) {
  auto table = option_table();
  if (table.size() >= g_spank_options.size()) {
    log_error("internal error: the option table outgrew its registration array");
    return -1;
  }
  for (size_t i = 0; i < table.size(); ++i) {
    const OptionSpec& o = table[i];
    g_spank_options[i] = spank_option{const_cast<char*>(o.name), const_cast<char*>(o.arginfo),
                                      const_cast<char*>(o.usage), o.arginfo ? 1 : 0,
                                      static_cast<int>(o.id), on_option};
    if (spank_option_register(sp, &g_spank_options[i]) != ESPANK_SUCCESS) {
      log_error(std::string("cannot register --") + o.name);
      return -1;
    }
  }
  return 0;
}

}  // namespace

std::string client_cwd(spank_t sp) {
  for (const char* name : {kEnvClientCwd, "SLURM_SUBMIT_DIR", "PWD"})
    if (auto dir = job_getenv(sp, name); dir && !dir->empty() && (*dir)[0] == '/') return *dir;
  return "/";
}

void load_remote_options(spank_t sp, const std::string& cwd) {
  PluginState& ps = state();
  ps.options = JobOptions();
  auto keep_first_error = [&](const Status& st) {
    if (!st.ok() && ps.deferred_error.empty()) ps.deferred_error = st.message();
  };
  for (const auto& opt : g_spank_options) {
    if (!opt.name) break;
    char* arg = nullptr;
    auto o = opt;
    if (spank_option_getopt(sp, &o, &arg) != ESPANK_SUCCESS) continue;
    const auto id = static_cast<OptionId>(opt.val);
    const bool inherited = job_getenv(sp, inherited_option_variable(id).c_str()).has_value();
    keep_first_error(apply_option(ps.options, id, arg, cwd, inherited));
  }
  keep_first_error(apply_env_defaults(
      ps.options, [&](const std::string& name) { return job_getenv(sp, name.c_str()); },
      ps.config.honor_pyxis_env, cwd));
  keep_first_error(validate_options(ps.options));
}

}  // namespace slipway::spank

using namespace slipway::spank;

extern "C" SLIPWAY_EXPORT int slurm_spank_init(spank_t sp, int ac, char** av) {
  return guarded("init", [&] {
    auto cfg = parse_plugin_args(ac, av);
    if (!cfg.ok()) {
      log_error(cfg.status().message());
      return -1;
    }
    state().config = *cfg;
    switch (spank_context()) {
      case S_CTX_LOCAL:
      case S_CTX_REMOTE:
      case S_CTX_ALLOCATOR:
        return register_options(sp);
      case S_CTX_SLURMD:
        // Once per slurmd start: which build a node runs, for the admin reading its log.
        log_info(std::string("spank_slipway ") + SLIPWAY_VERSION + " loaded");
        return 0;
      default:
        return 0;
    }
  });
}

extern "C" SLIPWAY_EXPORT int slurm_spank_init_post_opt(spank_t sp, int, char**) {
  return guarded("init_post_opt", [&] {
    switch (spank_context()) {
      case S_CTX_LOCAL:
      case S_CTX_ALLOCATOR:
        return client_init_post_opt(sp);
      default:
        return 0;
    }
  });
}

extern "C" SLIPWAY_EXPORT int slurm_spank_user_init(spank_t sp, int, char**) {
  return guarded("user_init", [&] { return spank_remote(sp) ? remote_user_init(sp) : 0; });
}

extern "C" SLIPWAY_EXPORT int slurm_spank_task_init(spank_t sp, int, char**) {
  return guarded("task_init", [&] { return spank_remote(sp) ? remote_task_init(sp) : 0; });
}

extern "C" SLIPWAY_EXPORT int slurm_spank_job_epilog(spank_t sp, int, char**) {
  return guarded("job_epilog", [&] { return remote_job_epilog(sp); });
}

extern "C" SLIPWAY_EXPORT int slurm_spank_exit(spank_t sp, int, char**) {
  return guarded("exit", [&] { return spank_remote(sp) ? remote_exit(sp) : 0; });
}
