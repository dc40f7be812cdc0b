// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The load planner on a CUDA stream: Qwen3-8B attention shapes through rename + fuse + shard +
// rotary permute + cast, and fp32/fp16/bf16 casts, gathered by the batched kernel on the device,
// compared bit for bit with the host path (itself checked against plain-loop references in
// tests/unit/loading_cast_test.cpp and loading_models_test.cpp).
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
  //! `nans`: every 5th element is a NaN with a random payload and sign (quiet or signalling),
  //! every 7th an infinity.
  void add(std::string name, DType t, std::vector<std::int64_t> shape, std::uint64_t seed,
           bool nans = false) {
    metas.push_back({std::move(name), t, std::move(shape)});
    host.emplace_back(metas.back().nbytes());
    std::mt19937_64 rng(seed);
    auto& b = host.back();
    const std::size_t es = dtype_size(t);
    if (es != 2 && es != 4) {  // any other dtype is only copied: random bytes (bool: 0 or 1)
      for (auto& x : b) x = static_cast<std::byte>(t == DType::bool_ ? rng() & 1 : rng() & 0xff);
      return;
    }
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
    if (!nans || (t != DType::float32 && t != DType::float16 && t != DType::bfloat16)) return;
    for (std::size_t i = 0, k = 0; i + es <= b.size(); i += es, ++k) {
      const std::uint64_t r = rng();
      const std::uint64_t sign = (r >> 40) & 1;
      std::uint32_t v;
      if (t == DType::float32)
        v = k % 5 == 0
                ? static_cast<std::uint32_t>(sign << 31 | 0x7f800000u | ((r & 0x7fffffu) | 1u))
                : static_cast<std::uint32_t>(sign << 31 | 0x7f800000u);
      else if (t == DType::float16)
        v = k % 5 == 0 ? static_cast<std::uint32_t>(sign << 15 | 0x7c00u | ((r & 0x3ffu) | 1u))
                       : static_cast<std::uint32_t>(sign << 15 | 0x7c00u);
      else
        v = k % 5 == 0 ? static_cast<std::uint32_t>(sign << 15 | 0x7f80u | ((r & 0x7fu) | 1u))
                       : static_cast<std::uint32_t>(sign << 15 | 0x7f80u);
      if (k % 5 == 0 || k % 7 == 0) std::memcpy(b.data() + i, &v, es);
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

// Runs a plan both ways and compares every parameter byte for byte. `misalign`: the device
// sources start that many bytes into their buffers (a packed chunk holds tensors back to back, so
// a source need not be aligned to its element size).
void host_vs_device(const Tensors& t, Params& p, const LoadMap& map, std::size_t* gathers = nullptr,
                    std::size_t misalign = 0) {
  const auto hplan = plan_loading(t.metas, p.host, map);
  const auto dplan = plan_loading(t.metas, p.dev, map);
  if (gathers) *gathers = dplan.gather_count();
  std::vector<DeviceBuffer> dsrc;
  std::vector<TensorView> hviews, dviews;
  for (std::size_t i = 0; i < t.metas.size(); ++i) {
    const auto nb = t.metas[i].nbytes();
    dsrc.emplace_back(nb + misalign, 0);
    auto* src = static_cast<std::byte*>(dsrc.back().data()) + misalign;
    detail::check(cudaMemcpy(src, t.host[i].data(), nb, cudaMemcpyHostToDevice), "cudaMemcpy");
    if (void* d = hplan.destination(t.metas[i]))
      std::memcpy(d, t.host[i].data(), nb);
    else
      hviews.push_back({&t.metas[i], const_cast<std::byte*>(t.host[i].data()), nb});
    if (void* d = dplan.destination(t.metas[i]))
      detail::check(cudaMemcpy(d, src, nb, cudaMemcpyDeviceToDevice), "cudaMemcpy");
    else
      dviews.push_back({&t.metas[i], src, nb});
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

TEST_CASE("loading gpu: NaN and infinity inputs cast exactly as the host path does",
          "[gpu][loading]") {
  // The host path is checked against a plain-loop reference (NaN payloads included) in
  // tests/unit/loading_cast_test.cpp; the kernel must give the same bits.
  const std::size_t misalign = GENERATE(0u, 2u);
  INFO("sources misaligned by " << misalign << " bytes");
  Tensors t;
  t.add("a", DType::float32, {300, 64}, 31, true);
  t.add("b", DType::float32, {300, 64}, 32, true);
  t.add("c", DType::float16, {300, 64}, 33, true);
  t.add("d", DType::float16, {300, 64}, 34, true);
  t.add("e", DType::bfloat16, {300, 64}, 35, true);
  t.add("f", DType::bfloat16, {300, 64}, 36, true);
  Params prm;
  prm.add("A", DType::bfloat16, {300, 64});
  prm.add("B", DType::float16, {300, 64});
  prm.add("C", DType::float32, {300, 64});
  prm.add("D", DType::bfloat16, {300, 64});
  prm.add("E", DType::float32, {300, 64});
  prm.add("F", DType::float16, {300, 64});
  RenameMap m;
  m.add("a", "A").add("b", "B").add("c", "C").add("d", "D").add("e", "E").add("f", "F");
  host_vs_device(t, prm, m, nullptr, misalign);
}

TEST_CASE("loading gpu: 1- and 8-byte dtypes are sliced and permuted, from unaligned sources too",
          "[gpu][loading]") {
  const std::size_t misalign = GENERATE(0u, 1u, 3u);
  INFO("sources misaligned by " << misalign << " bytes");
  Tensors t;
  t.add("i8", DType::int8, {64, 96}, 41);
  t.add("u8", DType::uint8, {64, 96}, 42);
  t.add("bo", DType::bool_, {1000}, 43);
  t.add("f8", DType::float8_e4m3fn, {64, 96}, 44);
  t.add("i64", DType::int64, {64, 96}, 45);
  t.add("f64", DType::float64, {64, 96}, 46);
  t.add("bf", DType::bfloat16, {64, 96}, 47);
  t.add("f32", DType::float32, {64, 96}, 48);
  Params prm;
  prm.add("I8", DType::int8, {32, 96});
  prm.add("U8", DType::uint8, {64, 48});
  prm.add("BO", DType::bool_, {1000});
  prm.add("F8", DType::float8_e4m3fn, {64, 96});
  prm.add("I64", DType::int64, {32, 96});
  prm.add("F64", DType::float64, {64, 48});
  prm.add("BF", DType::bfloat16, {64, 48});
  prm.add("F32", DType::float32, {32, 96});
  RenameMap m({1, 2});
  m.add({NamePattern("i8"), NamePattern("I8"), 0, 4, 0})  // rotary permute (4 heads), rows
      .add("u8", "U8", 1)
      .add("bo", "BO")
      .add({NamePattern("f8"), NamePattern("F8"), -1, 8, 0})  // permute only
      .add("i64", "I64", 0)
      .add("f64", "F64", 1)
      .add("bf", "BF", 1)
      .add("f32", "F32", 0);
  host_vs_device(t, prm, m, nullptr, misalign);
}
