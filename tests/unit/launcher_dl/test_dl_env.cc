// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Unit tests for launcher/dl/dl_env.h: the first node of a hostlist, MASTER_PORT (same for every
// task of a step, inside the range, spread across jobs) and the variables of one task.
#include <map>
#include <set>
#include <string>

#include "dl/dl_env.h"
#include "dl_test_util.h"

#include "check_main.h"  // last: check.h defines a fail() macro

using namespace slipway::launcher;

START_TEST(first_host_of_hostlists) {
  struct {
    const char* list;
    const char* first;
  } cases[] = {{"node1", "node1"},           {"node[1-4]", "node1"},
               {"node[3,1-2]", "node3"},     {"gpu[01-02],cpu7", "gpu01"},
               {"a1,b[2-3]", "a1"},          {"rack[2-3]-n1", "rack2-n1"},
               {"node[007]", "node007"}};
  for (const auto& c : cases) {
    auto h = first_host(c.list);
    ck_assert_msg(h.ok(), "%s: %s", c.list, h.status().message().c_str());
    ck_assert_str_eq(h->c_str(), c.first);
  }
  ck_assert(!first_host("").ok());
  ck_assert(!first_host("[1-2]").ok());
}
END_TEST

START_TEST(master_port_is_deterministic_and_in_range) {
  PortRange r{29500, 29999};
  std::set<int> ports;
  for (uint32_t job = 1; job < 200; ++job) {
    int p = master_port(job, 0, r);
    ck_assert_int_eq(p, master_port(job, 0, r));
    ck_assert(p >= 29500 && p <= 29999);
    ports.insert(p);
  }
  ck_assert_msg(ports.size() > 150, "only %zu distinct ports for 199 jobs", ports.size());
  ck_assert_int_ne(master_port(7, 0, r), master_port(7, 1, r));
  ck_assert_int_eq(master_port(7, 3, PortRange{40000, 40000}), 40000);
}
END_TEST

START_TEST(port_ranges_parse) {
  auto r = parse_port_range("20000-20099");
  ck_assert(r.ok() && r->first == 20000 && r->last == 20099);
  for (const char* bad : {"", "20000", "100-200", "3-2", "20000-70000", "a-b", "1024-"})
    ck_assert_msg(!parse_port_range(bad).ok(), "%s", bad);
  ck_assert(parse_port_range("x").status().message().find("master_port_range=") == 0);
}
END_TEST

START_TEST(environment_of_a_task) {
  TaskPlacement t;
  t.job_id = 42;
  t.step_id = 1;
  t.rank = 5;
  t.local_rank = 1;
  t.world_size = 8;
  t.local_world_size = 2;
  t.node_rank = 2;
  t.nodelist = "node[1-4]";
  auto env = dl_environment(t, PortRange{});
  ck_assert(env.ok());
  std::string all;
  for (const auto& e : *env) all += e.name + "=" + e.value + " ";
  const std::string port = std::to_string(master_port(42, 1, PortRange{}));
  EXPECT_STR(all, ("RANK=5 LOCAL_RANK=1 WORLD_SIZE=8 LOCAL_WORLD_SIZE=2 NODE_RANK=2 "
                                 "MASTER_ADDR=node1 MASTER_PORT=" + port + " ").c_str());
  for (const auto& e : *env) {
    ck_assert(!e.why.empty());
    ck_assert(e.overwrite == (e.name != "MASTER_ADDR" && e.name != "MASTER_PORT"));
  }
}
END_TEST

START_TEST(tasks_per_node_forms) {
  const char* spec = "2(x3),1,4";
  const int want[] = {2, 2, 2, 1, 4};
  for (int node = 0; node < 5; ++node) {
    auto n = tasks_on_node(spec, node);
    ck_assert_msg(n.ok() && *n == want[node], "node %d", node);
  }
  ck_assert(!tasks_on_node(spec, 5).ok());
  ck_assert(*tasks_on_node("8", 0) == 8);
  for (const char* bad : {"", "x", "2(x", "2(x0)", "2(x2", "2;1", "-1"})
    ck_assert_msg(!tasks_on_node(bad, 0).ok(), "accepted '%s'", bad);
}
END_TEST

// What `slipway run` sees under srun: SLURM_* variables only.
START_TEST(placement_from_srun_variables) {
  std::map<std::string, std::string> env = {
      {"SLURM_JOB_ID", "42"},           {"SLURM_STEP_ID", "1"},  {"SLURM_PROCID", "5"},
      {"SLURM_LOCALID", "1"},           {"SLURM_STEP_NUM_TASKS", "7"}, {"SLURM_NODEID", "2"},
      {"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"}, {"SLURM_STEP_NODELIST", "node[1-4]"}};
  auto lookup = [&](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  auto t = placement_from_env(lookup);
  ck_assert_msg(t.ok(), "%s", t.ok() ? "" : t.status().message().c_str());
  ck_assert(t->job_id == 42 && t->step_id == 1 && t->rank == 5 && t->local_rank == 1);
  ck_assert(t->world_size == 7 && t->local_world_size == 2 && t->node_rank == 2);
  EXPECT_STR(t->nodelist, "node[1-4]");
  env.erase("SLURM_STEP_NUM_TASKS");  // older srun: the job's forms
  env["SLURM_NTASKS"] = "7";
  ck_assert(placement_from_env(lookup).ok());
  env.erase("SLURM_PROCID");
  auto missing = placement_from_env(lookup);
  ck_assert(!missing.ok());
  ck_assert_msg(missing.status().message().find("SLURM_PROCID=''") == 0, "%s",
                missing.status().message().c_str());
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("dl_env");
  TCase* tc = tcase_create("env");
  tcase_add_test(tc, first_host_of_hostlists);
  tcase_add_test(tc, master_port_is_deterministic_and_in_range);
  tcase_add_test(tc, port_ranges_parse);
  tcase_add_test(tc, environment_of_a_task);
  tcase_add_test(tc, tasks_per_node_forms);
  tcase_add_test(tc, placement_from_srun_variables);
  suite_add_tcase(s, tc);
  return s;
}
