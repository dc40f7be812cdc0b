// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// FP8 quantize throughput (GB/s of bf16 / fp32 input) of the CUDA kernels on dense8b's and
// moe30b's projection shapes, per scale layout: CUDA events around `reps` launches after `warmup`,
// the median of `trials` such timings. Before timing, each output is checked bit for bit against
// the host implementation (the whole tensor for q_proj; the first 256 rows elsewhere, per-tensor
// excepted). Then dense8b's 252 linears as the FP8 source's ring mode quantizes them (batched
// launches, block 128).
// --load L,...: quantize on load (the load planner into vLLM-layout FP8 parameters: qkv / gate_up
// fused, experts stacked, TP shards, block 128 scales) of a whole layout at TP 1 and 2 (rank 0):
// CUDA events around one LoadPlan::load of every tensor (device views), the median of `trials`
// after one warm-up, checked byte for byte (parameters and scales) against the FP8 checkpoint path
// (each tensor quantized whole, quantize_fp8, then loaded as it is by the planner).
//   fp8_quantize_bench [--reps N] [--trials N] [--dtype bfloat16|float32] [--load L,...]
//                      [--json FILE]
#include <weightsync/cuda/check.hpp>
#include <weightsync/cuda/device_buffer.hpp>
#include <weightsync/cuda/fp8_quantize.hpp>
#include <weightsync/fp8/quantize.hpp>
#include <weightsync/layouts.hpp>
#include <weightsync/loading.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cuda_pattern.hpp"

using namespace weightsync;

namespace {

struct Shape {
  const char* name;
  std::int64_t rows, cols;
};

std::size_t scale_count(const TensorMeta& m, Fp8Scaling s) {
  std::size_t n = 1;
  for (auto d : fp8_scale_shape(m, s)) n *= static_cast<std::size_t>(d);
  return n;
}

// Deterministic weights, normal-ish, row magnitudes varying.
std::vector<std::byte> make_input(DType dt, std::int64_t rows, std::int64_t cols) {
  std::vector<std::byte> b(static_cast<std::size_t>(rows * cols) * dtype_size(dt));
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      const float u = static_cast<float>(static_cast<std::int32_t>(x >> 32)) / 2147483648.0f;
      const float v = u * u * u * std::ldexp(1.0f, static_cast<int>(r % 9) - 6);
      std::uint32_t bits;
      std::memcpy(&bits, &v, 4);
      const auto i = static_cast<std::size_t>(r * cols + c);
      if (dt == DType::bfloat16) {
        const auto h = weightsync::detail::f32_bits_to_bf16(bits);
        std::memcpy(b.data() + 2 * i, &h, 2);
      } else {
        std::memcpy(b.data() + 4 * i, &bits, 4);
      }
    }
  return b;
}

// Checks the device output of rows [0, rows_checked) (the whole tensor for per-tensor scales).
bool check(const TensorMeta& m, Fp8Scaling s, const std::vector<std::byte>& in,
           const DeviceBuffer& dst, const DeviceBuffer& sc, std::int64_t rows_checked) {
  const std::int64_t cols = m.shape[1];
  if (s == Fp8Scaling::per_tensor) rows_checked = m.shape[0];
  const TensorMeta part{m.name, m.dtype, {rows_checked, cols}};
  std::vector<std::uint8_t> w(part.numel()), got(part.numel());
  std::vector<float> sw(scale_count(part, s)), sgot(sw.size());
  quantize_fp8_host(part, in.data(), s, w.data(), sw.data());
  detail::check(cudaMemcpy(got.data(), dst.data(), got.size(), cudaMemcpyDeviceToHost),
                "cudaMemcpy");
  // block scales of the first rows: the first ceil(rows_checked/128) rows of the scale grid
  detail::check(cudaMemcpy(sgot.data(), sc.data(), sgot.size() * 4, cudaMemcpyDeviceToHost),
                "cudaMemcpy");
  return w == got && std::memcmp(sw.data(), sgot.data(), sw.size() * 4) == 0;
}

