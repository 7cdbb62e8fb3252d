// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
/* PMIx client for tests/cluster/test_mpi_pmix.bash: the wire-up a training program does without
 * mpirun. Each rank puts "rank-R@HOST" under a key, commits, fences (collecting data), then gets
 * every peer's value and checks it. Prints one line per rank:
 *   pmix rank R/N host H peers ok|BAD [first wrong value]
 * Exits non-zero on any PMIx error or wrong value.
 * Written against the PMIx 4 ABI, which PMIx 5 keeps: PMIx 5's PMIX_PROC_CONSTRUCT, PMIX_LOAD_PROCID
 * and PMIX_VALUE_RELEASE call functions that PMIx 4 lacks, so a client using them, built on a PMIx 5
 * node (Slurm 24.11 on Debian 13), would not start in an image with PMIx 4 (docs/platform.md). */
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char kKey[] = "slipway.test.endpoint";

static void load_procid(pmix_proc_t *proc, const pmix_nspace_t nspace, pmix_rank_t rank) {
  memset(proc, 0, sizeof *proc);
  memcpy(proc->nspace, nspace, sizeof(pmix_nspace_t));
  proc->rank = rank;
}

static void release_value(pmix_value_t *v) {
  if (v->type == PMIX_STRING) free(v->data.string);
  free(v);
}

static int fail(const char *what, pmix_status_t rc) {
  fprintf(stderr, "pmix_client: %s: %s\n", what, PMIx_Error_string(rc));
  return 1;
}

int main(void) {
  pmix_proc_t me, proc;
  pmix_value_t value, *got = NULL;
  pmix_info_t collect;
  pmix_status_t rc;
  char host[256] = "?", mine[320], want[320];

  if ((rc = PMIx_Init(&me, NULL, 0)) != PMIX_SUCCESS) return fail("PMIx_Init", rc);
  load_procid(&proc, me.nspace, PMIX_RANK_WILDCARD);
  if ((rc = PMIx_Get(&proc, PMIX_JOB_SIZE, NULL, 0, &got)) != PMIX_SUCCESS)
    return fail("PMIx_Get(PMIX_JOB_SIZE)", rc);
  const unsigned size = got->data.uint32;
  release_value(got);

  gethostname(host, sizeof host - 1);
  snprintf(mine, sizeof mine, "rank-%u@%s", me.rank, host);
  PMIX_VALUE_LOAD(&value, mine, PMIX_STRING);
  if ((rc = PMIx_Put(PMIX_GLOBAL, kKey, &value)) != PMIX_SUCCESS) return fail("PMIx_Put", rc);
  if ((rc = PMIx_Commit()) != PMIX_SUCCESS) return fail("PMIx_Commit", rc);
  PMIX_INFO_LOAD(&collect, PMIX_COLLECT_DATA, NULL, PMIX_BOOL);
  if ((rc = PMIx_Fence(&proc, 1, &collect, 1)) != PMIX_SUCCESS) return fail("PMIx_Fence", rc);

  int ok = 1;
  char first_bad[400] = "";
  for (unsigned r = 0; r < size; ++r) {
    load_procid(&proc, me.nspace, r);
    if ((rc = PMIx_Get(&proc, kKey, NULL, 0, &got)) != PMIX_SUCCESS) return fail("PMIx_Get", rc);
    snprintf(want, sizeof want, "rank-%u@", r);
    if (got->type != PMIX_STRING || strncmp(got->data.string, want, strlen(want)) != 0) {
      if (ok) snprintf(first_bad, sizeof first_bad, " %u=%s", r,
                       got->type == PMIX_STRING ? got->data.string : "(not a string)");
      ok = 0;
    }
    release_value(got);
  }
  printf("pmix rank %u/%u host %s peers %s%s\n", me.rank, size, host, ok ? "ok" : "BAD", first_bad);
  fflush(stdout);
  if ((rc = PMIx_Finalize(NULL, 0)) != PMIX_SUCCESS) return fail("PMIx_Finalize", rc);
  return ok ? 0 : 1;
}
