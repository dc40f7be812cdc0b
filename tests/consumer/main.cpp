// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#include <weightsync/weightsync.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

int main() {
  const std::vector<weightsync::TensorMeta> metas = {{"a", weightsync::DType::bfloat16, {4, 4}},
                                                     {"b", weightsync::DType::float32, {}}};
  const auto plan = weightsync::chunk_plan(metas, 16);
  std::printf("weightsync %s: %zu chunks, cuda=%d nccl=%d\n", WEIGHTSYNC_VERSION_STRING,
              plan.size(), WEIGHTSYNC_HAS_CUDA, WEIGHTSYNC_HAS_NCCL);
  // weightsync.hpp registers every built-in backend this build has (backends.hpp).
  std::vector<std::string> want = {"host"};
  if (WEIGHTSYNC_HAS_CUDA) want.insert(want.end(), {"ipc", "p2p"});
  if (WEIGHTSYNC_HAS_NCCL) want.push_back("nccl");
  const auto& reg = weightsync::BackendRegistry::global();
  const bool backends_ok =
      std::all_of(want.begin(), want.end(), [&](const std::string& n) { return reg.contains(n); });
  std::printf("backends registered: %s\n", backends_ok ? "all built-ins" : "MISSING");
  return plan.size() == 2 && backends_ok ? 0 : 1;
}
