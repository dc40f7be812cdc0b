// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// A consumer of weightsync::host, the component without CUDA: every header it includes compiles
// without the CUDA toolkit's headers (WEIGHTSYNC_HAS_CUDA is 0 whatever this machine has), vLLM's
// JSON helpers included, and the program links no CUDA library (run_consumer.cmake reads its
// NEEDED entries).
#include <weightsync/vllm.hpp>
#include <weightsync/weightsync.hpp>

#include <cstdio>

static_assert(!WEIGHTSYNC_HAS_CUDA && !WEIGHTSYNC_HAS_NCCL, "weightsync::host is host-only");

int main() {
  weightsync::NcclInitInfo info;
  info.master_address = "10.0.0.1";
  info.master_port = 29500;
  info.world_size = 3;
  info.rank_offset = 1;
  const nlohmann::json j = info;  // vLLM's JSON, as a host-only trainer posts it
  const auto back = j.get<weightsync::NcclInitInfo>();
  const auto& reg = weightsync::BackendRegistry::global();
  const bool ok = back.world_size == 3 && back.master_port == 29500 && reg.contains("host") &&
                  !reg.contains("nccl") && !reg.contains("ipc");
  std::printf("weightsync %s host consumer: %s\n", WEIGHTSYNC_VERSION_STRING,
              ok ? "ok (host backend only, vLLM JSON)" : "failed");
  return ok ? 0 : 1;
}
