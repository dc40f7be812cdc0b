// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! The model-aware loading GPU tests' pieces, shared by every transport: Qwen3-8B-shaped HF
//! tensors as a trainer holds them (separate q, k, v, gate, up; bf16), vLLM-layout parameters of
//! one TP rank (fused qkv / gate_up, sharded, fp32 norms) on the device or the host, and the check
//! of what a transport loaded against the host path for the same tensors.

#include <cuda_runtime_api.h>
#include <weightsync/cuda/check.hpp>
#include <weightsync/cuda/device_buffer.hpp>
#include <weightsync/loading.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support/catch.hpp"

namespace ws_test {

struct HfTensors {
  std::vector<weightsync::TensorMeta> metas;
  std::vector<std::vector<std::uint16_t>> host;  // bf16 bits, never NaN
  void add(std::string name, std::vector<std::int64_t> shape) {
    metas.push_back({std::move(name), weightsync::DType::bfloat16, std::move(shape)});
    host.emplace_back(metas.back().numel());
    std::uint64_t x = 0x9e3779b97f4a7c15ull * metas.size();
    for (auto& v : host.back()) {
      x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
      v = static_cast<std::uint16_t>((x * 0x2545f4914f6cdd1dull) >> 48) & 0xbfff;
    }
  }
  //! The tensors copied to `device`, back to back (256-byte aligned) in one allocation of whole
  //! 2 MiB pages, as PyTorch's caching allocator holds them, and the items that point at them.
  struct OnDevice {
    weightsync::DeviceBuffer arena;
    std::vector<weightsync::SourceTensorRef> items;
  };
  OnDevice to_device(int device) const {
    std::vector<std::size_t> offsets;
    std::size_t total = 0;
    for (const auto& m : metas) {
      offsets.push_back(total);
      total += (m.nbytes() + 255) / 256 * 256;
    }
    OnDevice d{weightsync::DeviceBuffer((total + (2u << 20) - 1) / (2u << 20) * (2u << 20), device),
               {}};
    auto* base = static_cast<std::byte*>(d.arena.data());
    for (std::size_t i = 0; i < metas.size(); ++i) {
      weightsync::detail::check(cudaMemcpy(base + offsets[i], host[i].data(), metas[i].nbytes(),
                                           cudaMemcpyHostToDevice),
                                "cudaMemcpy");
      d.items.push_back({&metas[i], base + offsets[i]});
    }
    return d;
  }
};

inline HfTensors qwen3_layers(const weightsync::ModelConfig& c, int layers) {
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

struct ParamTable {
  std::vector<weightsync::ParamInfo> params;
  std::vector<std::vector<std::byte>> host;
  std::vector<weightsync::DeviceBuffer> dev;
};

//! vLLM-layout parameters of TP rank `rank` of `tp`, poisoned (0xCD), in host memory or (when
//! device >= 0) on it.
inline ParamTable vllm_params(const weightsync::ModelConfig& c, int layers, int tp, int device) {
  using weightsync::DType;
  ParamTable t;
  const std::int64_t H = c.hidden, hd = c.head_dim, q = c.n_heads / tp * hd,
                     kv = c.n_kv_heads / tp * hd;
  auto add = [&](std::string name, DType d, std::vector<std::int64_t> shape) {
    const std::size_t n = weightsync::TensorMeta{name, d, shape}.nbytes();
    void* ptr = nullptr;
    if (device >= 0) {
      t.dev.emplace_back(n, device);
      weightsync::detail::check(cudaMemset(t.dev.back().data(), 0xCD, n), "cudaMemset");
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

//! Checks the device parameters `dev` (TP rank `rank` of `tp`, after the stream's work finished)
//! bit for bit against the host path's result for the same tensors (which the CPU tests check
//! against plain loops).
inline void require_as_host_path(const HfTensors& hf, const weightsync::ModelConfig& c, int layers,
                                 int tp, int rank, const ParamTable& dev, const std::string& what) {
  using namespace weightsync;
  ParamTable host = vllm_params(c, layers, tp, -1);
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
    INFO(what << " parameter " << dev.params[i].name);
    REQUIRE(got == host.host[i]);
  }
}

}  // namespace ws_test
