// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
/* MPI_Allreduce test program for tests/cluster/test_mpi_pmix.bash, run by srun --mpi=pmix in a
 * container with no mpirun. Every rank contributes its rank to a small sum and fills a large
 * buffer (above the shared-memory eager limit, so vader uses its single-copy path) with rank+i;
 * both results are checked against their closed forms. Prints one line per rank:
 *   rank R/N host H userns U sum S large ok|BAD
 * and exits non-zero on a wrong result. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

enum { kLarge = 1 << 18 }; /* 256 Ki doubles = 2 MiB */

int main(int argc, char **argv) {
  int rank, size;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  long sum = 0, mine = rank;
  MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);

  double *in = malloc(kLarge * sizeof *in), *out = malloc(kLarge * sizeof *out);
  if (!in || !out) MPI_Abort(MPI_COMM_WORLD, 2);
  for (int i = 0; i < kLarge; ++i) in[i] = rank + (double)i;
  MPI_Allreduce(in, out, kLarge, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  int large_ok = 1;
  const double ranks = (double)size * (size - 1) / 2;
  for (int i = 0; i < kLarge; ++i)
    if (out[i] != ranks + (double)size * i) large_ok = 0;

  char host[256] = "?", userns[64] = "?";
  gethostname(host, sizeof host - 1);
  ssize_t n = readlink("/proc/self/ns/user", userns, sizeof userns - 1);
  if (n > 0) userns[n] = '\0';
  printf("rank %d/%d host %s userns %s sum %ld large %s\n", rank, size, host, userns, sum,
         large_ok ? "ok" : "BAD");
  fflush(stdout);
  int bad = sum != (long)size * (size - 1) / 2 || !large_ok;
  MPI_Finalize();
  free(in);
  free(out);
  return bad;
}
