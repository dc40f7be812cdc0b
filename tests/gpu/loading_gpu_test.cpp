// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The load planner on a CUDA stream: Qwen3-8B attention shapes through rename + fuse + shard +
// rotary permute + cast, and fp32/fp16/bf16 casts, gathered by the batched kernel on the device,
// compared bit for bit with the host path (itself checked against plain-loop references in
// tests/unit/loading_test.cpp).
#include <weightsync/cuda/check.hpp>
#include <weightsync/cuda/device_buffer.hpp>
#include <weightsync/cuda/gather.hpp>
#include <weightsync/loading.hpp>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"

using namespace weightsync;

namespace {

struct Tensors {
  std::vector<TensorMeta> metas;
  std::vector<std::vector<std::byte>> host;
  void add(std::string name, DType t, std::vector<std::int64_t> shape, std::uint64_t seed) {
    metas.push_back({std::move(name), t, std::move(shape)});
    host.emplace_back(metas.back().nbytes());
    std::mt19937_64 rng(seed);
    auto& b = host.back();
    if (t == DType::float32) {
      for (std::size_t i = 0; i + 4 <= b.size(); i += 4) {
        // Wide range, subnormals and values that overflow fp16, no NaN.
        const float f = std::ldexp(
            static_cast<float>(static_cast<std::int64_t>(rng() % 2000001) - 1000000) / 1e6f,
            static_cast<int>(rng() % 60) - 40);
        std::memcpy(b.data() + i, &f, 4);
      }
    } else {
      for (std::size_t i = 0; i + 2 <= b.size(); i += 2) {
        const auto h = static_cast<std::uint16_t>(rng() & (t == DType::bfloat16 ? 0xbfff : 0xfbff));
        std::memcpy(b.data() + i, &h, 2);
      }
    }
  }
};

// The same parameter table twice: in host memory and in device memory (same shapes and dtypes).
struct Params {
  std::vector<ParamInfo> host, dev;
  std::vector<std::vector<std::byte>> hmem;
  std::vector<DeviceBuffer> dmem;
  void add(std::string name, DType t, std::vector<std::int64_t> shape) {
    const std::size_t n = TensorMeta{name, t, shape}.nbytes();
    hmem.emplace_back(n, std::byte{0xCD});
    dmem.emplace_back(n, 0);
    detail::check(cudaMemset(dmem.back().data(), 0xCD, n), "cudaMemset");
    host.push_back({name, hmem.back().data(), t, shape});
    dev.push_back({std::move(name), dmem.back().data(), t, std::move(shape)});
  }
};

// Runs a plan both ways and compares every parameter byte for byte.
void host_vs_device(const Tensors& t, Params& p, const LoadMap& map,
                    std::size_t* gathers = nullptr) {
  const auto hplan = plan_loading(t.metas, p.host, map);
  const auto dplan = plan_loading(t.metas, p.dev, map);
  if (gathers) *gathers = dplan.gather_count();
  std::vector<DeviceBuffer> dsrc;
  std::vector<TensorView> hviews, dviews;
  for (std::size_t i = 0; i < t.metas.size(); ++i) {
    const auto nb = t.metas[i].nbytes();
    dsrc.emplace_back(nb, 0);
    detail::check(cudaMemcpy(dsrc.back().data(), t.host[i].data(), nb, cudaMemcpyHostToDevice),
                  "cudaMemcpy");
    if (void* d = hplan.destination(t.metas[i]))
      std::memcpy(d, t.host[i].data(), nb);
    else
      hviews.push_back({&t.metas[i], const_cast<std::byte*>(t.host[i].data()), nb});
    if (void* d = dplan.destination(t.metas[i]))
      detail::check(cudaMemcpy(d, dsrc.back().data(), nb, cudaMemcpyDeviceToDevice), "cudaMemcpy");
    else
      dviews.push_back({&t.metas[i], dsrc.back().data(), nb});
  }
  hplan.load(std::span<const TensorView>(hviews), HostStream{});
  cudaStream_t s = nullptr;
  detail::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  dplan.load(std::span<const TensorView>(dviews), s);  // one batched launch for all of them
  detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  detail::check(cudaStreamDestroy(s), "cudaStreamDestroy");
  for (std::size_t i = 0; i < p.host.size(); ++i) {
    std::vector<std::byte> got(p.hmem[i].size());
    detail::check(cudaMemcpy(got.data(), p.dmem[i].data(), got.size(), cudaMemcpyDeviceToHost),
                  "cudaMemcpy");
    INFO("parameter " << p.host[i].name);
    CHECK(got == p.hmem[i]);
  }
}

}  // namespace

