// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Bootstrap selection from the environment, the RANK/WORLD_SIZE/MASTER_* bootstrap with forked
// processes (MASTER_PORT free again after init(), a taken MASTER_PORT), bad settings, and the
// PMIx bootstrap under OpenMPI's mpirun (skipped without it).
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>

#include "libtrain/bootstrap.h"
#include "libtrain/training.h"
#include "ranks.h"
// check.h last: it defines macros (fail) that clash with <ios>.
#include "check_main.h"

using namespace libtrain;

static void clear_env() {
  for (const char* v : {"PMIX_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                        "LIBTRAIN_BOOTSTRAP", "LIBTRAIN_TIMEOUT", "LIBTRAIN_NODE", "LIBTRAIN_TIMELINE"})
    unsetenv(v);
}

// A port that was free a moment ago (the bootstrap's rank 0 binds it again).
static int free_port() {
  int port = 0, fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  socklen_t len = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  close(fd);
  return port;
}

START_TEST(detects_from_environment) {
  clear_env();
  ck_assert_str_eq(detect_bootstrap().c_str(), "single");
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  ck_assert_str_eq(detect_bootstrap().c_str(), "env");
  setenv("PMIX_RANK", "0", 1);
  ck_assert_str_eq(detect_bootstrap().c_str(), "pmix");
  setenv("LIBTRAIN_BOOTSTRAP", "single", 1);
  ck_assert_str_eq(detect_bootstrap().c_str(), "single");
}
END_TEST

START_TEST(single_process) {
  clear_env();
  setenv("LIBTRAIN_NODE", "fake-node", 1);
  BootstrapInfo b = bootstrap(Seconds(1));
  ck_assert_str_eq(b.method.c_str(), "single");
  ck_assert_int_eq(b.size, 1);
  ck_assert_str_eq(b.node.c_str(), "fake-node");
}
END_TEST

START_TEST(bad_settings_are_rejected) {
  clear_env();
  setenv("RANK", "3", 1);
  setenv("WORLD_SIZE", "2", 1);
  bool rejected = false;
  try { bootstrap(Seconds(1)); } catch (const InvalidArgument&) { rejected = true; }
  ck_assert(rejected);
  setenv("RANK", "x", 1);
  rejected = false;
  try { bootstrap(Seconds(1)); } catch (const InvalidArgument&) { rejected = true; }
  ck_assert(rejected);
  clear_env();
  setenv("LIBTRAIN_TIMEOUT", "-1", 1);
  rejected = false;
  try { timeout_from_env(); } catch (const InvalidArgument&) { rejected = true; }
  ck_assert(rejected);
  setenv("LIBTRAIN_TIMEOUT", "2.5", 1);
  ck_assert(timeout_from_env().count() == 2.5);
}
END_TEST

// The env bootstrap's variables for RANK of 3 ranks on 2 fake nodes (0, 1 on "a"; 2 on "b").
static void set_env_rank_of_three(int rank, int port) {
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", "3", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  setenv("LIBTRAIN_NODE", rank == 2 ? "b" : "a", 1);
  setenv("LIBTRAIN_TIMEOUT", "10", 1);
}

START_TEST(env_bootstrap_three_processes_two_fake_nodes) {
  clear_env();
  int port = free_port();
  auto codes = testing::run_processes(3, [&](int rank, const std::shared_ptr<Store>&) {
    set_env_rank_of_three(rank, port);
    init();
    if (bootstrap_method() != "env" || libtrain::rank() != rank || libtrain::size() != 3) return 1;
    if (local_size() != (rank == 2 ? 1 : 2) || local_rank() != (rank == 1 ? 1 : 0)) return 2;
    int64_t v = rank;
    world().allreduce(&v, 1, DataType::kInt64, ReduceOp::kSum);
    shutdown();
    return v == 3 ? 0 : 3;
  });
  for (int c : codes) ck_assert_int_eq(c, 0);
}
END_TEST

// Binds and listens on PORT without SO_REUSEADDR (as torch.distributed's TCPStore does); the
// listening socket is returned (-1 when the port is held, TIME_WAIT included).
static int listen_plain(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd, 8) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// After init(), MASTER_PORT is free (torch.distributed's env:// rendezvous binds it next in a
// script that mixes both) and the world still works: it no longer needs the store.
START_TEST(env_bootstrap_gives_master_port_back) {
  clear_env();
  int port = free_port();
  auto codes = testing::run_processes(3, [&](int rank, const std::shared_ptr<Store>&) {
    set_env_rank_of_three(rank, port);
    init();
    if (rank == 0) {  // the server was here: nothing may hold the port any more
      int fd = listen_plain(port);
      if (fd < 0) return 1;
      close(fd);
    }
    int64_t v = rank + 1;
    world().allreduce(&v, 1, DataType::kInt64, ReduceOp::kSum);
    world().barrier();
    shutdown();
    return v == 6 ? 0 : 2;
  });
  for (int c : codes) ck_assert_int_eq(c, 0);
}
END_TEST

// Rank 0 finding MASTER_PORT taken (e.g. by torch.distributed's store) is one line that names
// the variable, its value and the fixes, at once.
START_TEST(env_bootstrap_master_port_in_use) {
  clear_env();
  int port = free_port();
  int holder = listen_plain(port);
  ck_assert_int_ge(holder, 0);
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  std::string message;
  try {
    bootstrap_env(Seconds(5));
  } catch (const InvalidArgument& e) {
    message = e.what();
  }
  close(holder);
  clear_env();
  std::string expected = "libtrain: MASTER_PORT=" + std::to_string(port) + " is already in use";
  ck_assert_msg(message.rfind(expected, 0) == 0, "got '%s'", message.c_str());
  ck_assert_msg(message.find("set a free MASTER_PORT") != std::string::npos, "no fix in '%s'", message.c_str());
}
END_TEST

START_TEST(pmix_bootstrap_under_mpirun) {
  if (system("command -v mpirun >/dev/null 2>&1") != 0) {
    printf("SKIP: mpirun not installed\n");
    return;
  }
  clear_env();
  std::string cmd = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LIBTRAIN_TIMEOUT=20 "
                    "timeout 60 mpirun --oversubscribe -np 3 " LIBTRAIN_PMIX_PROBE " 2>&1";
  int rc = system(cmd.c_str());
  ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "mpirun pmix_probe exited %d", rc);
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("libtrain_bootstrap");
  TCase* tc = tcase_create("bootstrap");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, detects_from_environment);
  tcase_add_test(tc, single_process);
  tcase_add_test(tc, bad_settings_are_rejected);
  tcase_add_test(tc, env_bootstrap_three_processes_two_fake_nodes);
  tcase_add_test(tc, env_bootstrap_gives_master_port_back);
  tcase_add_test(tc, env_bootstrap_master_port_in_use);
  tcase_add_test(tc, pmix_bootstrap_under_mpirun);
  suite_add_tcase(s, tc);
  return s;
}
