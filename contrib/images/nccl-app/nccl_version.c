// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
/* nccl-version: a program linked against libnccl.so.2. Prints the version the loaded NCCL reports
   and the file libnccl was mapped from (/proc/self/maps), e.g.
     nccl 22809 /opt/slipway/hostlibs/libnccl.so.2 */
#include <stdio.h>
#include <string.h>

int ncclGetVersion(int* version);

int main(void) {
  int v = 0;
  ncclGetVersion(&v);
  char line[4096], path[4096] = "?";
  FILE* maps = fopen("/proc/self/maps", "r");
  while (maps && fgets(line, sizeof line, maps)) {
    char* p = strchr(line, '/');
    if (p && strstr(p, "libnccl")) {
      p[strcspn(p, "\n")] = 0;
      snprintf(path, sizeof path, "%s", p);
      break;
    }
  }
  if (maps) fclose(maps);
  printf("nccl %d %s\n", v, path);
  return v > 0 ? 0 : 1;
}
