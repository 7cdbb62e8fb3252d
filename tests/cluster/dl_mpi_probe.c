// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
/* dl-mpi-probe: an OpenMPI program for test_dl_host_libs.bash. Prints its rank, the world size and
   the file libmpi was mapped from (/proc/self/maps): the proof of which libmpi a task loaded. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  int rank = -1, size = -1;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char line[4096], lib[4096] = "?";
  FILE* maps = fopen("/proc/self/maps", "r");
  while (maps && fgets(line, sizeof line, maps)) {
    char* p = strchr(line, '/');
    if (p && strstr(p, "/libmpi.so")) {
      p[strcspn(p, "\n")] = 0;
      snprintf(lib, sizeof lib, "%s", p);
      break;
    }
  }
  if (maps) fclose(maps);
  printf("mpi rank=%d size=%d lib=%s\n", rank, size, lib);
  MPI_Finalize();
  return 0;
}
