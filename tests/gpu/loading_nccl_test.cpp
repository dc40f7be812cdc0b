// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Model-aware loading over NCCL, two processes on two GPUs: the producer sends Qwen3-8B-shaped HF
// tensors (separate q, k, v, gate, up; bf16), the consumer loads them into vLLM-layout parameters
// of one TP rank (fused qkv / gate_up, sharded, rotary-permuted, fp32 norms) through the planner:
// destinations for what lands in place, the batched CUDA gather for the rest. The parameters are
// compared bit for bit with the host path's result for the same tensors.
#include <weightsync/cuda/check.hpp>
#include <weightsync/cuda/device_buffer.hpp>
#include <weightsync/cuda/gather.hpp>
#include <weightsync/cuda/stream.hpp>
#include <weightsync/loading.hpp>
#include <weightsync/nccl/communicator.hpp>
#include <weightsync/packed_broadcast.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/gpu_peers.hpp"
#include "support/process.hpp"
#include "support/qwen3_loading.hpp"
#include "support/role.hpp"
#include "support/spawn.hpp"

using namespace weightsync;
using namespace std::chrono_literals;

namespace {

int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

}  // namespace

TEST_CASE("nccl loading: Qwen3-8B shapes through rename + fuse + shard + permute + cast, bit-exact",
          "[gpu][nccl][multi_gpu][loading]") {
  const auto& role = ws_test::role();
  if (!role.is_peer()) {
    ws_test::run_peers_expect_ok(ws_test::current_test_name(), 2, 300s);
    return;
  }
  const int device = role.rank % gpu_count();
  detail::check(cudaSetDevice(device), "cudaSetDevice");
  RendezvousOptions o;
  o.address = "127.0.0.1";
  o.port = role.port;
  o.rank = role.rank;
  o.world_size = 2;
  o.timeout = 60s;
  NcclOptions n;
  n.device = device;
  n.timeout = 120s;
  auto comm = NcclCommunicator::connect(o, n);
  CudaStream stream(device);

  ModelConfig c = qwen3_8b_config();  // full Qwen3-8B layer shapes, 2 layers
  const int layers = 2;
  const ws_test::HfTensors hf = ws_test::qwen3_layers(c, layers);
  int round = 0;
  for (const int tp : {1, 2})
    for (const bool permute : {false, true}) {
      c.permute_qk = permute;
      const int rank = tp - 1;  // the last rank's shard
      TransferOptions opt;
      opt.packed = true;
      ++round;
      if (role.rank == 0) {
        const auto src = hf.to_device(device);
        packed_broadcast_producer(hf.metas, src.items, comm, 0, opt);
        continue;
      }
      ws_test::ParamTable dev = ws_test::vllm_params(c, layers, tp, device);
      const auto plan = plan_loading(hf.metas, dev.params, qwen3_map(c, {rank, tp}));
      opt.destination = plan.destination_fn();
      packed_broadcast_consumer(hf.metas, comm, 0, plan.loader<cudaStream_t>(), opt);
      detail::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      ws_test::require_as_host_path(hf, c, layers, tp, rank, dev,
                                    detail::cat("round ", round, " tp ", tp, " permute ", permute));
    }
}
