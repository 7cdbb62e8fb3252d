// Unit tests for the plugin's option table and plugstack.conf argument parser: values are
// validated at submission with one line that names the option and the fix.
#include <string>
#include <vector>

#include "check_main.h"
#include "config.h"
#include "options.h"

using namespace slipway::spank;

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
  suite_add_tcase(s, tc);
  return s;
}
