// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Unit tests for the plugin's option table and plugstack.conf argument parser: values are
// validated at submission with one line that names the option and the fix.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config.h"
#include "options/job_options.h"
// check.h defines macros (fail) that break later standard headers: include it last.
#include "check_main.h"

using namespace slipway::spank;
using namespace slipway::launcher;

START_TEST(dl_gpus_accepts_counts_auto_none) {
  auto g = parse_dl_gpus("2");
  ck_assert(g.ok());
  ck_assert(g->mode == DlGpus::Mode::kCount);
  ck_assert_int_eq(g->count, 2);
  ck_assert(parse_dl_gpus("auto")->mode == DlGpus::Mode::kAuto);
  ck_assert(parse_dl_gpus("none")->mode == DlGpus::Mode::kNone);
}
END_TEST

START_TEST(dl_gpus_rejects_garbage_with_the_fix) {
  for (const char* bad : {"", "0", "-1", "2x", "all", "65", " 1"}) {
    auto g = parse_dl_gpus(bad);
    ck_assert_msg(!g.ok(), "accepted '%s'", bad);
    ck_assert_msg(g.status().message().find("--dl-gpus=") == 0, "%s", g.status().message().c_str());
    ck_assert(g.status().message().find("'auto' or 'none'") != std::string::npos);
  }
}
END_TEST

START_TEST(apply_option_stores_values) {
  JobOptions o;
  ck_assert(apply_option(o, OptionId::kContainerImage, "busybox").ok());
  ck_assert_str_eq(o.container_image.c_str(), "busybox");
  ck_assert(!apply_option(o, OptionId::kContainerImage, "").ok());
  ck_assert(!apply_option(o, OptionId::kContainerImage, nullptr).ok());
  ck_assert(apply_option(o, OptionId::kDlGpus, "auto").ok());
  ck_assert(o.dl_gpus.mode == DlGpus::Mode::kAuto);
}
END_TEST

START_TEST(option_table_is_complete) {
  bool image = false, gpus = false;
  for (const auto& o : option_table()) {
    ck_assert(o.name && o.usage && std::string(o.usage).find("[slipway]") == 0);
    image |= std::string(o.name) == "container-image";
    gpus |= std::string(o.name) == "dl-gpus";
  }
  ck_assert(image && gpus);
}
END_TEST

static slipway::launcher::Result<PluginConfig> parse(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_plugin_args(static_cast<int>(argv.size()), argv.data());
}

START_TEST(plugstack_keys_parse) {
  auto c = parse({"cache_dir=/scratch/slipway", "insecure_registries=a:5000,b",
                  "default_registry=reg.example.org"});
  ck_assert(c.ok());
  ck_assert_str_eq(c->cache_dir.c_str(), "/scratch/slipway");
  ck_assert_int_eq(c->insecure_registries.size(), 2);
  ck_assert_str_eq(c->insecure_registries[1].c_str(), "b");
  ck_assert_str_eq(c->default_registry.c_str(), "reg.example.org");
  ck_assert(parse({}).ok());
}
END_TEST

START_TEST(plugstack_rejects_unknown_and_bad_values) {
  auto c = parse({"cache_dri=/x"});
  ck_assert(!c.ok());
  ck_assert(c.status().message().find("unknown argument 'cache_dri=/x'") != std::string::npos);
  ck_assert(c.status().message().find("cache_dir") != std::string::npos);
  ck_assert(!parse({"cache_dir=relative"}).ok());
  ck_assert(!parse({"cache_dir"}).ok());
  ck_assert(!parse({"registry_mirror_timeout=0"}).ok());
}
END_TEST

// registry_mirror_timeout=: how long a silent mirror is waited for (RegistryOptions::mirror_silence_s).
START_TEST(plugstack_registry_mirror_timeout) {
  auto c = parse({});
  ck_assert(c.ok());
  ck_assert_int_eq(c->registry_mirror_timeout_s, 10);
  c = parse({"registry_mirror_timeout=2"});
  ck_assert(c.ok());
  ck_assert_int_eq(c->registry_mirror_timeout_s, 2);
  c = parse({"registry_mirror_timeout=soon"});
  ck_assert(!c.ok());
  ck_assert_msg(c.status().message().find("registry_mirror_timeout='soon' is not a number of seconds") !=
                    std::string::npos,
                "%s", c.status().message().c_str());
}
END_TEST

