// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// FP8 quantize on load on a CUDA stream: the load planner's quantize ops run by the FP8 kernels
// (Fp8LoadExecutor<cudaStream_t>) through fuse, TP shard, rotary permute and expert stacking,
// compared bit for bit with the host path (itself equal to the host reference quantizer and to the
// FP8 checkpoint: tests/unit/fp8_load_test.cpp); sources aligned and misaligned (a packed chunk
// holds tensors back to back: the kernels' element-wise path), bfloat16 and float32; the FP8
// checkpoint (an FP8 sender) loaded on the device without dequantizing; a derived copy rebuilt on
// the load's stream.
#include <weightsync/cuda/check.hpp>
#include <weightsync/cuda/device_buffer.hpp>
#include <weightsync/loading.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/fp8_loading.hpp"

using namespace weightsync;
using namespace ws_test::fp8_loading;

namespace {

// An engine table twice: in host memory (the host path) and in device memory, both poisoned.
struct Both {
  Engine host;
  std::vector<ParamInfo> dev;
  std::vector<DeviceBuffer> dmem;
  explicit Both(Engine e) : host(std::move(e)) {
    for (const auto& p : host.params) {
      const std::size_t n = TensorMeta{p.name, p.dtype, p.shape}.nbytes();
      dmem.emplace_back(n, 0);
      detail::check(cudaMemset(dmem.back().data(), 0xCD, n), "cudaMemset");
      dev.push_back({p.name, dmem.back().data(), p.dtype, p.shape});
    }
    detail::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  // The parameters that differ between the device and the host table.
  std::vector<std::string> differing() const {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < dev.size(); ++i) {
      std::vector<std::byte> got(host.mem[i].size());
      detail::check(cudaMemcpy(got.data(), dmem[i].data(), got.size(), cudaMemcpyDeviceToHost),
                    "cudaMemcpy");
      if (got != host.mem[i]) out.push_back(dev[i].name);
    }
    return out;
  }
};

// float32 copies of every bf16 tensor (exact): quantizing them must give the bf16 path's bytes.
Tensors to_f32(const Tensors& t) {
  Tensors o;
  for (std::size_t i = 0; i < t.metas.size(); ++i) {
    TensorMeta m = t.metas[i];
    if (m.dtype != DType::bfloat16) {
      o.metas.push_back(m);
      o.data.push_back(t.data[i]);
      continue;
    }
    m.dtype = DType::float32;
    std::vector<std::byte> b(m.nbytes());
    for (std::size_t k = 0; k < m.numel(); ++k) {
      std::uint16_t h;
      std::memcpy(&h, t.data[i].data() + 2 * k, 2);
      const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
      std::memcpy(b.data() + 4 * k, &u, 4);
    }
    o.metas.push_back(m);
    o.data.push_back(std::move(b));
  }
  return o;
}

// Loads `t` into both tables: host views on the host, device copies (each `misalign` bytes into
// its buffer) on a CUDA stream, every tensor as a view (no destinations) or through destinations.
void load_both(const Tensors& t, Both& b, const LoadMap& map, const PlanOptions& opt,
               bool destinations, std::size_t misalign, std::size_t* quantized = nullptr) {
  const auto hplan = plan_loading(t.metas, b.host.params, map, opt);
  const auto dplan = plan_loading(t.metas, b.dev, map, opt);
  if (quantized) *quantized = dplan.quantize_count();
  std::vector<DeviceBuffer> dsrc;
  std::vector<TensorView> hviews, dviews;
  for (std::size_t i = 0; i < t.metas.size(); ++i) {
    const auto nb = t.data[i].size();
    dsrc.emplace_back(nb + misalign, 0);
    auto* src = static_cast<std::byte*>(dsrc.back().data()) + misalign;
    detail::check(cudaMemcpy(src, t.data[i].data(), nb, cudaMemcpyHostToDevice), "cudaMemcpy");
    if (void* d = destinations ? hplan.destination(t.metas[i]) : nullptr)
      std::memcpy(d, t.data[i].data(), nb);
    else
      hviews.push_back({&t.metas[i], const_cast<std::byte*>(t.data[i].data()), nb});
    if (void* d = destinations ? dplan.destination(t.metas[i]) : nullptr)
      detail::check(cudaMemcpy(d, src, nb, cudaMemcpyDeviceToDevice), "cudaMemcpy");
    else
      dviews.push_back({&t.metas[i], src, nb});
  }
  hplan.load(std::span<const TensorView>(hviews), HostStream{});
  cudaStream_t s = nullptr;
  detail::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  dplan.load(std::span<const TensorView>(dviews), s);
  detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  detail::check(cudaStreamDestroy(s), "cudaStreamDestroy");
}

}  // namespace

