// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#include <weightsync/weightsync.hpp>

#include <cstdio>
#include <vector>

int main() {
  const std::vector<weightsync::TensorMeta> metas = {
      {"a", weightsync::DType::bfloat16, {4, 4}}, {"b", weightsync::DType::float32, {}}};
  const auto plan = weightsync::chunk_plan(metas, 16);
  std::printf("weightsync %s: %zu chunks, cuda=%d nccl=%d\n", WEIGHTSYNC_VERSION_STRING,
              plan.size(), WEIGHTSYNC_HAS_CUDA, WEIGHTSYNC_HAS_NCCL);
  return plan.size() == 2 ? 0 : 1;
}