// dl_gpus= is the site's default of --dl-gpus; unset, the container's NVIDIA_* variables decide.
START_TEST(plugstack_dl_gpus_default) {
  auto c = parse({});
  ck_assert(c.ok() && c->dl_gpus.mode == DlGpus::Mode::kUnset);
  c = parse({"dl_gpus=none"});
  ck_assert(c.ok() && c->dl_gpus.mode == DlGpus::Mode::kNone);
  c = parse({"dl_gpus=2"});
  ck_assert(c.ok() && c->dl_gpus.mode == DlGpus::Mode::kCount && c->dl_gpus.count == 2);
  c = parse({"dl_gpus=all"});
  ck_assert(!c.ok());
  ck_assert_msg(c.status().message().find("'all' is not valid") != std::string::npos, "%s",
                c.status().message().c_str());
}
END_TEST

START_TEST(mounts_parse_and_reject_bad_specs) {
  auto m = parse_mounts("/data:/data:ro,/scratch/x:/x,rel:/r:norbind+rw,/only", "/home/u");
  ck_assert_msg(m.ok(), "%s", m.ok() ? "" : m.status().message().c_str());
  ck_assert_int_eq(m->size(), 4);
  ck_assert((*m)[0].read_only && (*m)[0].recursive);
  ck_assert_str_eq((*m)[1].destination.c_str(), "/x");
  ck_assert_str_eq((*m)[2].source.c_str(), "/home/u/rel");
  ck_assert(!(*m)[2].recursive && !(*m)[2].read_only);
  ck_assert_str_eq((*m)[3].destination.c_str(), "/only");
  for (const char* bad : {"", "/a:relative", "/a:/b:ro:x", "/a:/b:bogus", "/a:/../etc", ":/b",
                          "/a:/b,", "/a/../b:/c"}) {
    auto r = parse_mounts(bad, "/");
    ck_assert_msg(!r.ok(), "accepted '%s'", bad);
    ck_assert_msg(r.status().message().find("--container-mounts=") == 0, "%s",
                  r.status().message().c_str());
  }
}
END_TEST

// pyxis's own --help example is "ro+rprivate": its flags are mount options.
START_TEST(mounts_take_pyxis_mount_flags) {
  auto m = parse_mounts("/a:/a:ro+rprivate,/b:/b:noexec+nosuid+nodev+private,/c:/c", "/");
  ck_assert_msg(m.ok(), "%s", m.ok() ? "" : m.status().message().c_str());
  ck_assert((*m)[0].read_only && !(*m)[0].no_exec && (*m)[0].recursive);
  ck_assert(!(*m)[1].read_only && (*m)[1].no_exec);
  ck_assert(!(*m)[2].no_exec);
  for (const char* flag : {"slave", "rslave", "shared", "rshared"}) {
    auto r = parse_mounts(std::string("/a:/a:ro+") + flag, "/");
    ck_assert_msg(!r.ok(), "accepted propagation %s", flag);
    ck_assert_msg(r.status().message().find("container mounts are always private") !=
                      std::string::npos, "%s", r.status().message().c_str());
  }
  // pyxis's special sources: tmpfs and umount (not paths under the working directory).
  auto special = parse_mounts("tmpfs:/scratch:noexec,umount:/tmp", "/home/u");
  ck_assert_msg(special.ok(), "%s", special.ok() ? "" : special.status().message().c_str());
  ck_assert((*special)[0].kind == MountSpec::Kind::kTmpfs && (*special)[0].no_exec);
  ck_assert_str_eq((*special)[0].destination.c_str(), "/scratch");
  ck_assert((*special)[1].kind == MountSpec::Kind::kUmount);
  ck_assert_str_eq((*special)[1].source.c_str(), "umount");
  for (const char* bad : {"tmpfs", "umount", "umount:/tmp:ro", "tmpfs:relative"})
    ck_assert_msg(!parse_mounts(bad, "/").ok(), "accepted '%s'", bad);
  auto r = parse_mounts("/a:/a:exec", "/");
  ck_assert(!r.ok());
  ck_assert_msg(r.status().message().find("unknown flag 'exec'; use ro, rw, rbind, norbind, noexec") !=
                    std::string::npos, "%s", r.status().message().c_str());
  // Propagation pyxis passes through that is safe here: unbindable.
  auto u = parse_mounts("/a:/a:unbindable,/b:/b:ro+runbindable,/c:/c", "/");
  ck_assert_msg(u.ok(), "%s", u.ok() ? "" : u.status().message().c_str());
  ck_assert((*u)[0].unbindable && (*u)[1].unbindable && (*u)[1].read_only && !(*u)[2].unbindable);
}
END_TEST

