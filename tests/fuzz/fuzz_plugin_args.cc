// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// libFuzzer target: the SPANK plugin's plugstack.conf arguments (spank/config.h,
// parse_plugin_args), linked from the plugin's own static core library. The input is the
// argument list, one argument per line, as slurmd hands it to slurm_spank_init.
#include "config.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = slipway::fuzz::fields(slipway::fuzz::as_text(data, size), '\n');
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  (void)slipway::spank::parse_plugin_args(static_cast<int>(args.size()), argv.data());
  return 0;
}
