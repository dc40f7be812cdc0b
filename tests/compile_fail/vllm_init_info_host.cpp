// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Must not compile: vllm_init_info without NCCL (weightsync::host). The diagnostic must say that
// it needs NCCL and what to link, not that the name is unknown.
#include <weightsync/vllm.hpp>

int main() {
  const auto info = weightsync::vllm_init_info(2);
  return info.world_size == 2 ? 0 : 1;
}
