// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// ShmGroup's segment (libtrain/src/shm_segment.h): a constructor that fails after shm_open leaves
// no name in /dev/shm; a rank never unlinks a name it did not create; a segment of the wrong size
// is an error, not a SIGBUS; bad local ranks are rejected before anything is created.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "libtrain/communicator.h"
#include "libtrain/errors.h"
#include "shm_group.h"
// check.h last: it defines macros (fail) that clash with <ios>.
#include "check_main.h"

using namespace libtrain;
using namespace libtrain::detail;

namespace {

constexpr size_t kSlot = 64 << 10;

bool name_exists(const std::string& name) { return ::access(("/dev/shm" + name).c_str(), F_OK) == 0; }

// A name made the way a leader would not: what another process left there.
void make_foreign(const std::string& name, off_t bytes) {
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(::ftruncate(fd, bytes), 0);
  ::close(fd);
}

}  // namespace

START_TEST(a_group_unlinks_its_name_when_destroyed) {
  std::string name = ShmGroup::create_name();
  { ShmGroup g(name, true, 0, 2, kSlot, Seconds(1)); ck_assert(name_exists(name)); }
  ck_assert(!name_exists(name));
}
END_TEST

// ftruncate fails after shm_open created the name: a file size limit makes it EFBIG
// (setrlimit(2); the SIGXFSZ it also raises is ignored). Check forks each test, so the limit
// stays in this test.
START_TEST(failed_create_unlinks_its_name) {
  ::signal(SIGXFSZ, SIG_IGN);
  rlimit small{4096, RLIM_INFINITY};
  ck_assert_int_eq(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string name = ShmGroup::create_name();
  int err = 0;
  try {
    ShmGroup g(name, true, 0, 2, kSlot, Seconds(1));
  } catch (const SystemError& e) {
    err = e.error_number();
  }
  ck_assert_int_eq(err, EFBIG);
  bool left = name_exists(name);
  if (left) ::shm_unlink(name.c_str());
  ck_assert_msg(!left, "%s left in /dev/shm by a failed constructor", name.c_str());
}
END_TEST

// The leader's name exists but is not the size this rank computes (another LIBTRAIN_SHM_CHUNK):
// mapping it would SIGBUS on the first touch past its end.
START_TEST(joining_a_segment_of_another_size_is_an_error) {
  std::string name = ShmGroup::create_name();
  make_foreign(name, 4096);
  bool mismatch = false;
  try {
    ShmGroup g(name, false, 1, 2, kSlot, Seconds(1));
  } catch (const MismatchError& e) {
    mismatch = std::string(e.what()).find("LIBTRAIN_SHM_CHUNK") != std::string::npos;
  }
  bool kept = name_exists(name);  // the leader's, not this rank's to remove
  ::shm_unlink(name.c_str());
  ck_assert(mismatch);
  ck_assert(kept);
}
END_TEST

START_TEST(creating_an_existing_name_fails_and_keeps_it) {
  std::string name = ShmGroup::create_name();
  make_foreign(name, 4096);
  int err = 0;
  try {
    ShmGroup g(name, true, 0, 2, kSlot, Seconds(1));
  } catch (const SystemError& e) {
    err = e.error_number();
  }
  bool kept = name_exists(name);
  ::shm_unlink(name.c_str());
  ck_assert_int_eq(err, EEXIST);
  ck_assert(kept);
}
END_TEST

START_TEST(bad_local_ranks_are_rejected) {
  const int cases[][2] = {{2, 2}, {-1, 2}, {0, 0}, {0, kMaxLocalRanks + 1}};
  for (const auto& c : cases) {
    std::string name = ShmGroup::create_name();
    bool rejected = false;
    try {
      ShmGroup g(name, true, c[0], c[1], kSlot, Seconds(1));
    } catch (const InvalidArgument&) {
      rejected = true;
    }
    bool left = name_exists(name);
    if (left) ::shm_unlink(name.c_str());
    ck_assert_msg(rejected, "local rank %d of %d accepted", c[0], c[1]);
    ck_assert(!left);
  }
}
END_TEST

// A rank that computes with threads of its own shares its CPUs with them: with one CPU, a group
// of one rank is not oversubscribed by its ranks, but is once its compute thread counts, and its
// waiters then yield instead of spinning (ShmGroup::shares_cpus).
START_TEST(compute_threads_count_in_the_cpus_shared) {
  cpu_set_t saved, one;
  ck_assert_int_eq(sched_getaffinity(0, sizeof(saved), &saved), 0);
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu(), &one);
  ck_assert_int_eq(sched_setaffinity(0, sizeof(one), &one), 0);
  for (int threads : {0, 1, 7}) {
    ShmGroup g(ShmGroup::create_name(), true, 0, 1, kSlot, Seconds(1));
    g.wait_attached({kAuto, kAuto, 0, threads, 0});
    ck_assert_msg(g.shares_cpus() == (threads > 0), "%d compute threads: shares_cpus() %d", threads,
                  g.shares_cpus());
  }
  ck_assert_int_eq(sched_setaffinity(0, sizeof(saved), &saved), 0);
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("libtrain_shm_segment");
  TCase* tc = tcase_create("segment");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, a_group_unlinks_its_name_when_destroyed);
  tcase_add_test(tc, failed_create_unlinks_its_name);
  tcase_add_test(tc, joining_a_segment_of_another_size_is_an_error);
  tcase_add_test(tc, creating_an_existing_name_fails_and_keeps_it);
  tcase_add_test(tc, bad_local_ranks_are_rejected);
  tcase_add_test(tc, compute_threads_count_in_the_cpus_shared);
  suite_add_tcase(s, tc);
  return s;
}