TEST_CASE("fp8 on load, CUDA: bit-exact with the host path, all layouts, TP 1 and 2",
          "[gpu][fp8][loading]") {
  const bool moe = GENERATE(false, true);
  const bool permute = GENERATE(false, true);
  const Fp8Scaling s =
      GENERATE(Fp8Scaling::block128, Fp8Scaling::block128_ue8m0, Fp8Scaling::per_channel);
  const Dims d = fp8_dims(moe, permute);
  const HfModel hf = fp8_model(d);
  const Tensors bf16 = as_is(hf), f32 = to_f32(bf16), ckpt = checkpoint(hf, s);
  PlanOptions opt;
  opt.fp8_scaling = s;
  for (int tp : {1, 2}) {
    const int rank = tp - 1;
    INFO("moe " << moe << " permute " << permute << " " << fp8_scaling_name(s) << " tp " << tp);
    for (std::size_t misalign : {std::size_t{0}, std::size_t{2}}) {
      INFO("sources misaligned by " << misalign << " bytes");
      Both q(make_fp8_engine(d, rank, tp, s));
      std::size_t nq = 0;
      load_both(bf16, q, fp8_map(d, rank, tp), opt, misalign == 0, misalign, &nq);
      CHECK(nq == (moe ? 10u : 7u));
      CHECK(q.differing() == std::vector<std::string>{});
      // float32 sources of the same values: the same bytes
      Both q32(make_fp8_engine(d, rank, tp, s));
      load_both(f32, q32, fp8_map(d, rank, tp), opt, false, misalign * 2);
      CHECK(q32.differing() == std::vector<std::string>{});
      CHECK(q32.host.mem == q.host.mem);
      // the FP8 checkpoint, loaded as it is (copies only), on the device
      Both c(make_fp8_engine(d, rank, tp, s));
      load_both(ckpt, c, fp8_map(d, rank, tp), opt, misalign == 0, misalign);
      CHECK(c.differing() == std::vector<std::string>{});
      CHECK(c.host.mem == q.host.mem);
    }
  }
}

TEST_CASE("fp8 on load, CUDA: per-tensor scales of a column shard", "[gpu][fp8][loading]") {
  const Dims d = fp8_dims(false, false);
  const HfModel hf = fp8_model(d);
  const Tensors bf16 = as_is(hf);
  for (int rank = 0; rank < 2; ++rank) {
    Engine e;
    e.add("o8", DType::float8_e4m3fn, {256, 256});
    e.add("o8_scale", DType::float32, {});
    Both b(std::move(e));
    PlanOptions opt;
    opt.fp8_scaling = Fp8Scaling::per_tensor;
    opt.ignore_unmapped = true;
    load_both(bf16, b, RenameMap({rank, 2}).add("model.layers.0.self_attn.o_proj.weight", "o8", 1),
              opt, false, 0);
    CHECK(b.differing() == std::vector<std::string>{});
  }
}

