// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The step façade (launcher/step/step.h), which the plugin and `slipway run` both drive: the image
// imported, held in use (imported again when an rm or gc took it first), recorded for a new named
// container, a named container whose image is gone refused with the way to recreate it; the
// task's environment and binds, PMIx's settings the same for both edges; lock_down().
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <string>

#include "common/child.h"
#include "image/cache.h"
#include "../launcher_image/image_test_util.h"
#include "options/container_plan.h"
#include "options/job_options.h"
#include "step/step.h"
// check.h defines macros (fail) that break later standard headers: include it last.
#include "check_main.h"

using namespace slipway::launcher;

namespace {

std::string hex(char c) { return std::string(64, c); }
std::string digest(char c) { return "sha256:" + hex(c); }

// A published image ID whose config sets ENV.
void publish(const NodeCache& c, char id, const std::string& env_json) {
  const std::string dir = c.root() + "/images/" + hex(id);
  mkdir(dir.c_str(), 0700);
  mkdir((dir + "/rootfs").c_str(), 0755);
  write_text(dir + "/config.json", R"({"config":{"Env":)" + env_json + "}}");
  write_text(dir + "/manifest.json", R"({"schemaVersion":2,"config":{"digest":"sha256:)" + hex('9') +
                                         R"(","size":1},"layers":[]})");
}

struct Fixture {
  Sandbox sb;
  NodeCache cache{sb.base + "/cache"};
  StepInput in;
  int imports = 0;
  Fixture() {
    ck_assert(cache.ensure_layout().ok());
    in.plan.cache_dir = cache.root();
    in.plan.uid = getuid();
    in.plan.gid = getgid();
    in.plan.node = "node0";
  }
};

bool in_use(const NodeCache& c, char id) {
  return remove_image(c, digest(id)).error_number() == EBUSY;
}

}  // namespace

START_TEST(the_image_is_imported_held_in_use_and_planned) {
  Fixture f;
  publish(f.cache, 'a', R"(["A=1"])");
  f.in.import = [&]() {
    ++f.imports;
    return find_recorded_image(f.cache, digest('a'));
  };
  auto step = prepare_step(f.in);
  ck_assert_msg(step.ok(), "%s", step.ok() ? "" : step.status().message().c_str());
  ck_assert_int_eq(f.imports, 1);
  ASSERT_SAME_STR(step->image.manifest_digest, digest('a'));
  ASSERT_SAME_STR(step->spec.rootfs, f.cache.root() + "/images/" + hex('a') + "/rootfs");
  ck_assert(step->image_in_use.has_value());
  ck_assert(in_use(f.cache, 'a'));
  ck_assert(path_exists(f.cache.root() + "/mnt"));
  step->image_in_use.reset();
  ck_assert(!in_use(f.cache, 'a'));
}
END_TEST

START_TEST(an_image_removed_before_it_is_held_is_imported_again) {
  Fixture f;
  publish(f.cache, 'a', "[]");
  // The first import's image is gone by the time the step marks it (an rm or gc in between).
  f.in.import = [&]() -> Result<ImportedImage> {
    ++f.imports;
    auto img = find_recorded_image(f.cache, digest('a'));
    if (f.imports == 1) ck_assert(remove_image(f.cache, digest('a')).ok());
    else publish(f.cache, 'a', "[]"), img = find_recorded_image(f.cache, digest('a'));
    return img;
  };
  auto step = prepare_step(f.in);
  ck_assert(step.ok());
  ck_assert_int_eq(f.imports, 2);
  ck_assert(in_use(f.cache, 'a'));
}
END_TEST

START_TEST(a_new_named_container_records_its_image_and_a_later_step_reuses_it) {
  Fixture f;
  publish(f.cache, 'a', "[]");
  const std::string named = f.sb.base + "/named";
  mkdir(named.c_str(), 0700);
  f.in.options.container_name = "c1";
  f.in.plan.named_dir = named;
  f.in.import = [&]() {
    ++f.imports;
    return find_recorded_image(f.cache, digest('a'));
  };
  ck_assert(prepare_step(f.in).ok());
  auto recorded = named_container_image(named, "c1");
  ck_assert(recorded.ok());
  ASSERT_SAME_STR(*recorded, digest('a'));
  // A later step of the container: its recorded image, no import.
  f.in.recorded_image = *recorded;
  auto again = prepare_step(f.in);
  ck_assert(again.ok());
  ck_assert_int_eq(f.imports, 1);
  ASSERT_SAME_STR(again->image.manifest_digest, digest('a'));
}
END_TEST

START_TEST(a_named_container_whose_image_is_gone_says_how_to_recreate_it) {
  Fixture f;
  f.in.options.container_name = "c1";
  f.in.recorded_image = digest('z');
  f.in.import = [&]() -> Result<ImportedImage> {
    ++f.imports;
    return Status::error("must not import", EINVAL);
  };
  auto step = prepare_step(f.in);
  ck_assert(!step.ok());
  ck_assert_int_eq(f.imports, 0);
  ASSERT_SAME_STR(step.status().message(),
                  "the image of container 'c1' is no longer in the node cache; recreate it with "
                  "--container-name=c1:create --container-image=IMAGE");
}
END_TEST