// tmpfs(5) options on pyxis's tmpfs source, joined by '+' like the other flags.
START_TEST(tmpfs_mounts_take_tmpfs_options) {
  auto m = parse_mounts("tmpfs:/s:size=1g+mode=0700+nr_inodes=10k+huge=within_size+noexec,"
                        "tmpfs:/t:size=50%", "/");
  ck_assert_msg(m.ok(), "%s", m.ok() ? "" : m.status().message().c_str());
  ck_assert_str_eq((*m)[0].tmpfs_options.c_str(), "size=1g,mode=0700,nr_inodes=10k,huge=within_size");
  ck_assert((*m)[0].no_exec);
  ck_assert_str_eq((*m)[1].tmpfs_options.c_str(), "size=50%");
  for (const char* bad : {"tmpfs:/s:size=", "tmpfs:/s:size=1q", "tmpfs:/s:mode=0999",
                          "tmpfs:/s:huge=sometimes", "tmpfs:/s:uid=0"}) {
    auto r = parse_mounts(bad, "/");
    ck_assert_msg(!r.ok(), "accepted '%s'", bad);
  }
  auto r = parse_mounts("tmpfs:/s:size=1q", "/");
  ck_assert_msg(r.status().message().find("bad tmpfs option 'size=1q'; use size=N") !=
                    std::string::npos, "%s", r.status().message().c_str());
  // Only a tmpfs takes them: a bind has no size.
  ck_assert(!parse_mounts("/a:/a:size=1g", "/").ok());
}
END_TEST

START_TEST(pyxis_registry_hash_form) {
  JobOptions o;
  ck_assert(apply_option(o, OptionId::kContainerImage, "nvcr.io#nvidia/pytorch:24.01-py3").ok());
  ck_assert_str_eq(o.container_image.c_str(), "nvcr.io/nvidia/pytorch:24.01-py3");
  ck_assert(apply_option(o, OptionId::kContainerImage, "user@10.77.0.1:5000#slipway/busybox").ok());
  ck_assert_str_eq(o.container_image.c_str(), "10.77.0.1:5000/slipway/busybox");
  ck_assert(apply_option(o, OptionId::kContainerImage, "ubuntu:22.04").ok());
  ck_assert_str_eq(o.container_image.c_str(), "ubuntu:22.04");
  ck_assert(apply_option(o, OptionId::kContainerImage, "./dir#1/img.tar").ok());  // a path: kept
  ck_assert_str_eq(o.container_image.c_str(), "./dir#1/img.tar");
}
END_TEST

START_TEST(container_name_modes) {
  JobOptions o;
  ck_assert(apply_option(o, OptionId::kContainerName, "pytorch").ok());
  ck_assert(o.name_mode == NameMode::kAuto);
  ck_assert(apply_option(o, OptionId::kContainerName, "x_1.2:create").ok());
  ck_assert_str_eq(o.container_name.c_str(), "x_1.2");
  ck_assert(o.name_mode == NameMode::kCreate);
  ck_assert(apply_option(o, OptionId::kContainerName, "x:exec").ok() && o.name_mode == NameMode::kExec);
  ck_assert(apply_option(o, OptionId::kContainerName, "x:no_exec").ok());
  for (const char* bad : {"", ":create", "a/b", "x:bogus", ".hidden", "a b"})
    ck_assert_msg(!apply_option(o, OptionId::kContainerName, bad).ok(), "accepted '%s'", bad);
}
END_TEST