// CUDA events around `run()` on `stream`: the median of `trials` timings after one warm-up, in us.
template <class F>
double median_us(int trials, cudaStream_t stream, F&& run) {
  cudaEvent_t e0, e1;
  detail::check(cudaEventCreate(&e0), "cudaEventCreate");
  detail::check(cudaEventCreate(&e1), "cudaEventCreate");
  std::vector<float> ms;
  for (int t = 0; t <= trials; ++t) {  // the first is the warm-up
    detail::check(cudaEventRecord(e0, stream), "cudaEventRecord");
    run();
    detail::check(cudaEventRecord(e1, stream), "cudaEventRecord");
    detail::check(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float x = 0;
    detail::check(cudaEventElapsedTime(&x, e0, e1), "cudaEventElapsedTime");
    if (t > 0) ms.push_back(x);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1e3;
}

// dense8b's 252 linear projections as the FP8 source's ring mode quantizes them: block 128,
// quantize_fp8_views (one batched launch per kernels::kFp8MaxBatch views) over one input arena;
// CUDA events around the whole batch, the median of `trials`; the first view checked against the
// host implementation (its first 256 rows).
bool run_model_batch(DType dt, int trials, cudaStream_t stream, std::ofstream& js,
                     const char* device) {
  std::vector<TensorMeta> lin;
  for (const auto& m : layouts::dense8b())
    if (m.shape.size() == 2 && m.name.find("proj.weight") != std::string::npos)
      lin.push_back(TensorMeta{m.name, dt, m.shape});
  std::size_t in_bytes = 0, out_bytes = 0, sc_count = 0;
  for (const auto& m : lin) {
    in_bytes += m.nbytes();
    out_bytes += (m.numel() + 255) / 256 * 256;
    sc_count += scale_count(m, Fp8Scaling::block128);
  }
  DeviceBuffer in(in_bytes, 0), out(out_bytes, 0), sc(sc_count * 4, 0);
  detail::check(cudaMemset(out.data(), 0xab, out_bytes), "cudaMemset");
  std::vector<kernels::Fp8Params> views;
  std::vector<std::pair<std::int64_t, std::int64_t>> shapes;
  std::vector<std::vector<std::byte>> inputs;
  std::size_t ai = 0, ao = 0, as = 0;
  for (const auto& m : lin) {
    const auto key = std::make_pair(m.shape[0], m.shape[1]);
    auto it = std::find(shapes.begin(), shapes.end(), key);
    if (it == shapes.end()) {
      shapes.push_back(key);
      inputs.push_back(make_input(dt, key.first, key.second));
      it = shapes.end() - 1;
    }
    const auto& host = inputs[static_cast<std::size_t>(it - shapes.begin())];
    auto* src = static_cast<std::byte*>(in.data()) + ai;
    detail::check(cudaMemcpy(src, host.data(), host.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    views.push_back(fp8_whole_view(m, Fp8Scaling::block128, src,
                                   static_cast<std::byte*>(out.data()) + ao,
                                   reinterpret_cast<float*>(sc.data()) + as));
    ai += m.nbytes();
    ao += (m.numel() + 255) / 256 * 256;
    as += scale_count(m, Fp8Scaling::block128);
  }
  quantize_fp8_views(views, stream, "dense8b linears");
  detail::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const bool ok = check(lin[0], Fp8Scaling::block128, inputs[0], out, sc, 256);
  const double us =
      median_us(trials, stream, [&] { quantize_fp8_views(views, stream, "dense8b linears"); });
  const double gbs = static_cast<double>(in_bytes) / (us * 1e-6) / 1e9;
  std::printf("  %-10s %13s %-15s %10.1f %10.1f %10.1f %6s\n", "dense8b", "252 linears",
              "block128 batch", static_cast<double>(in_bytes) / 1e6, us, gbs, ok ? "ok" : "FAIL");
  if (js)
    js << "{\"tensor\":\"dense8b linears\",\"count\":" << lin.size() << ",\"dtype\":\""
       << dtype_name(dt) << "\",\"scaling\":\"block128\",\"batched\":true,\"in_bytes\":" << in_bytes
       << ",\"time_us\":" << us << ",\"in_GBps\":" << gbs << ",\"check\":\""
       << (ok ? "ok" : "FAIL") << "\",\"device\":\"" << device << "\"}\n";
  return ok;
}

// ---- quantize on load ----

// A vLLM-layout engine of one TP rank in one device arena (256-byte aligned), poisoned.
struct Engine {
  std::vector<ParamInfo> params;
  std::vector<std::size_t> offsets;
  std::size_t extent = 0;
  std::optional<DeviceBuffer> arena;
  std::size_t fp8_bytes = 0;
  void add(std::string name, DType t, std::vector<std::int64_t> shape) {
    const TensorMeta m{name, t, shape};
    offsets.push_back(extent);
    extent += (m.nbytes() + 255) / 256 * 256;
    if (t == DType::float8_e4m3fn) fp8_bytes += m.nbytes();
    params.push_back({std::move(name), nullptr, t, std::move(shape)});
  }
  // An FP8 parameter [E,] R x C and its block scales.
  void add8(const std::string& name, std::vector<std::int64_t> shape) {
    std::vector<std::int64_t> sc(shape);
    const std::size_t n = sc.size();
    sc[n - 2] = (sc[n - 2] + 127) / 128;
    sc[n - 1] = (sc[n - 1] + 127) / 128;
    add(name, DType::float8_e4m3fn, std::move(shape));
    add(name + "_scale_inv", DType::float32, std::move(sc));
  }
  void allocate(int device) {
    arena.emplace(extent, device);
    for (std::size_t i = 0; i < params.size(); ++i) params[i].data = arena->data() + offsets[i];
    detail::check(cudaMemset(arena->data(), 0xCD, extent), "cudaMemset");
  }
};

// The Qwen3 / Qwen3-MoE configuration of a layout, its layer count and vocab.
struct LayoutConfig {
  ModelConfig cfg;
  int layers = 0;
  std::int64_t vocab = 0;
};

LayoutConfig config_of(const std::vector<TensorMeta>& metas) {
  const auto find = [&](const std::string& n) -> const TensorMeta* {
    for (const auto& m : metas)
      if (m.name == n) return &m;
    return nullptr;
  };
  LayoutConfig c;
  c.vocab = find("model.embed_tokens.weight")->shape[0];
  c.cfg.hidden = find("model.embed_tokens.weight")->shape[1];
  c.cfg.head_dim = find("model.layers.0.self_attn.q_norm.weight")->shape[0];
  c.cfg.n_heads = find("model.layers.0.self_attn.q_proj.weight")->shape[0] / c.cfg.head_dim;
  c.cfg.n_kv_heads = find("model.layers.0.self_attn.k_proj.weight")->shape[0] / c.cfg.head_dim;
  if (const auto* g = find("model.layers.0.mlp.gate_proj.weight")) c.cfg.intermediate = g->shape[0];
  if (const auto* r = find("model.layers.0.mlp.gate.weight")) {
    c.cfg.n_experts = r->shape[0];
    c.cfg.moe_intermediate = find("model.layers.0.mlp.experts.0.gate_proj.weight")->shape[0];
  }
  c.cfg.tie_word_embeddings = find("lm_head.weight") == nullptr;
  while (find("model.layers." + std::to_string(c.layers) + ".input_layernorm.weight")) ++c.layers;
  return c;
}

Engine make_engine(const LayoutConfig& lc, int tp) {
  const ModelConfig& c = lc.cfg;
  Engine e;
  const std::int64_t H = c.hidden, hd = c.head_dim;
  const std::int64_t q = c.n_heads / tp * hd,
                     kv = (c.n_kv_heads >= tp ? c.n_kv_heads / tp : 1) * hd;
  const std::int64_t per = (lc.vocab + 63) / 64 * 64 / tp;
  e.add("model.embed_tokens.weight", DType::bfloat16, {per, H});
  for (int l = 0; l < lc.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    e.add(p + "input_layernorm.weight", DType::bfloat16, {H});
    e.add8(p + "self_attn.qkv_proj.weight", {q + 2 * kv, H});
    e.add8(p + "self_attn.o_proj.weight", {H, c.n_heads * hd / tp});
    e.add(p + "self_attn.q_norm.weight", DType::bfloat16, {hd});
    e.add(p + "self_attn.k_norm.weight", DType::bfloat16, {hd});
    e.add(p + "post_attention_layernorm.weight", DType::bfloat16, {H});
    if (c.n_experts) {
      e.add(p + "mlp.gate.weight", DType::bfloat16, {c.n_experts, H});
      e.add8(p + "mlp.experts.w13_weight", {c.n_experts, 2 * c.moe_intermediate / tp, H});
      e.add8(p + "mlp.experts.w2_weight", {c.n_experts, H, c.moe_intermediate / tp});
    } else {
      e.add8(p + "mlp.gate_up_proj.weight", {2 * c.intermediate / tp, H});
      e.add8(p + "mlp.down_proj.weight", {H, c.intermediate / tp});
    }
  }
  e.add("model.norm.weight", DType::bfloat16, {H});
  if (!c.tie_word_embeddings) e.add("lm_head.weight", DType::bfloat16, {per, H});
  return e;
}

// Quantize on load of layout `name` at TP 1 and 2 (rank 0); false on a mismatch.
bool run_load(const std::string& name, int trials, cudaStream_t stream, std::ofstream& js) {
  const auto metas = layouts::by_name(name);
  const LayoutConfig lc = config_of(metas);
  cudaDeviceProp prop{};
  detail::check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  // The source: realistic bf16 weights (a 64 MiB block of make_input, tiled), 256-byte aligned.
  std::vector<std::size_t> off;
  std::size_t extent = 0, bytes = 0, quantized = 0;
  for (const auto& m : metas) {
    off.push_back(extent);
    extent += (m.nbytes() + 255) / 256 * 256;
    bytes += m.nbytes();
  }
  bool ok = true;
  try {
    DeviceBuffer src(extent, 0);
    {
      const auto block = make_input(DType::bfloat16, 8192, 4096);  // 64 MiB
      DeviceBuffer b(block.size(), 0);
      detail::check(cudaMemcpy(b.data(), block.data(), block.size(), cudaMemcpyHostToDevice),
                    "cudaMemcpy");
      for (std::size_t at = 0; at < extent; at += block.size())
        detail::check(cudaMemcpy(src.data() + at, b.data(), std::min(block.size(), extent - at),
                                 cudaMemcpyDeviceToDevice),
                      "cudaMemcpy");
    }
    std::vector<TensorView> views;
    for (std::size_t i = 0; i < metas.size(); ++i)
      views.push_back({&metas[i], src.data() + off[i], metas[i].nbytes()});
    for (int tp : {1, 2}) {
      Engine eng = make_engine(lc, tp), ref = make_engine(lc, tp);
      eng.allocate(0);
      ref.allocate(0);
      const LoadMap map =
          lc.cfg.n_experts ? qwen3_moe_map(lc.cfg, {0, tp}) : qwen3_map(lc.cfg, {0, tp});
      const auto plan = plan_loading(metas, eng.params, map, {.ignore_unmapped = false});
      quantized = 0;
      for (const auto& m : metas)
        if (const GatherOp* g = plan.gather(m.name); g && g->quantize()) quantized += m.nbytes();
      detail::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      const double us = median_us(
          trials, stream, [&] { plan.load(std::span<const TensorView>(views), stream); });
      // The reference: each tensor quantized whole, then loaded as the FP8 checkpoint it makes.
      std::vector<TensorMeta> metas8;
      for (const auto& m : metas) {
        const GatherOp* g = plan.gather(m.name);
        if (g && g->quantize()) {
          metas8.push_back(fp8_weight_meta(m));
          metas8.push_back(fp8_scale_meta(m, Fp8Scaling::block128,
                                          fp8_scale_name(m.name, Fp8Scaling::block128)));
        } else {
          metas8.push_back(m);
        }
      }
      const auto plan8 = plan_loading(metas8, ref.params, map);
      std::size_t largest = 0;
      for (const auto& m : metas) largest = std::max(largest, m.nbytes());
      DeviceBuffer q(largest / 2 + 256, 0), sc(std::size_t{1} << 20, 0);
      for (std::size_t i = 0, o = 0; i < metas.size(); ++i) {
        const TensorMeta& m = metas[i];
        if (metas8[o].dtype == DType::float8_e4m3fn) {
          quantize_fp8(m, src.data() + off[i], Fp8Scaling::block128, q.data(),
                       reinterpret_cast<float*>(sc.data()), stream);
          const TensorView two[2] = {{&metas8[o], q.data(), metas8[o].nbytes()},
                                     {&metas8[o + 1], sc.data(), metas8[o + 1].nbytes()}};
          plan8.load(std::span<const TensorView>(two, 2), stream);
          o += 2;
        } else {
          const TensorView one{&metas8[o], src.data() + off[i], m.nbytes()};
          plan8.load(std::span<const TensorView>(&one, 1), stream);
          ++o;
        }
        if (i % 64 == 63) detail::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      }
      DeviceBuffer counter(sizeof(unsigned long long), 0);
      auto* cnt = reinterpret_cast<unsigned long long*>(counter.data());
      detail::check(cudaMemsetAsync(cnt, 0, sizeof *cnt, stream), "cudaMemsetAsync");
      ws_pattern::count_diff(eng.arena->data(), ref.arena->data(), eng.extent, cnt, stream);
      unsigned long long wrong = 0;
      detail::check(cudaMemcpyAsync(&wrong, cnt, sizeof wrong, cudaMemcpyDeviceToHost, stream),
                    "cudaMemcpyAsync");
      detail::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      ok = ok && wrong == 0;
      std::printf(
          "  load %-8s tp %d r0: %zu tensors, %.2f GB bf16 (%.2f GB quantized) -> %.2f GB "
          "fp8 params: %.1f us = %.1f GB/s of quantized bf16 input, %.1f GB/s of all "
          "input; %llu wrong bytes vs the FP8 checkpoint path\n",
          name.c_str(), tp, metas.size(), double(bytes) / 1e9, double(quantized) / 1e9,
          double(eng.fp8_bytes) / 1e9, us, double(quantized) / (us * 1e-6) / 1e9,
          double(bytes) / (us * 1e-6) / 1e9, wrong);
      if (js)
        js << "{\"load\":\"" << name << "\",\"tp\":" << tp << ",\"in_bytes\":" << bytes
           << ",\"quantized_bytes\":" << quantized << ",\"fp8_param_bytes\":" << eng.fp8_bytes
           << ",\"time_us\":" << us << ",\"wrong\":" << wrong << ",\"device\":\"" << prop.name
           << "\"}\n";
    }
  } catch (const cuda_error& e) {
    std::printf("  load %-8s NOT RUN on this device: %s\n", name.c_str(), e.what());
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20, trials = 7;
  DType dt = DType::bfloat16;
  std::string json;
  std::vector<std::string> loads;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--reps")
      reps = std::stoi(argv[i + 1]);
    else if (a == "--trials")
      trials = std::stoi(argv[i + 1]);
    else if (a == "--dtype")
      dt = parse_dtype(argv[i + 1]);
    else if (a == "--json")
      json = argv[i + 1];
    else if (a == "--load") {
      std::stringstream ss(argv[i + 1]);
      for (std::string l; std::getline(ss, l, ',');) loads.push_back(l);
    } else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 4;
  }
  cudaDeviceProp prop{};
  detail::check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("# fp8_quantize_bench on %s, input %s, median of %d trials of %d launches\n",
              prop.name, std::string(dtype_name(dt)).c_str(), trials, reps);
  std::printf("# %-10s %13s %-15s %10s %10s %10s %6s\n", "tensor", "shape", "scaling", "in_MB",
              "time_us", "in_GB/s", "check");
  const Shape shapes[] = {{"q_proj", 4096, 4096},     {"k_proj", 1024, 4096},
                          {"gate_proj", 12288, 4096}, {"down_proj", 4096, 12288},
                          {"embed", 151936, 4096},    {"moe_gate", 768, 2048},
                          {"moe_down", 2048, 768}};
  std::ofstream js;
  if (!json.empty()) js.open(json);
  cudaStream_t stream = nullptr;
  detail::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaEvent_t e0, e1;
  detail::check(cudaEventCreate(&e0), "cudaEventCreate");
  detail::check(cudaEventCreate(&e1), "cudaEventCreate");
  bool all_ok = true;
  for (const Shape& sh : shapes) {
    const TensorMeta m{sh.name, dt, {sh.rows, sh.cols}};
    const auto in = make_input(dt, sh.rows, sh.cols);
    DeviceBuffer src(in.size(), 0), dst(m.numel(), 0);
    detail::check(cudaMemcpy(src.data(), in.data(), in.size(), cudaMemcpyHostToDevice),
                  "cudaMemcpy");
    for (Fp8Scaling s : {Fp8Scaling::block128, Fp8Scaling::block128_ue8m0, Fp8Scaling::per_tensor,
                         Fp8Scaling::per_channel}) {
      DeviceBuffer sc(scale_count(m, s) * 4, 0);
      detail::check(cudaMemset(dst.data(), 0xab, dst.size()), "cudaMemset");
      // (the legacy stream's memset and upload must land before the non-blocking stream reads)
      detail::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      quantize_fp8(m, src.data(), s, dst.data(), reinterpret_cast<float*>(sc.data()), stream);
      detail::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      const bool whole = std::string(sh.name) == "q_proj";
      const bool ok = (s == Fp8Scaling::per_tensor && sh.rows > 16384) ||
                      check(m, s, in, dst, sc, whole ? sh.rows : 256);
      all_ok = all_ok && ok;
      for (int w = 0; w < 3; ++w)
        quantize_fp8(m, src.data(), s, dst.data(), reinterpret_cast<float*>(sc.data()), stream);
      std::vector<float> ms;
      for (int t = 0; t < trials; ++t) {
        detail::check(cudaEventRecord(e0, stream), "cudaEventRecord");
        for (int r = 0; r < reps; ++r)
          quantize_fp8(m, src.data(), s, dst.data(), reinterpret_cast<float*>(sc.data()), stream);
        detail::check(cudaEventRecord(e1, stream), "cudaEventRecord");
        detail::check(cudaEventSynchronize(e1), "cudaEventSynchronize");
        float x = 0;
        detail::check(cudaEventElapsedTime(&x, e0, e1), "cudaEventElapsedTime");
        ms.push_back(x / static_cast<float>(reps));
      }
      std::sort(ms.begin(), ms.end());
      const double us = ms[ms.size() / 2] * 1e3;
      const double mb = static_cast<double>(in.size()) / 1e6;
      const double gbs = static_cast<double>(in.size()) / (us * 1e-6) / 1e9;
      const std::string shape = std::to_string(sh.rows) + "x" + std::to_string(sh.cols);
      const char* check_text = (s == Fp8Scaling::per_tensor && sh.rows > 16384) ? "skip"
                               : ok                                             ? "ok"
                                                                                : "FAIL";
      std::printf("  %-10s %13s %-15s %10.1f %10.1f %10.1f %6s\n", sh.name, shape.c_str(),
                  fp8_scaling_name(s), mb, us, gbs, check_text);
      if (js)
        js << "{\"tensor\":\"" << sh.name << "\",\"shape\":\"" << shape << "\",\"dtype\":\""
           << dtype_name(dt) << "\",\"scaling\":\"" << fp8_scaling_name(s)
           << "\",\"in_bytes\":" << in.size() << ",\"time_us\":" << us << ",\"in_GBps\":" << gbs
           << ",\"check\":\"" << check_text << "\",\"device\":\"" << prop.name << "\"}\n";
    }
  }
  all_ok = run_model_batch(dt, trials, stream, js, prop.name) && all_ok;
  std::printf("# check: %s\n", all_ok ? "all outputs match the host implementation" : "MISMATCH");
  for (const auto& l : loads) all_ok = run_load(l, trials, stream, js) && all_ok;
  return all_ok ? 0 : 1;
}
