// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// `slipway run [--container-*...] -- COMMAND`: the plugin's container without an admin install.
// Options are the plugin's (launcher/options/job_options.h), with the same environment defaults.
// Standalone, the container is this process's alone. Under srun (SLURM_STEP_ID set), the tasks of a
// node share one container, as with the plugin: the first task starts a detached holder, recorded
// in <cache>/run/<node>-<job>.<step>/, the others join it; each task holds a shared lock on `users`
// while it runs and the holder exits when the last task has gone (HolderOptions::detached). The
// first task also pins the digest an image tag resolved to there (`image`), which the others use.
// The step directory's files and their locking: run_step.h.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>

#include "cli/cli_common.h"
#include "cli/run_step.h"
#include "common/child.h"
#include "common/file_util.h"
#include "image/cache.h"
#include "dl/dl_env.h"
#include "dl/gpu_exposure.h"
#include "options/container_plan.h"
#include "options/entrypoint.h"
#include "runtime/container.h"
#include "runtime/seccomp.h"
#include "options/save.h"
#include "step/step.h"
#include "step/step_gpus.h"

namespace slipway::launcher::cli {
namespace {

std::string current_dir() {
  char buf[4096];
  return getcwd(buf, sizeof buf) ? std::string(buf) : std::string("/");
}

// --name=value, --name value and flags, checked against the option table.
Result<JobOptions> parse_options(const std::vector<std::string>& args, size_t end) {
  JobOptions opts;
  const std::string cwd = current_dir();
  for (size_t i = 0; i < end; ++i) {
    const std::string& a = args[i];
    std::string name = a.rfind("--", 0) == 0 ? a.substr(2, a.find('=') - 2) : "";
    const OptionSpec* spec = nullptr;
    for (const auto& o : option_table())
      if (name == o.name) spec = &o;
    if (!spec) return Status::error("run: unknown option '" + a + "'; see 'slipway help'", EINVAL);
    // Host library injection and --dl-explain need what only the plugin has (the site's library
    // sets, its view of every task): refused rather than silently ignored. --dl-gpus works here.
    if (spec->id > OptionId::kDlGpus)
      return Status::error("run: --" + name + " is applied by the Slurm plugin (srun --" + name +
                               ", spank_slipway(8)), not by 'slipway run'; drop it here",
                           EINVAL);
    std::optional<std::string> value;
    if (a.find('=') != std::string::npos) value = a.substr(a.find('=') + 1);
    else if (spec->arginfo && i + 1 < end) value = args[++i];
    SLIPWAY_TRY(apply_option(opts, spec->id, value ? value->c_str() : nullptr, cwd));
  }
  auto lookup = [](const std::string& n) -> std::optional<std::string> {
    const char* v = getenv(n.c_str());
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  SLIPWAY_TRY(apply_env_defaults(opts, lookup, env_flag("SLIPWAY_HONOR_PYXIS_ENV", true), cwd));
  SLIPWAY_TRY(validate_options(opts));
  if (!opts.save_path.empty()) SLIPWAY_TRY(check_save_target(opts.save_path));
  if (!opts.wants_container())
    return Status::error("run: give --container-image=IMAGE (or --container-name=NAME)", EINVAL);
  return opts;
}

struct Prepared {
  std::string run_dir;  // under srun, this node's directory for the step
  JobOptions opts;
  Step step;            // the image (held in use while the command runs) and the container's plan
  std::optional<NamedContainer> named;
  std::optional<SeccompProgram> seccomp;  // compiled before entering (runtime/seccomp.h)
  bool entrypoint = false;                // --container-entrypoint, and the image has one
  bool save = false;                      // --container-save, and this node saves
  GpuNodePlan gpu;                        // the container's GPUs (step/step_gpus.h)
};

// Where named containers live: SLIPWAY_RUNTIME_DIR/UID (runtime_dir= of the plugin), else the
// cache's containers/ with the default cache; with SLIPWAY_CACHE_DIR set (maybe on a filesystem
// every node sees), the node-local default cache's, so that nodes never share a container's
// writable layer (overlayfs refuses NFS as an upper directory anyway), as the plugin does.
std::string containers_root(const std::string& cache) {
  const std::string runtime = env_or("SLIPWAY_RUNTIME_DIR", "");
  if (!runtime.empty()) return runtime + "/" + std::to_string(getuid());
  if (env_or("SLIPWAY_CACHE_DIR", "").empty()) return cache + "/containers";
  std::string note;  // said already by cache_dir(), if at all
  return user_default_cache_dir(&note) + "/containers";
}

std::optional<std::string> job_env(const std::string& name) {
  const char* v = getenv(name.c_str());
  return v ? std::optional<std::string>(v) : std::nullopt;
}

extern "C" char** environ;

// The container's GPUs as the plugin gives them (step/step_gpus.h): --dl-gpus, else the
// container's NVIDIA_* variables; SLIPWAY_DL_GPUS is the default a site's module file may set.
// The driver's libraries and tools join the container's binds.
Status prepare_gpus(Prepared& p) {
  StepGpuInput in;
  in.job_env = job_env;
  in.node = host_name();
  for (char** e = environ; *e; ++e) in.job_env_names.emplace_back(*e, strcspn(*e, "="));
  auto gpu = plan_step_gpus(p.step, p.opts, in);
  SLIPWAY_TRY(gpu);
  p.gpu = std::move(*gpu);
  for (const auto& b : p.gpu.binds) p.step.spec.binds.push_back(b.bind);
  return Status();
}

// This task's GPUs: under srun its local rank among the node's tasks, else the only task.
Result<GpuTaskPlan> task_gpus(const Prepared& p) {
  GpuTaskInput in;
  in.slurm_step_gpus = job_env("SLURM_STEP_GPUS");
  in.cuda_visible_devices = job_env("CUDA_VISIBLE_DEVICES");
  in.node = host_name();
  if (!p.run_dir.empty()) {
    auto t = placement_from_env([](const char* n) -> const char* { return getenv(n); });
    if (t.ok()) in.local_rank = t->local_rank, in.local_tasks = t->local_world_size;
  }
  const std::string empty = import_options().cache_dir + "/empty";
  if (mkdir(empty.c_str(), 0755) == 0 || errno == EEXIST) in.empty_dir = empty;
  std::string source;
  return plan_gpu_task_exposure(p.gpu, in, source);
}

// The step's container (step/step.h prepare_step) from the command line and the SLIPWAY_*
// settings; the import runs here, as the user, pinned once per node under srun (run_step.h).
Result<Prepared> prepare(const std::vector<std::string>& args, size_t end) {
  Prepared p;
  auto opts = parse_options(args, end);
  SLIPWAY_TRY(opts);
  p.opts = std::move(*opts);
  const std::string cache = import_options().cache_dir;
  p.run_dir = step_run_dir(cache);
  StepInput in;
  in.options = p.opts;
  in.site = {.mount_home = env_flag("SLIPWAY_MOUNT_HOME", true),
             .remap_root = env_flag("SLIPWAY_REMAP_ROOT", false),
             .writable = env_flag("SLIPWAY_WRITABLE", false), .mounts = env_or("SLIPWAY_MOUNTS", "")};
  if (const char* fabric = getenv("SLIPWAY_FABRIC_DEVICES")) {
    auto policy = parse_fabric_policy(fabric, "SLIPWAY_FABRIC_DEVICES");
    SLIPWAY_TRY(policy);
    in.fabric = std::move(*policy);
  }
  in.plan.cache_dir = cache;
  in.plan.uid = getuid();
  in.plan.gid = getgid();
  in.plan.home = job_home(env_or("HOME", ""), getuid());
  in.plan.node = host_name();
  if (!p.opts.container_name.empty()) {
    // The container is this process's for as long as it runs: its lock is kept, not waited for.
    auto nc = open_named_container(p.opts, containers_root(cache) + "/global", in.plan.node,
                                   /*wait_s=*/0);
    SLIPWAY_TRY(nc);
    if (nc->running)
      return Status::error("run: container '" + p.opts.container_name + "' is running in a Slurm "
                               "step on " + in.plan.node + "; join it with srun --overlap "
                               "--container-name=" + p.opts.container_name + ", or wait for it",
                           EBUSY);
    p.named = std::move(*nc);
    in.plan.named_dir = p.named->dir;
    if (p.named->exists) {
      auto digest = named_container_image(p.named->dir, p.opts.container_name);
      SLIPWAY_TRY(digest);
      in.recorded_image = *digest;
    }
  }
  ImportOptions io = import_options();
  choose_squashfs_mount(io, p.opts.save_path);
  in.import = [&]() -> Result<ImportedImage> {
    auto ref = parse_text_ref(p.opts.container_image);
    auto img = !ref.ok()           ? Result<ImportedImage>(ref.status())
               : p.run_dir.empty() ? import_image(*ref, io)
                                   : import_for_step(p.opts.container_image, p.run_dir, io);
    if (!img.ok()) return import_failed(p.opts.container_image, img.status());
    return img;
  };
  auto step = prepare_step(in);
  SLIPWAY_TRY(step);
  p.step = std::move(*step);
  SLIPWAY_TRY(prepare_gpus(p));
  struct utsname machine = {};
  uname(&machine);
  auto filter = cached_fake_root_filter(cache + "/seccomp-" + machine.machine + "-v" +
                                        std::to_string(kFakeRootFilterVersion) + ".bpf");
  SLIPWAY_TRY(filter);
  p.seccomp = std::move(*filter);
  p.entrypoint = wants_entrypoint(p.step, p.opts, env_flag("SLIPWAY_EXECUTE_ENTRYPOINT", false));
  // As with the plugin, the step's first node saves (under srun, its last task to finish).
  p.save = !p.opts.save_path.empty() && (p.run_dir.empty() || env_or("SLURM_NODEID", "0") == "0");
  return p;
}

// --container-entrypoint in HOLDER's container: what it exported, or why it failed.
Result<EntrypointRun> entrypoint_in(const ContainerHolder& holder, const Prepared& p) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  return step_entrypoint(holder, p.step, p.opts, env);
}

// What the task sets and binds (step/step.h task_entry), set in this process's environment; the
// binds are returned.
TaskView enter_environment(const Prepared& p, const std::vector<std::string>& exported) {
  TaskInput in{.home = job_home(env_or("HOME", ""), getuid()),
               .entrypoint_env = exported,
               .job_env = [](const std::string& name) -> std::optional<std::string> {
                 const char* v = getenv(name.c_str());
                 return v ? std::optional<std::string>(v) : std::nullopt;
               }};
  TaskEntry entry = task_entry(p.step, p.opts, in);
  for (const auto& [name, value] : entry.env) setenv(name.c_str(), value.c_str(), 1);
  return entry.view;
}

// Under srun: find the node's holder for this step, or start it (and run the entrypoint in it:
// once per node, under the step's lock, so that the others wait for its outcome). `users` is
// locked shared by the caller for as long as its command runs; EXPORTED gets what the entrypoint
// exported, and ENTRYPOINT_OUTPUT its output when this task ran it.
Result<ContainerHolder> step_holder(const Prepared& p, const std::string& run_dir, UniqueFd& users,
                                    std::vector<std::string>& exported,
                                    std::string& entrypoint_output) {
  auto lock = lock_step_dir(run_dir);
  SLIPWAY_TRY(lock);
  users.reset(open((run_dir + "/users").c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0600));
  if (!users.valid() || flock(users.get(), LOCK_SH) != 0)
    return Status::from_errno("lock " + run_dir + "/users", errno);
  std::ifstream in(run_dir + "/holder");
  pid_t pid = 0;
  std::string image;  // the image the holder's container was made from
  if (in >> pid >> image && pid > 0 && kill(pid, 0) == 0) {
    // One container per node and step: a task that names another image (tasks of a step given
    // different images, or several `slipway run`s of different images in one step) cannot join it.
    if (image != p.step.image.manifest_digest)
      return Status::error("the container of this step on " + host_name() + " runs image " + image +
                               ", not " + p.step.image.manifest_digest + " ('" + p.opts.container_image +
                               "'): the tasks of a step on a node share one container; give them "
                               "one --container-image, or run this one in a step of its own",
                           EINVAL);
    auto attached = attach_holder(pid, p.step.spec);
    if (attached.ok()) {
      if (p.entrypoint) {
        auto vars = recorded_entrypoint(run_dir);
        SLIPWAY_TRY(vars);
        exported = std::move(*vars);
      }
      return attached;
    }
  }
  sweep_stale_run_dirs(run_dir);  // once per node and step: only the first task gets here
  auto holder = start_holder(p.step.spec, {.detached = true, .users_lock = run_dir + "/users",
                                           .join_lock = run_dir + "/lock",
                                           .when_unused = [run_dir] { remove_run_dir(run_dir); }});
  SLIPWAY_TRY(holder);
  std::ofstream(run_dir + "/holder", std::ios::trunc)
      << holder->pid() << "\n" << p.step.image.manifest_digest << "\n";
  if (p.entrypoint) {
    auto r = entrypoint_in(*holder, p);
    SLIPWAY_TRY(record_entrypoint(run_dir, r));
    SLIPWAY_TRY(r);
    exported = std::move(r->exported);
    entrypoint_output = std::move(r->output);
  }
  return holder;
}

// Under srun, the DL environment the plugin gives a task (RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT: dl/dl_env.h), from the SLURM_* variables.
// SLIPWAY_MASTER_PORTS is the range MASTER_PORT is chosen in, as the plugin's master_port_range.
Result<std::vector<EnvSetting>> task_dl_env() {
  auto t = placement_from_env([](const char* n) -> const char* { return getenv(n); });
  if (!t.ok()) {
    // An srun whose variables say less than usual: the command still runs, without them.
    fail("warning: no RANK/WORLD_SIZE/... for this task: " + t.status().message());
    return std::vector<EnvSetting>{};
  }
  PortRange range;
  if (const char* r = getenv("SLIPWAY_MASTER_PORTS")) {
    auto parsed = parse_port_range(r);
    if (!parsed.ok()) return Status::error("SLIPWAY_MASTER_PORTS: " + parsed.status().message(), EINVAL);
    range = *parsed;
  }
  return dl_environment(*t, range);
}

// The task's GPU devices join its binds, its GPU variables its environment, and its CPUs narrow
// to those near its GPUs.
TaskView with_gpus(TaskView view, const GpuTaskPlan& gpu) {
  for (const auto& b : gpu.binds) view.binds.push_back(b.bind);
  for (const auto& e : gpu.env) setenv(e.name.c_str(), e.value.c_str(), e.overwrite ? 1 : 0);
  narrow_affinity(gpu.cpus);
  return view;
}

// Locks down and execs; never returns. `entered` says how getting into the container went.
[[noreturn]] void exec_command(Status st, const Prepared& p, std::vector<std::string> command) {
  if (st.ok()) st = lock_down(p.seccomp);
  if (!st.ok()) _exit(fail("cannot start the container: " + st.message()));
  std::vector<char*> argv;
  for (auto& a : command) argv.push_back(a.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  _exit(fail("cannot run '" + command[0] + "' in the container: " + strerror(errno)) + 126);
}

// The child of a task: join the holder's container, with the image's Env, then what the
// entrypoint exported, then the DL environment. Never returns.
[[noreturn]] void exec_in(const ContainerHolder& holder, const Prepared& p,
                          const std::vector<std::string>& exported,
                          const std::vector<EnvSetting>& dl_env, const GpuTaskPlan& gpu,
                          std::vector<std::string> command) {
  const TaskView view = with_gpus(enter_environment(p, exported), gpu);
  for (const auto& e : dl_env) setenv(e.name.c_str(), e.value.c_str(), e.overwrite ? 1 : 0);
  exec_command(join_container(holder, p.step.spec, view), p, std::move(command));
}

// user namespaces refuse a multi-threaded caller (unshare(2), EINVAL). Plain read(2): an ifstream
// here set up the C++ locale, 0.1 ms of a 3 ms launch (bench/launch).
bool is_single_threaded() {
  UniqueFd fd(open("/proc/self/status", O_RDONLY | O_CLOEXEC));
  char buf[4096];
  ssize_t n = fd.valid() ? read(fd.get(), buf, sizeof buf - 1) : -1;
  if (n <= 0) return false;
  buf[n] = '\0';
  const char* threads = strstr(buf, "\nThreads:");
  return threads != nullptr && strtol(threads + 9, nullptr, 10) == 1;
}

pid_t g_child = -1;
void forward_signal(int sig) {
  if (g_child > 0) kill(g_child, sig);
}

// The command's status as a shell reports it; the signals we get meanwhile are passed on to it.
int wait_child(Child& child) {
  g_child = child.pid();
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) signal(sig, forward_signal);
  return child.wait().code();
}

}  // namespace

int cmd_run(std::vector<std::string>& args) {
  size_t dash = 0;
  while (dash < args.size() && args[dash] != "--") ++dash;
  auto p = prepare(args, dash);
  // A bad option is a usage error (2); anything else failed while trying (1).
  if (!p.ok()) return fail(p.status().message()) + (p.status().error_number() == EINVAL ? 1 : 0);
  std::vector<std::string> command;
  if (dash < args.size()) command.assign(args.begin() + static_cast<long>(dash) + 1, args.end());
  // No command: the image's Cmd, as `docker run IMAGE` (its Entrypoint runs as the options say).
  if (command.empty()) command = p->step.image.config.cmd;
  if (command.empty()) return fail("run: give the command after '--' (the image has no Cmd)"), 2;
  const std::string& run_dir = p->run_dir;
  // Alone, this process becomes the container: no holder, no fork, nothing left behind. The
  // entrypoint and --container-save need the container before and after the command: a holder.
  if (run_dir.empty() && !p->entrypoint && !p->save && is_single_threaded()) {
    // No process of ours stays behind: the command itself keeps the image in use.
    if (p->step.image_in_use) p->step.image_in_use->keep_across_exec();
    auto gpu = task_gpus(*p);
    if (!gpu.ok()) return fail(gpu.status().message());
    const TaskView view = with_gpus(enter_environment(*p, {}), *gpu);
    exec_command(enter_container(p->step.spec, view), *p, std::move(command));
  }
  auto gpu = task_gpus(*p);
  if (!gpu.ok()) return fail(gpu.status().message());
  std::vector<EnvSetting> dl_env;
  if (!run_dir.empty()) {
    auto env = task_dl_env();
    if (!env.ok()) return fail("cannot start the container: " + env.status().message());
    dl_env = std::move(*env);
  }
  UniqueFd users;
  std::vector<std::string> exported;
  std::string entrypoint_output;
  Result<ContainerHolder> holder =
      run_dir.empty() ? start_holder(p->step.spec)
                      : step_holder(*p, run_dir, users, exported, entrypoint_output);
  if (!holder.ok()) return fail("cannot start the container: " + holder.status().message());
  if (run_dir.empty() && p->entrypoint) {
    auto r = entrypoint_in(*holder, *p);
    if (!r.ok()) return fail(r.status().message());
    exported = std::move(r->exported);
    entrypoint_output = std::move(r->output);
  }
  if (p->opts.entrypoint_log && !entrypoint_output.empty())
    (void)!write(STDERR_FILENO, entrypoint_output.data(), entrypoint_output.size());
  // The command gets the signal dispositions `slipway run` was given, as from a shell.
  auto child = spawn({.keep_signals = true}, [&](int) -> int {
    exec_in(*holder, *p, exported, dl_env, *gpu, std::move(command));
  });
  if (!child.ok()) return fail("cannot start the command: " + child.status().message());
  int status = wait_child(*child);
  std::optional<FileLock> lock;
  if (p->save && (run_dir.empty() || last_of_step(run_dir, lock))) {
    Status saved = save_step(holder->pid(), p->step, p->opts, import_options().cache_dir);
    if (!saved.ok()) return fail(saved.message()), status != 0 ? status : 1;
  }
  return status;
}

}  // namespace slipway::launcher::cli
