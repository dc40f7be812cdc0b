// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Model-aware loading through the colocated IPC transport, two processes on one GPU: the trainer
// exports Qwen3-8B-shaped HF tensors (separate q, k, v, gate, up; bf16), the server pulls them
// into vLLM-layout parameters of one TP rank (fused qkv / gate_up, sharded, rotary-permuted, fp32
// norms) through the planner: destinations for what lands in place (pulled straight to its rows),
// the batched CUDA gather for the rest. Compared bit for bit with the host path's result.
#include <weightsync/cuda/check.hpp>
#include <weightsync/cuda/stream.hpp>
#include <weightsync/ipc.hpp>
#include <weightsync/loading.hpp>

#include <chrono>
#include <string>

#include "support/catch.hpp"
#include "support/gpu_peers.hpp"
#include "support/qwen3_loading.hpp"
#include "support/role.hpp"

using namespace weightsync;
using namespace std::chrono_literals;

TEST_CASE("ipc loading: Qwen3-8B shapes through rename + fuse + shard + permute + cast, bit-exact",
          "[gpu][ipc][loading]") {
  if (ws_test::ran_as_parent(1, 300s)) return;
  const auto& role = ws_test::role();
  const int device = 0;
  detail::check(cudaSetDevice(device), "cudaSetDevice");
  IpcOptions io;
  io.same_gpu = true;
  IpcTransport t(ws_test::peer_rendezvous(), device, io, 60s);

  ModelConfig c = qwen3_8b_config();  // full Qwen3-8B layer shapes, 2 layers
  const int layers = 2;
  const ws_test::HfTensors hf = ws_test::qwen3_layers(c, layers);
  const auto src = role.rank == 0 ? hf.to_device(device) : ws_test::HfTensors::OnDevice{};
  int round = 0;
  for (const int tp : {1, 2, 4})
    for (const bool permute : {false, true}) {
      c.permute_qk = permute;
      const int rank = tp - 1;  // the last rank's shard
      TransferOptions opt;
      opt.timeout = 60s;
      ++round;
      if (role.rank == 0) {
        t.send(hf.metas, src.items, opt);
        continue;
      }
      ws_test::ParamTable dev = ws_test::vllm_params(c, layers, tp, device);
      const auto plan = plan_loading(hf.metas, dev.params, qwen3_map(c, {rank, tp}));
      // Unpermuted at TP 1, every tensor lands in place (q, k, v at their rows of qkv); the norms'
      // casts and, sharded or permuted, the q/k/v pieces go through the gather.
      if (tp == 1 && !permute) CHECK(plan.in_place_count() > 0);
      if (tp > 1) CHECK(plan.gather_count() > 0);
      opt.destination = plan.destination_fn();
      t.receive(hf.metas, opt, plan.loader<cudaStream_t>());
      detail::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      ws_test::require_as_host_path(
          hf, c, layers, tp, rank, dev,
          detail::cat("round ", round, " tp ", tp, " permute ", permute));
    }
}