TEST_CASE("loading gpu: Qwen3-8B attention + MLP through fuse, shard, permute and cast, bit-exact",
          "[gpu][loading]") {
  ModelConfig c = qwen3_8b_config();
  c.intermediate = 2048;  // reduced from 12288
  c.permute_qk = GENERATE(false, true);
  const int tp = GENERATE(1, 2, 4);
  const int rank = tp - 1;
  INFO("tp " << tp << " rank " << rank << " permute " << c.permute_qk);
  Tensors t;
  const std::int64_t H = c.hidden, Q = c.n_heads * c.head_dim, KV = c.n_kv_heads * c.head_dim,
                     I = c.intermediate;
  const std::string p = "model.layers.0.";
  t.add(p + "input_layernorm.weight", DType::bfloat16, {H}, 1);
  t.add(p + "self_attn.q_proj.weight", DType::bfloat16, {Q, H}, 2);
  t.add(p + "self_attn.k_proj.weight", DType::bfloat16, {KV, H}, 3);
  t.add(p + "self_attn.v_proj.weight", DType::bfloat16, {KV, H}, 4);
  t.add(p + "self_attn.q_proj.bias", DType::bfloat16, {Q}, 5);
  t.add(p + "self_attn.k_proj.bias", DType::bfloat16, {KV}, 6);
  t.add(p + "self_attn.v_proj.bias", DType::bfloat16, {KV}, 7);
  t.add(p + "self_attn.o_proj.weight", DType::bfloat16, {H, Q}, 8);
  t.add(p + "self_attn.q_norm.weight", DType::bfloat16, {c.head_dim}, 9);
  t.add(p + "mlp.gate_proj.weight", DType::bfloat16, {I, H}, 10);
  t.add(p + "mlp.up_proj.weight", DType::bfloat16, {I, H}, 11);
  t.add(p + "mlp.down_proj.weight", DType::bfloat16, {H, I}, 12);
  Params prm;
  const std::int64_t q = Q / tp, kv = KV / tp;
  prm.add(p + "input_layernorm.weight", DType::float32, {H});
  prm.add(p + "self_attn.qkv_proj.weight", DType::bfloat16, {q + 2 * kv, H});
  prm.add(p + "self_attn.qkv_proj.bias", DType::bfloat16, {q + 2 * kv});
  prm.add(p + "self_attn.o_proj.weight", DType::bfloat16, {H, Q / tp});
  prm.add(p + "self_attn.q_norm.weight", DType::float16, {c.head_dim});
  prm.add(p + "mlp.gate_up_proj.weight", DType::bfloat16, {2 * I / tp, H});
  prm.add(p + "mlp.down_proj.weight", DType::bfloat16, {H, I / tp});
  std::size_t gathers = 0;
  host_vs_device(t, prm, qwen3_map(c, {rank, tp}), &gathers);
  if (tp == 1 && !c.permute_qk) CHECK(gathers == 2);  // only the two casts
}

TEST_CASE("loading gpu: fp32 / fp16 / bf16 casts with slices match the host path bit for bit",
          "[gpu][loading]") {
  Tensors t;
  t.add("a", DType::float32, {1000, 96}, 21);
  t.add("b", DType::float32, {1000, 96}, 22);
  t.add("c", DType::float16, {333, 7}, 23);
  t.add("d", DType::bfloat16, {4096}, 24);
  t.add("e", DType::float32, {64, 100}, 25);
  Params prm;
  prm.add("A", DType::bfloat16, {1000, 96});
  prm.add("B", DType::float16, {500, 96});
  prm.add("C", DType::float32, {333, 7});
  prm.add("D", DType::float16, {4096});
  prm.add("E", DType::float32, {64, 50});
  RenameMap m({1, 2});
  m.add("a", "A").add("b", "B", 0).add("c", "C").add("d", "D").add("e", "E", 1);
  host_vs_device(t, prm, m);
}
