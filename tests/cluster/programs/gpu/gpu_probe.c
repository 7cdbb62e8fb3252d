// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
/* What a CUDA program sees in its container, for the GPU tests without a GPU
 * (test_dl_gpus.bash): the /dev/nvidia* nodes, then libcuda.so.1 and libnvidia-ml.so.1 loaded
 * with dlopen as the CUDA runtime and NVML load them (no LD_LIBRARY_PATH needed: run it under
 * `env -u LD_LIBRARY_PATH`), the file each came from, and what their calls answer.
 * Output, one fact per line: "devices nvidia0,nvidiactl,...", "cuda PATH TAG VERSION COUNT",
 * "nvml PATH DRIVER COUNT", "env NAME=VALUE"; "cuda missing: ERROR" when it cannot load. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

static void devices(void) {
  char* names[256];
  int n = 0;
  DIR* d = opendir("/dev");
  for (struct dirent* e; d && (e = readdir(d)) && n < 256;)
    if (strncmp(e->d_name, "nvidia", 6) == 0) names[n++] = strdup(e->d_name);
  if (d) closedir(d);
  qsort(names, (size_t)n, sizeof names[0], cmp);
  printf("devices ");
  for (int i = 0; i < n; ++i) printf("%s%s", i ? "," : "", names[i]);
  printf("%s\n", n ? "" : "none");
}

static const char* path_of(void* h) {
  struct link_map* map = NULL;
  return dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map ? map->l_name : "?";
}

int main(void) {
  devices();
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (!cuda) {
    printf("cuda missing: %s\n", dlerror());
  } else {
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(cuda, "cuInit");
    int (*version)(int*) = (int (*)(int*))dlsym(cuda, "cuDriverGetVersion");
    int (*count)(int*) = (int (*)(int*))dlsym(cuda, "cuDeviceGetCount");
    const char* (*tag)(void) = (const char* (*)(void))dlsym(cuda, "slipway_standin_tag");
    int v = 0, c = 0;
    if (!init || init(0) != 0 || !version || version(&v) != 0 || !count || count(&c) != 0) return 2;
    printf("cuda %s %s %d %d\n", path_of(cuda), tag ? tag() : "real", v, c);
  }
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (!nvml) {
    printf("nvml missing: %s\n", dlerror());
  } else {
    int (*init)(void) = (int (*)(void))dlsym(nvml, "nvmlInit_v2");
    int (*count)(unsigned*) = (int (*)(unsigned*))dlsym(nvml, "nvmlDeviceGetCount_v2");
    int (*driver)(char*, unsigned) = (int (*)(char*, unsigned))dlsym(nvml, "nvmlSystemGetDriverVersion");
    unsigned c = 0;
    char d[80] = "";
    if (!init || init() != 0 || !count || count(&c) != 0 || !driver || driver(d, sizeof d) != 0) return 3;
    printf("nvml %s %s %u\n", path_of(nvml), d, c);
  }
  const char* names[] = {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i)
    printf("env %s=%s\n", names[i], getenv(names[i]) ? getenv(names[i]) : "<unset>");
  return 0;
}
