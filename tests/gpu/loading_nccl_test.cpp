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
#include "support/process.hpp"
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

struct HfTensors {
  std::vector<TensorMeta> metas;
  std::vector<std::vector<std::uint16_t>> host;  // bf16 bits, never NaN
  void add(std::string name, std::vector<std::int64_t> shape) {
    metas.push_back({std::move(name), DType::bfloat16, std::move(shape)});
    host.emplace_back(metas.back().numel());
    std::uint64_t x = 0x9e3779b97f4a7c15ull * metas.size();
    for (auto& v : host.back()) {
      x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
      v = static_cast<std::uint16_t>((x * 0x2545f4914f6cdd1dull) >> 48) & 0xbfff;
    }
  }
};

HfTensors qwen3_layers(const ModelConfig& c, int layers) {
  HfTensors t;
  const std::int64_t H = c.hidden, Q = c.n_heads * c.head_dim, KV = c.n_kv_heads * c.head_dim,
                     I = c.intermediate;
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.add(p + "input_layernorm.weight", {H});
    t.add(p + "self_attn.q_proj.weight", {Q, H});
    t.add(p + "self_attn.k_proj.weight", {KV, H});
    t.add(p + "self_attn.v_proj.weight", {KV, H});
    t.add(p + "self_attn.o_proj.weight", {H, Q});
    t.add(p + "self_attn.q_norm.weight", {c.head_dim});
    t.add(p + "self_attn.k_norm.weight", {c.head_dim});
    t.add(p + "post_attention_layernorm.weight", {H});
    t.add(p + "mlp.gate_proj.weight", {I, H});
    t.add(p + "mlp.up_proj.weight", {I, H});
    t.add(p + "mlp.down_proj.weight", {H, I});
  }
  return t;
}

struct Table {
  std::vector<ParamInfo> params;
  std::vector<std::vector<std::byte>> host;
  std::vector<DeviceBuffer> dev;
};

// vLLM-layout parameters of TP rank `rank` of `tp`, in host memory and (when device >= 0) on it.
Table vllm_params(const ModelConfig& c, int layers, int tp, int device) {
  Table t;
  const std::int64_t H = c.hidden, hd = c.head_dim, q = c.n_heads / tp * hd,
                     kv = c.n_kv_heads / tp * hd;
  auto add = [&](std::string name, DType d, std::vector<std::int64_t> shape) {
    const std::size_t n = TensorMeta{name, d, shape}.nbytes();
    void* ptr = nullptr;
    if (device >= 0) {
      t.dev.emplace_back(n, device);
      detail::check(cudaMemset(t.dev.back().data(), 0xCD, n), "cudaMemset");
      ptr = t.dev.back().data();
    } else {
      t.host.emplace_back(n, std::byte{0xCD});
      ptr = t.host.back().data();
    }
    t.params.push_back({std::move(name), ptr, d, std::move(shape)});
  };
  t.host.reserve(64);
  t.dev.reserve(64);
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", DType::float32, {H});
    add(p + "self_attn.qkv_proj.weight", DType::bfloat16, {q + 2 * kv, H});
    add(p + "self_attn.o_proj.weight", DType::bfloat16, {H, c.n_heads * hd / tp});
    add(p + "self_attn.q_norm.weight", DType::float32, {hd});
    add(p + "self_attn.k_norm.weight", DType::float32, {hd});
    add(p + "post_attention_layernorm.weight", DType::float32, {H});
    add(p + "mlp.gate_up_proj.weight", DType::bfloat16, {2 * c.intermediate / tp, H});
    add(p + "mlp.down_proj.weight", DType::bfloat16, {H, c.intermediate / tp});
  }
  return t;
}

}  // namespace

TEST_CASE("nccl loading: Qwen3-8B shapes through rename + fuse + shard + permute + cast, bit-exact",
          "[gpu][nccl][multi_gpu][loading]") {
  const auto& role = ws_test::role();
  if (!role.is_peer()) {
    if (gpu_count() < 2) WS_SKIP("needs 2 GPUs, found " << gpu_count());
    const auto results = ws_test::run_peers(
        "nccl loading: Qwen3-8B shapes through rename + fuse + shard + permute + cast, bit-exact",
        2, ws_test::free_port(), "", 300s);
    for (std::size_t i = 0; i < results.size(); ++i) {
      INFO("rank " << i << " exit " << results[i].exit_code << "\n" << results[i].output);
      CHECK(results[i].exit_code == 0);
    }
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
  const HfTensors hf = qwen3_layers(c, layers);
  int round = 0;
  for (const int tp : {1, 2})
    for (const bool permute : {false, true}) {
      c.permute_qk = permute;
      const int rank = tp - 1;  // the last rank's shard
      TransferOptions opt;
      opt.packed = true;
      ++round;
      if (role.rank == 0) {
        std::vector<DeviceBuffer> src;
        std::vector<SourceTensorRef> items;
        for (std::size_t i = 0; i < hf.metas.size(); ++i) {
          src.emplace_back(hf.metas[i].nbytes(), device);
          detail::check(cudaMemcpy(src.back().data(), hf.host[i].data(), hf.metas[i].nbytes(),
                                   cudaMemcpyHostToDevice),
                        "cudaMemcpy");
          items.push_back({&hf.metas[i], src.back().data()});
        }
        packed_broadcast_producer(hf.metas, items, comm, 0, opt);
        continue;
      }
      Table dev = vllm_params(c, layers, tp, device);
      const auto plan = plan_loading(hf.metas, dev.params, qwen3_map(c, {rank, tp}));
      opt.destination = plan.destination_fn();
      packed_broadcast_consumer(hf.metas, comm, 0, plan.loader<cudaStream_t>(), opt);
      detail::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      // The host path for the same tensors (checked against plain loops in the CPU tests).
      Table host = vllm_params(c, layers, tp, -1);
      const auto hplan = plan_loading(hf.metas, host.params, qwen3_map(c, {rank, tp}));
      std::vector<TensorView> views;
      for (std::size_t i = 0; i < hf.metas.size(); ++i) {
        if (void* d = hplan.destination(hf.metas[i]))
          std::memcpy(d, hf.host[i].data(), hf.metas[i].nbytes());
        else
          views.push_back(
              {&hf.metas[i], const_cast<std::uint16_t*>(hf.host[i].data()), hf.metas[i].nbytes()});
      }
      hplan.load(std::span<const TensorView>(views), HostStream{});
      for (std::size_t i = 0; i < dev.params.size(); ++i) {
        std::vector<std::byte> got(host.host[i].size());
        detail::check(cudaMemcpy(got.data(), dev.dev[i].data(), got.size(), cudaMemcpyDeviceToHost),
                      "cudaMemcpy");
        INFO("round " << round << " tp " << tp << " permute " << permute << " parameter "
                      << dev.params[i].name);
        REQUIRE(got == host.host[i]);
      }
    }
}
