// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
/* Stand-in for nvidia-smi in the GPU tests without a GPU: `nvidia-smi -L` lists the GPUs the
 * stand-in NVML (standin_nvml.c, loaded with dlopen as the real tool loads libnvidia-ml.so.1)
 * reports, one "GPU I: ... (UUID: GPU-standin-MINOR)" line each. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (!nvml) {
    fprintf(stderr, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver: %s\n",
            dlerror());
    return 9;
  }
  int (*init)(void) = (int (*)(void))dlsym(nvml, "nvmlInit_v2");
  int (*count)(unsigned*) = (int (*)(unsigned*))dlsym(nvml, "nvmlDeviceGetCount_v2");
  int (*minor)(unsigned) = (int (*)(unsigned))dlsym(nvml, "slipway_standin_minor");
  unsigned n = 0;
  if (!init || !count || !minor || init() != 0 || count(&n) != 0) return 9;
  if (argc < 2 || strcmp(argv[1], "-L") != 0) {
    printf("stand-in nvidia-smi: %u GPU(s)\n", n);
    return 0;
  }
  for (unsigned i = 0; i < n; ++i)
    printf("GPU %u: Stand-in GPU (UUID: GPU-standin-%d)\n", i, minor(i));
  return 0;
}