START_TEST(other_values_validated) {
  JobOptions o;
  ck_assert(apply_option(o, OptionId::kContainerWorkdir, "/work").ok());
  // pyxis resolves a relative workdir inside the container's root: ".." of "/" is "/".
  for (auto [in, out] : {std::pair{"work", "/work"}, {"../x/./y/", "/x/y"}, {"/a/../../b", "/b"},
                         {"..", "/"}}) {
    ck_assert(apply_option(o, OptionId::kContainerWorkdir, in).ok());
    ck_assert_str_eq(o.workdir.c_str(), out);
  }
  ck_assert(!apply_option(o, OptionId::kContainerWorkdir, "").ok());
  ck_assert(apply_option(o, OptionId::kContainerUnshare, "net,uts").ok());
  ck_assert(o.unshare.net && o.unshare.uts && !o.unshare.ipc);
  auto bad = apply_option(o, OptionId::kContainerUnshare, "pid");
  ck_assert(!bad.ok() && bad.message().find("net, ipc and uts") != std::string::npos);
  ck_assert_msg(bad.message().find("unknown namespace 'pid'") != std::string::npos, "%s",
                bad.message().c_str());
  ck_assert(apply_option(o, OptionId::kContainerEnv, "PATH,LD_LIBRARY_PATH").ok());
  ck_assert_int_eq(o.env_names.size(), 2);
  ck_assert(!apply_option(o, OptionId::kContainerEnv, "A=B").ok());
  ck_assert(apply_option(o, OptionId::kContainerSave, "out.tar", "/home/u").ok());
  ck_assert_str_eq(o.save_path.c_str(), "/home/u/out.tar");
}
END_TEST

START_TEST(contradictory_flags_and_missing_image) {
  JobOptions o;
  ck_assert(apply_option(o, OptionId::kContainerImage, "busybox").ok());
  ck_assert(apply_option(o, OptionId::kContainerWritable, nullptr).ok());
  ck_assert(apply_option(o, OptionId::kContainerReadonly, nullptr).ok());
  auto v = validate_options(o);
  ck_assert(!v.ok());
  ck_assert_msg(v.message() == "--container-writable and --container-readonly contradict each "
                               "other; give one", "%s", v.message().c_str());
  JobOptions no_image;
  ck_assert(apply_option(no_image, OptionId::kContainerMounts, "/a:/b").ok());
  v = validate_options(no_image);
  ck_assert(!v.ok() && v.message().find("--container-mounts needs --container-image") == 0);
  JobOptions gpus_only;
  ck_assert(apply_option(gpus_only, OptionId::kDlGpus, "1").ok());
  ck_assert(validate_options(gpus_only).ok());
  JobOptions create;
  ck_assert(apply_option(create, OptionId::kContainerName, "n:create").ok());
  ck_assert(!validate_options(create).ok());
}
END_TEST

START_TEST(explicit_flag_beats_its_inherited_opposite) {
  // srun inside `#SBATCH --container-readonly` given --container-writable, in either order.
  JobOptions a;
  ck_assert(apply_option(a, OptionId::kContainerReadonly, nullptr, "", /*inherited=*/true).ok());
  ck_assert(apply_option(a, OptionId::kContainerWritable, nullptr, "", false).ok());
  ck_assert(validate_options(a).ok() || a.container_image.empty());
  ck_assert(a.writable.value());
  JobOptions b;
  ck_assert(apply_option(b, OptionId::kContainerImage, "x").ok());
  ck_assert(apply_option(b, OptionId::kContainerWritable, nullptr, "", false).ok());
  ck_assert(apply_option(b, OptionId::kContainerReadonly, nullptr, "", true).ok());
  ck_assert(validate_options(b).ok());
  ck_assert(b.writable.value());
  // Both explicit still contradict.
  JobOptions c;
  ck_assert(apply_option(c, OptionId::kContainerImage, "x").ok());
  ck_assert(apply_option(c, OptionId::kContainerWritable, nullptr).ok());
  ck_assert(apply_option(c, OptionId::kContainerReadonly, nullptr).ok());
  ck_assert(!validate_options(c).ok());
}
END_TEST

