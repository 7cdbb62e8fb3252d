// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
/* Stand-in for the NVIDIA driver's libcuda.so.1 in the GPU tests without a GPU (test_dl_gpus.bash):
 * built with the real soname and the driver version in its file name, it answers the few driver
 * API calls the probe makes. A "device" is a /dev/nvidiaN the caller can see, so what the container
 * was given is what cuDeviceGetCount reports. STANDIN_DRIVER_VERSION is CUDA's encoding (12020). */
#include <dirent.h>
#include <string.h>

#ifndef STANDIN_CUDA_VERSION
#define STANDIN_CUDA_VERSION 12020
#endif
#ifndef STANDIN_TAG
#define STANDIN_TAG "node"
#endif

static int count_gpus(void) {
  int n = 0;
  DIR* d = opendir("/dev");
  if (!d) return 0;
  for (struct dirent* e; (e = readdir(d));)
    if (strncmp(e->d_name, "nvidia", 6) == 0 && e->d_name[6] >= '0' && e->d_name[6] <= '9') ++n;
  closedir(d);
  return n;
}

int cuInit(unsigned flags) { return flags == 0 ? 0 : 1; }
int cuDriverGetVersion(int* v) { *v = STANDIN_CUDA_VERSION; return 0; }
int cuDeviceGetCount(int* n) { *n = count_gpus(); return 0; }
/* Which build of the stand-in this is: the node's driver or an image's forward-compat copy. */
const char* slipway_standin_tag(void) { return STANDIN_TAG; }
