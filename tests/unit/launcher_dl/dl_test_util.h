// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Helpers for the launcher/dl tests: scratch directories and files, and a fake node (the /dev,
// /proc and /sys a GPU node shows) built under one root directory.
#pragma once

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "scratch_dir.h"

inline std::string make_scratch() { return make_scratch_dir("/tmp/slipway-dl-test."); }

inline void make_dirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i)
    if (i == path.size() || path[i] == '/') mkdir(path.substr(0, i).c_str(), 0755);
}

inline void write_file(const std::string& path, const std::string& text) {
  make_dirs(path.substr(0, path.rfind('/')));
  std::ofstream(path) << text;
}

inline void copy_file(const std::string& from, const std::string& to) {
  make_dirs(to.substr(0, to.rfind('/')));
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary);
  out << in.rdbuf();
}

// PCI address of fake GPU `minor`: 0000:1M:00.0, M in hex.
inline std::string fake_bus_id(int minor) {
  char buf[32];
  snprintf(buf, sizeof buf, "0000:%x:00.0", 0x10 + minor);
  return buf;
}

// A node with `gpus` GPUs: /dev/nvidia0..N-1 (plain files stand in for the device nodes), the
// control devices, nvidia-caps/, the driver's /proc entries with UUID GPU-fake-N, and sysfs giving
// GPU N the cores 4*(N/2) .. 4*(N/2)+3 (two GPUs per NUMA node).
inline std::string make_fake_node(int gpus) {
  std::string root = make_scratch();
  for (int i = 0; i < gpus; ++i) {
    const std::string bus = fake_bus_id(i);
    write_file(root + "/dev/nvidia" + std::to_string(i), "");
    write_file(root + "/proc/driver/nvidia/gpus/" + bus + "/information",
               "Model: \t\t Fake GPU\nGPU UUID: \t GPU-fake-" + std::to_string(i) +
                   "\nDevice Minor: \t " + std::to_string(i) + "\n");
    const int first = 4 * (i / 2);
    write_file(root + "/sys/bus/pci/devices/" + bus + "/local_cpulist",
               std::to_string(first) + "-" + std::to_string(first + 3) + "\n");
    write_file(root + "/sys/bus/pci/devices/" + bus + "/numa_node", std::to_string(i / 2) + "\n");
  }
  for (const char* ctl : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"})
    write_file(root + "/dev/" + ctl, "");
  write_file(root + "/dev/nvidia-caps/nvidia-cap1", "");
  return root;
}

// String equality on values (ck_assert_str_eq keeps a pointer into its argument, which dangles
// when the argument is a temporary std::string).
#define EXPECT_STR(actual, expected)                                                       \
  do {                                                                                     \
    const std::string slw_a_ = (actual), slw_e_ = (expected);                              \
    ck_assert_msg(slw_a_ == slw_e_, "got:  '%s'\nwant: '%s'", slw_a_.c_str(), slw_e_.c_str()); \
  } while (0)