START_TEST(environment_defaults_slipway_then_pyxis) {
  std::map<std::string, std::string> env = {{"PYXIS_CONTAINER_IMAGE", "pyxis/img"},
                                            {"SLIPWAY_CONTAINER_WRITABLE", "1"},
                                            {"PYXIS_CONTAINER_MOUNT_HOME", "0"},
                                            {"SLIPWAY_CONTAINER_WORKDIR", "/w"}};
  auto lookup = [&](const std::string& n) -> std::optional<std::string> {
    auto it = env.find(n);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  JobOptions o;
  ck_assert(apply_option(o, OptionId::kContainerWorkdir, "/cli").ok());
  ck_assert(apply_env_defaults(o, lookup, true).ok());
  ck_assert_str_eq(o.container_image.c_str(), "pyxis/img");
  ck_assert(o.writable.value_or(false));
  ck_assert(o.mount_home.has_value() && !*o.mount_home);
  ck_assert_str_eq(o.workdir.c_str(), "/cli");  // the command line wins
  JobOptions no_pyxis;
  ck_assert(apply_env_defaults(no_pyxis, lookup, false).ok());
  ck_assert(no_pyxis.container_image.empty());
  env["SLIPWAY_CONTAINER_IMAGE"] = "slipway/img";
  JobOptions both;
  ck_assert(apply_env_defaults(both, lookup, true).ok());
  ck_assert_str_eq(both.container_image.c_str(), "slipway/img");
  env["SLIPWAY_CONTAINER_REMAP_ROOT"] = "maybe";
  JobOptions bad;
  auto st = apply_env_defaults(bad, lookup, true);
  ck_assert(!st.ok() && st.message().find("SLIPWAY_CONTAINER_REMAP_ROOT='maybe'") != std::string::npos);
}
END_TEST

START_TEST(new_plugstack_keys) {
  auto c = parse({"sbatch_support=1", "container_scope=global", "mount_home=0",
                  "mounts=/etc/site:/etc/site:ro", "runtime_dir=/local/run", "honor_pyxis_env=0"});
  ck_assert_msg(c.ok(), "%s", c.ok() ? "" : c.status().message().c_str());
  ck_assert(c->sbatch_support && !c->mount_home && !c->honor_pyxis_env && !c->writable);
  auto w = parse({"writable=1"});
  ck_assert(w.ok() && w->writable);
  ck_assert(c->container_scope == ContainerScope::kGlobal);
  ck_assert(!parse({"container_scope=step"}).ok());
  ck_assert(!parse({"mounts=/a:rel"}).ok());
  ck_assert(!parse({"sbatch_support=maybe"}).ok());
}
END_TEST

// fabric_devices= (issue 27): the default set without the key, the list with it, and a bad
// pattern refused in one line that names the key, the pattern and the form to use.
START_TEST(fabric_devices_key) {
  auto d = parse({});
  ck_assert(d.ok() && d->fabric.include == slipway::launcher::default_fabric_policy().include);
  auto c = parse({"fabric_devices=default,mad,-/dev/cxi*"});
  ck_assert_msg(c.ok(), "%s", c.ok() ? "" : c.status().message().c_str());
  ck_assert(slipway::launcher::is_fabric_device_allowed(c->fabric, "/dev/infiniband/umad0"));
  ck_assert(!slipway::launcher::is_fabric_device_allowed(c->fabric, "/dev/cxi0"));
  auto bad = parse({"fabric_devices=default,/dev/*/uverbs0"});
  ck_assert(!bad.ok());
  ck_assert_str_eq(bad.status().message().c_str(),
                   "plugstack.conf: fabric_devices: pattern '/dev/*/uverbs0' has a glob "
                   "character in a directory; write /dev/NAME or /dev/DIR/NAME with * ? [...] in "
                   "NAME only, e.g. /dev/infiniband/umad*");
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("spank_options");
  TCase* tc = tcase_create("parse");
  tcase_add_test(tc, dl_gpus_accepts_counts_auto_none);
  tcase_add_test(tc, dl_gpus_rejects_garbage_with_the_fix);
  tcase_add_test(tc, apply_option_stores_values);
  tcase_add_test(tc, option_table_is_complete);
  tcase_add_test(tc, plugstack_keys_parse);
  tcase_add_test(tc, plugstack_rejects_unknown_and_bad_values);
  tcase_add_test(tc, plugstack_registry_mirror_timeout);
  tcase_add_test(tc, plugstack_dl_gpus_default);
  tcase_add_test(tc, mounts_parse_and_reject_bad_specs);
  tcase_add_test(tc, mounts_take_pyxis_mount_flags);
  tcase_add_test(tc, tmpfs_mounts_take_tmpfs_options);
  tcase_add_test(tc, container_name_modes);
  tcase_add_test(tc, pyxis_registry_hash_form);
  tcase_add_test(tc, other_values_validated);
  tcase_add_test(tc, contradictory_flags_and_missing_image);
  tcase_add_test(tc, environment_defaults_slipway_then_pyxis);
  tcase_add_test(tc, explicit_flag_beats_its_inherited_opposite);
  tcase_add_test(tc, new_plugstack_keys);
  tcase_add_test(tc, fabric_devices_key);
  suite_add_tcase(s, tc);
  return s;
}
