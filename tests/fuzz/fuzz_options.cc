// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// libFuzzer target: the job's container options as srun, sbatch and `slipway run` take them
// (launcher/options/job_options.h). The input is lines "N VALUE": option N of option_table() (N
// taken modulo its size; a line without a space is a flag) applied in order, then
// validate_options(); the whole input also goes to parse_mounts() and parse_dl_gpus().
#include "fuzz_input.h"
#include "options/job_options.h"

namespace sl = slipway::launcher;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = slipway::fuzz::as_text(data, size);
  (void)sl::parse_mounts(text, "/work/dir");
  (void)sl::parse_mounts(text, "");
  (void)sl::parse_dl_gpus(text);
  auto table = sl::option_table();
  sl::JobOptions opts;
  for (const std::string& line : slipway::fuzz::fields(text, '\n')) {
    if (line.empty()) continue;
    const auto& spec = table[static_cast<unsigned char>(line[0]) % table.size()];
    size_t space = line.find(' ');
    std::string value = space == std::string::npos ? "" : line.substr(space + 1);
    const char* arg = space == std::string::npos ? nullptr : value.c_str();
    bool inherited = line.size() > 1 && line[1] == '!';
    (void)sl::apply_option(opts, spec.id, arg, "/work/dir", inherited);
  }
  (void)sl::validate_options(opts);
  return 0;
}