TEST_CASE("fp8 on load, CUDA: a derived copy is rebuilt on the load's stream after its sources",
          "[gpu][fp8][loading]") {
  const Dims d = fp8_dims(false, false);
  const HfModel hf = fp8_model(d);
  const Tensors bf16 = as_is(hf);
  const std::string qkv_s = "model.layers.0.self_attn.qkv_proj.weight_scale_inv";
  Both b(make_fp8_engine(d, 0, 1, Fp8Scaling::block128));
  std::size_t si = 0;
  while (b.dev[si].name != qkv_s) ++si;
  DeviceBuffer copy(b.dmem[si].size(), 0);
  detail::check(cudaMemset(copy.data(), 0, copy.size()), "cudaMemset");
  detail::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  cudaStream_t seen = nullptr;
  int calls = 0;
  PlanOptions opt;
  opt.derived.push_back({"qkv scales copy", {qkv_s}, [&](void* stream) {
                           ++calls;
                           seen = static_cast<cudaStream_t>(stream);
                           detail::check(cudaMemcpyAsync(copy.data(), b.dev[si].data, copy.size(),
                                                         cudaMemcpyDeviceToDevice, seen),
                                         "cudaMemcpyAsync");
                         }});
  const auto plan = plan_loading(bf16.metas, b.dev, fp8_map(d, 0, 1), opt);
  std::vector<DeviceBuffer> dsrc;
  std::vector<TensorView> views;
  for (std::size_t i = 0; i < bf16.metas.size(); ++i) {
    dsrc.emplace_back(bf16.data[i].size(), 0);
    detail::check(cudaMemcpy(dsrc.back().data(), bf16.data[i].data(), bf16.data[i].size(),
                             cudaMemcpyHostToDevice),
                  "cudaMemcpy");
    views.push_back({&bf16.metas[i], dsrc.back().data(), bf16.data[i].size()});
  }
  cudaStream_t s = nullptr;
  detail::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  plan.load(std::span<const TensorView>(views), s);
  detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  CHECK(calls == 1);
  CHECK(seen == s);
  std::vector<std::byte> want(copy.size()), got(copy.size());
  detail::check(cudaMemcpy(want.data(), b.dev[si].data, want.size(), cudaMemcpyDeviceToHost),
                "cudaMemcpy");
  detail::check(cudaMemcpy(got.data(), copy.data(), got.size(), cudaMemcpyDeviceToHost),
                "cudaMemcpy");
  CHECK(got == want);
  CHECK(std::vector<std::byte>(want.size(), std::byte{0xCD}) != want);  // the scales were written
  detail::check(cudaStreamDestroy(s), "cudaStreamDestroy");
}

TEST_CASE("fp8 on load, CUDA: 600 expert pieces in one load(), batched launches, bit-exact",
          "[gpu][fp8][loading]") {
  // 300 experts x (gate, up) of [128, 256], bfloat16 and float32 in turn, into w13 [300, 256,
  // 256]: gate rows [0, 128), up rows [128, 256). More pieces than kFp8MaxBatch per source type:
  // several batched launches of each kernel.
  Tensors t;
  std::mt19937 rng(9);
  for (int e = 0; e < 300; ++e)
    for (const char* w : {"gate", "up"}) {
      t.metas.push_back({"experts." + std::to_string(e) + "." + w,
                         e % 2 ? DType::float32 : DType::bfloat16,
                         {128, 256}});
      t.data.emplace_back(t.metas.back().nbytes());
      auto& b = t.data.back();
      if (t.metas.back().dtype == DType::bfloat16) {
        for (std::size_t i = 0; i + 2 <= b.size(); i += 2) {
          const auto h = static_cast<std::uint16_t>(rng() & 0xbfff);
          std::memcpy(b.data() + i, &h, 2);
        }
      } else {
        for (std::size_t i = 0; i + 4 <= b.size(); i += 4) {
          const auto u = static_cast<std::uint32_t>(rng() & 0xbfffffffu);
          std::memcpy(b.data() + i, &u, 4);
        }
      }
    }
  for (const Fp8Scaling s : {Fp8Scaling::block128, Fp8Scaling::block128_ue8m0}) {
    Engine e;
    e.add("w13", DType::float8_e4m3fn, {300, 256, 256});
    e.add("w13_scale_inv", DType::float32, {300, 2, 2});
    Both b(std::move(e));
    const LoadMap map = [](const TensorMeta& m) {
      Placement p{"w13"};
      p.expert = std::stoll(m.name.substr(8));
      p.dst_row = m.name.ends_with("up") ? 128 : 0;
      return std::optional<Placement>(p);
    };
    PlanOptions opt;
    opt.fp8_scaling = s;
    std::size_t nq = 0;
    load_both(t, b, map, opt, false, 0, &nq);
    CHECK(nq == 600);
    CHECK(b.differing() == std::vector<std::string>{});
  }
}