// One environment for a task on either edge.
START_TEST(the_task_gets_the_image_env_home_and_pmix_settings) {
  Sandbox sb;
  Step step;
  step.image.config.env = {"A=1", "PATH=/image/bin"};
  std::map<std::string, std::string> job = {{"PATH", "/usr/bin"}};
  TaskInput in{.home = sb.base, .entrypoint_env = {"B=2"},
               .job_env = [&](const std::string& n) -> std::optional<std::string> {
                 auto it = job.find(n);
                 return it == job.end() ? std::nullopt : std::optional<std::string>(it->second);
               }};
  auto value = [](const TaskEntry& t, const std::string& name) -> std::string {
    std::string v = "<unset>";
    for (const auto& [n, val] : t.env)
      if (n == name) v = val;
    return v;
  };
  JobOptions opts;
  TaskEntry t = task_entry(step, opts, in);
  ASSERT_SAME_STR(value(t, "A"), "1");
  ASSERT_SAME_STR(value(t, "B"), "2");
  ASSERT_SAME_STR(value(t, "HOME"), "<unset>");  // the same home as outside
  ASSERT_SAME_STR(value(t, "PMIX_MCA_gds"), "<unset>");  // not a PMIx step
  // A PMIx step whose server directory exists: bound at its path, the shared-memory store kept.
  job["PMIX_SERVER_TMPDIR"] = sb.root;
  t = task_entry(step, opts, in);
  bool bound = false;
  for (const auto& b : t.view.binds) bound |= b.source == sb.root && b.destination == sb.root;
  ck_assert(bound);
  ASSERT_SAME_STR(value(t, "PMIX_MCA_gds"), "<unset>");
  // Its directory missing: nothing bound, and the hash store instead of the shared memory one.
  job["PMIX_SERVER_TMPDIR"] = sb.base + "/missing";
  t = task_entry(step, opts, in);
  for (const auto& b : t.view.binds) ck_assert(b.source != sb.base + "/missing");
  ASSERT_SAME_STR(value(t, "PMIX_MCA_gds"), "hash");
  // A store the job chose itself is kept, as enroot's PMIx hook keeps it.
  job["PMIX_MCA_gds"] = "ds12";
  ASSERT_SAME_STR(value(task_entry(step, opts, in), "PMIX_MCA_gds"), "<unset>");
  job.erase("PMIX_MCA_gds");
  // Root remapped inside: the home is /root, and munge proves who the task is, where the node
  // runs munge.
  step.spec.remap_root = true;
  step.spec.binds.push_back({.source = sb.base, .destination = "/root"});
  ASSERT_SAME_STR(value(task_entry(step, opts, in), "HOME"), "/root");
  struct stat st;
  const bool munge = stat("/run/munge", &st) == 0 && S_ISDIR(st.st_mode);
  ASSERT_SAME_STR(value(task_entry(step, opts, in), "PMIX_MCA_psec"), munge ? "munge" : "<unset>");
  job["PMIX_MCA_psec"] = "native";  // the job's own choice stays
  ASSERT_SAME_STR(value(task_entry(step, opts, in), "PMIX_MCA_psec"), "<unset>");
}
END_TEST

START_TEST(lock_down_leaves_no_privilege_to_gain) {
  auto c = spawn({}, [](int fd) {
    if (!lock_down(std::nullopt).ok()) return 1;
    const std::string v = std::to_string(prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0));
    (void)!write(fd, v.data(), v.size());
    return 0;
  });
  ChildExit e = c->wait();
  ck_assert(e.ok());
  ASSERT_SAME_STR(e.report, "1");
}
END_TEST

// A mount source that exists but the user may not reach (/proc/1/root) says so, not "does not
// exist" (issue 30).
START_TEST(an_unreachable_mount_source_is_not_called_missing) {
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    if (geteuid() == 0 && (setgid(65534) || setuid(65534))) _exit(1);
    JobOptions opts;
    auto mounts = parse_mounts("/proc/1/root:/host", "/");
    if (!mounts.ok()) _exit(2);
    opts.mounts = *mounts;
    PlanInput in;
    in.rootfs = "/nonexistent-rootfs";
    in.node = "node1";
    auto plan = plan_container(opts, SiteDefaults{}, in);
    std::string msg = plan.ok() ? "ok" : plan.status().message();
    (void)!write(fds[1], msg.data(), msg.size());
    _exit(0);
  }
  close(fds[1]);
  std::string msg;
  char buf[1024];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) msg.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  ck_assert_msg(msg.find("--container-mounts: source path '/proc/1/root' cannot be reached on node1: "
                         "Permission denied; the job's user (uid ") == 0, "%s", msg.c_str());
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("step");
  TCase* tc = tcase_create("core");
  tcase_add_test(tc, the_image_is_imported_held_in_use_and_planned);
  tcase_add_test(tc, an_image_removed_before_it_is_held_is_imported_again);
  tcase_add_test(tc, a_new_named_container_records_its_image_and_a_later_step_reuses_it);
  tcase_add_test(tc, a_named_container_whose_image_is_gone_says_how_to_recreate_it);
  tcase_add_test(tc, the_task_gets_the_image_env_home_and_pmix_settings);
  tcase_add_test(tc, lock_down_leaves_no_privilege_to_gain);
  tcase_add_test(tc, an_unreachable_mount_source_is_not_called_missing);
  suite_add_tcase(s, tc);
  return s;
}
