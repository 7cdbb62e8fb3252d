// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Ranks sharing a GPU (see gpu_sharing.h).
#include "gpu_sharing.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace libtrain {

std::string encode_rank_gpu(const RankGpu& g) { return g.host + "\n" + g.bus_id; }

RankGpu decode_rank_gpu(int rank, const std::string& text) {
  const size_t nl = text.find('\n');
  return {rank, text.substr(0, nl), nl == std::string::npos ? "" : text.substr(nl + 1)};
}

std::string shared_gpu_message(const std::vector<RankGpu>& gpus) {
  std::map<std::pair<std::string, std::string>, std::vector<int>> users;
  for (const auto& g : gpus) users[{g.host, g.bus_id}].push_back(g.rank);
  const std::vector<int>* worst = nullptr;
  std::pair<std::string, std::string> where;
  for (auto& [key, ranks] : users) {
    std::sort(ranks.begin(), ranks.end());
    if (ranks.size() > 1 && (!worst || ranks.front() < worst->front())) worst = &ranks, where = key;
  }
  if (!worst) return "";
  std::string list;
  for (size_t i = 0; i < worst->size(); ++i)
    list += (i == 0 ? "" : i + 1 == worst->size() ? " and " : ", ") + std::to_string((*worst)[i]);
  std::set<std::string> on_host;
  for (const auto& g : gpus)
    if (g.host == where.first) on_host.insert(g.bus_id);
  const std::string n = std::to_string(on_host.size());
  return "libtrain: ranks " + list + " share GPU " + where.second + " on " + where.first +
         ", but NCCL needs a GPU of its own for every rank; run at most " + n + " rank" +
         (on_host.size() == 1 ? "" : "s") + " per node there (srun --ntasks-per-node=" + n +
         "), or give each rank its own GPU (srun --gpus-per-task=1, or --dl-gpus=1)";
}

}  // namespace libtrain
