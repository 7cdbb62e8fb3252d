// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
/* Stand-in for the NVIDIA driver's libnvidia-ml.so.1 (NVML) in the GPU tests without a GPU: the
 * calls nvidia-smi -L and the probe make, over the /dev/nvidiaN the caller can see. */
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#ifndef STANDIN_DRIVER
#define STANDIN_DRIVER "535.104.05"
#endif

static int minors[64], count = -1;

static void scan(void) {
  if (count >= 0) return;
  count = 0;
  DIR* d = opendir("/dev");
  if (!d) return;
  for (struct dirent* e; (e = readdir(d)) && count < 64;)
    if (strncmp(e->d_name, "nvidia", 6) == 0 && e->d_name[6] >= '0' && e->d_name[6] <= '9')
      sscanf(e->d_name + 6, "%d", &minors[count++]);
  closedir(d);
  for (int i = 1; i < count; ++i)  /* by minor, as NVML numbers them by bus */
    for (int j = i; j > 0 && minors[j - 1] > minors[j]; --j) {
      int t = minors[j]; minors[j] = minors[j - 1]; minors[j - 1] = t;
    }
}

int nvmlInit_v2(void) { scan(); return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned* n) { scan(); *n = (unsigned)count; return 0; }
int nvmlSystemGetDriverVersion(char* buf, unsigned len) {
  snprintf(buf, len, "%s", STANDIN_DRIVER);
  return 0;
}
/* The stand-in's own: the node minor of the I-th visible GPU (its UUID is GPU-standin-MINOR). */
int slipway_standin_minor(unsigned i) { scan(); return i < (unsigned)count ? minors[i] : -1; }
