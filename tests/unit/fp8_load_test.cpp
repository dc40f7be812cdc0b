// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// FP8 on the receiver (the load planner, host path): a bf16 trainer's tensors quantized on load
// into an engine's FP8 parameters through fuse, TP shard, rotary permute and expert stacking, bit
// for bit what the engine gets from the trainer's FP8 checkpoint (an FP8 sender, loaded without
// dequantizing) and, for block scales, what the host reference quantizer makes of the engine's
// own bf16 parameters; the refusals (a shard that cuts a 128x128 block, ...) named by tensor and
// parameter; the derived-copy hook (verl #7519); quantize_fp8_view_host against materialized views.
#include <weightsync/fp8/quantize.hpp>
#include <weightsync/loading.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/fp8_loading.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_fp8_load_test {

using namespace weightsync;
using namespace ws_test::fp8_loading;

// The whole table as one byte string per parameter.
std::string diff_params(const Engine& a, const Engine& b) {
  for (std::size_t i = 0; i < a.params.size(); ++i)
    if (a.mem[i] != b.mem[i]) return a.params[i].name;
  return "";
}

// Plans `t` into `e` and loads it on the host, every tensor as a view or through destinations.
LoadPlan load_host(const Tensors& t, Engine& e, const LoadMap& map, Fp8Scaling s,
                   bool destinations) {
  PlanOptions opt;
  opt.fp8_scaling = s;
  auto plan = plan_loading(t.metas, e.params, map, opt);
  std::vector<TensorView> views;
  for (std::size_t i = 0; i < t.metas.size(); ++i) {
    if (void* dst = destinations ? plan.destination(t.metas[i]) : nullptr)
      std::memcpy(dst, t.data[i].data(), t.data[i].size());
    else
      views.push_back({&t.metas[i], const_cast<std::byte*>(t.data[i].data()), t.data[i].size()});
  }
  plan.load(std::span<const TensorView>(views), HostStream{});
  return plan;
}

TEST_CASE("fp8 on load: quantized on load == the FP8 checkpoint loaded as it is, TP 1 and 2",
          "[unit][fp8][loading]") {
  const bool moe = GENERATE(false, true);
  const bool permute = GENERATE(false, true);
  const Fp8Scaling s =
      GENERATE(Fp8Scaling::block128, Fp8Scaling::block128_ue8m0, Fp8Scaling::per_channel);
  CAPTURE(moe, permute, fp8_scaling_name(s));
  const Dims d = fp8_dims(moe, permute);
  const HfModel hf = fp8_model(d);
  const Tensors bf16 = as_is(hf), ckpt = checkpoint(hf, s);
  for (int tp : {1, 2})
    for (int rank = 0; rank < tp; ++rank) {
      CAPTURE(tp, rank);
      Engine on_load = make_fp8_engine(d, rank, tp, s), sent = make_fp8_engine(d, rank, tp, s);
      const auto plan = load_host(bf16, on_load, fp8_map(d, rank, tp), s, rank == 0);
      CHECK(plan.quantize_count() == (moe ? 4u + 3u * 2u : 7u));
      // only the vocab padding rows (vLLM pads the vocab to 64; 300 -> 320) are left unwritten
      for (const auto& u : plan.uncovered()) CHECK(u.find("weight[") != std::string::npos);
      CHECK(plan.uncovered().size() == (tp == 1 ? 2u : rank == 1 ? 2u : 0u));
      const auto plan8 = load_host(ckpt, sent, fp8_map(d, rank, tp), s, rank == 0);
      CHECK(plan8.quantize_count() == 0);
      CHECK(plan8.uncovered() == plan.uncovered());
      CHECK(diff_params(on_load, sent) == "");
    }
}

TEST_CASE("fp8 on load: block scales are the host quantizer's over the engine's bf16 parameters",
          "[unit][fp8][loading]") {
  const bool moe = GENERATE(false, true);
  const Fp8Scaling s = GENERATE(Fp8Scaling::block128, Fp8Scaling::block128_ue8m0);
  const Dims d = fp8_dims(moe, true);
  const HfModel hf = fp8_model(d);
  const Tensors bf16 = as_is(hf);
  const int tp = 2;
  for (int rank = 0; rank < tp; ++rank) {
    Engine e8 = make_fp8_engine(d, rank, tp, s), e16 = make_engine(d, rank, tp);
    (void)load_host(bf16, e8, fp8_map(d, rank, tp), s, false);
    (void)load_host(bf16, e16, fp8_map(d, rank, tp), s, false);
    for (std::size_t i = 0; i < e16.params.size(); ++i) {
      const ParamInfo& p = e16.params[i];
      if (!fp8_param(p.name)) continue;
      CAPTURE(p.name, rank);
      const std::int64_t E = p.shape.size() == 3 ? p.shape[0] : 1;
      const TensorMeta slice{
          p.name, DType::bfloat16, {p.shape[p.shape.size() - 2], p.shape.back()}};
      const auto per_w = slice.numel();
      const auto per_s =
          static_cast<std::size_t>((slice.shape[0] + 127) / 128 * ((slice.shape[1] + 127) / 128));
      const auto& w = e8.at(p.name);
      const auto& sc = e8.at(fp8_scale_name(p.name, s));
      for (std::int64_t x = 0; x < E; ++x) {
        std::vector<std::byte> want(per_w), want_s(per_s * 4);
        quantize_fp8_host(slice, e16.mem[i].data() + x * per_w * 2, s, want.data(),
                          reinterpret_cast<float*>(want_s.data()));
        CHECK(std::memcmp(w.data() + x * per_w, want.data(), per_w) == 0);
        CHECK(std::memcmp(sc.data() + x * per_s * 4, want_s.data(), per_s * 4) == 0);
      }
    }
  }
}

TEST_CASE("fp8 on load: per-tensor scales, a column shard keeps the whole tensor's scale",
          "[unit][fp8][loading]") {
  std::mt19937 rng(5);
  std::vector<std::uint16_t> w(256 * 512);
  for (auto& v : w) v = static_cast<std::uint16_t>(rng() & 0xbfff);
  const std::vector<TensorMeta> metas{{"o", DType::bfloat16, {256, 512}}};
  std::vector<std::uint8_t> want(256 * 512);
  float want_s = 0;
  quantize_fp8_host(metas[0], w.data(), Fp8Scaling::per_tensor, want.data(), &want_s);
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<std::uint8_t> got(256 * 256, 0xcd);
    float got_s = -1;
    const std::vector<ParamInfo> params{{"o8", got.data(), DType::float8_e4m3fn, {256, 256}},
                                        {"o8_scale", &got_s, DType::float32, {}}};
    PlanOptions opt;
    opt.fp8_scaling = Fp8Scaling::per_tensor;
    const auto plan = plan_loading(metas, params, RenameMap({rank, 2}).add("o", "o8", 1), opt);
    const TensorView v{&metas[0], w.data(), w.size() * 2};
    plan.load(std::span<const TensorView>(&v, 1), HostStream{});
    CHECK(std::memcmp(&got_s, &want_s, 4) == 0);
    bool same = true;
    for (int r = 0; r < 256; ++r)
      same =
          same && std::memcmp(got.data() + r * 256, want.data() + r * 512 + rank * 256, 256) == 0;
    CHECK(same);
  }
}

TEST_CASE("fp8 on load: a piece that cuts a 128x128 block is refused, naming tensor and parameter",
          "[unit][fp8][loading]") {
  std::vector<std::byte> mem(1 << 20);
  const auto err = [&](std::vector<TensorMeta> metas, std::vector<ParamInfo> params, LoadMap map,
                       Fp8Scaling s = Fp8Scaling::block128) -> std::string {
    PlanOptions opt;
    opt.fp8_scaling = s;
    try {
      (void)plan_loading(metas, params, map, opt);
    } catch (const config_error& e) {
      return e.what();
    }
    return "no error";
  };
  void* m = mem.data();
  // A column shard of 384 columns over TP 2: rank 1's columns start at 192.
  CHECK(has(err({{"o", DType::bfloat16, {256, 384}}},
                {{"o8", m, DType::float8_e4m3fn, {256, 192}},
                 {"o8_scale_inv", m, DType::float32, {2, 2}}},
                RenameMap({1, 2}).add("o", "o8", 1)),
            {"'o' -> 'o8'", "columns [192, 384)", "128x128 FP8 block", "refused"}));
  // Rank 0 of the same: columns [0, 192) end inside a block of the source.
  CHECK(has(err({{"o", DType::bfloat16, {256, 384}}},
                {{"o8", m, DType::float8_e4m3fn, {256, 192}},
                 {"o8_scale_inv", m, DType::float32, {2, 2}}},
                RenameMap({0, 2}).add("o", "o8", 1)),
            {"'o' -> 'o8'", "columns [0, 192)"}));
  // Two fused pieces of 64 rows: the first ends inside the parameter's first block.
  const LoadMap fused = [](const TensorMeta& t) {
    return std::optional<Placement>(Placement{"w8", -1, t.name == "a" ? 0 : 64});
  };
  CHECK(has(err({{"a", DType::bfloat16, {64, 128}}, {"b", DType::bfloat16, {64, 128}}},
                {{"w8", m, DType::float8_e4m3fn, {128, 128}},
                 {"w8_scale_inv", m, DType::float32, {1, 1}}},
                fused),
            {"'a' -> 'w8'", "rows [0, 64) of 128", "another fused piece"}));
  // ... which per-channel scales take (each row its own scale), and per-tensor refuses.
  CHECK(
      err({{"a", DType::bfloat16, {64, 128}}, {"b", DType::bfloat16, {64, 128}}},
          {{"w8", m, DType::float8_e4m3fn, {128, 128}}, {"w8_scale", m, DType::float32, {128, 1}}},
          fused, Fp8Scaling::per_channel) == "no error");
  CHECK(has(err({{"a", DType::bfloat16, {64, 128}}, {"b", DType::bfloat16, {64, 128}}},
                {{"w8", m, DType::float8_e4m3fn, {128, 128}}, {"w8_scale", m, DType::float32, {}}},
                fused, Fp8Scaling::per_tensor),
            {"'a' -> 'w8'", "per-tensor", "fused"}));
  // No scale parameter; one of the wrong shape; an fp16 source.
  CHECK(has(err({{"a", DType::bfloat16, {128, 128}}}, {{"w8", m, DType::float8_e4m3fn, {128, 128}}},
                RenameMap().add("a", "w8")),
            {"'a' -> 'w8'", "no scale parameter 'w8_scale_inv'"}));
  CHECK(has(err({{"a", DType::bfloat16, {256, 128}}},
                {{"w8", m, DType::float8_e4m3fn, {256, 128}},
                 {"w8_scale_inv", m, DType::float32, {1, 1}}},
                RenameMap().add("a", "w8")),
            {"'w8_scale_inv'", "needs 2"}));
  CHECK(has(err({{"a", DType::float16, {128, 128}}},
                {{"w8", m, DType::float8_e4m3fn, {128, 128}},
                 {"w8_scale_inv", m, DType::float32, {1, 1}}},
                RenameMap().add("a", "w8")),
            {"'a' -> 'w8'", "bfloat16 or float32, got float16"}));
  // An FP8 sender: a rotary permute of 256 rows per head moves rows between blocks.
  CHECK(has(err({{"a", DType::float8_e4m3fn, {256, 128}}, {"a_scale_inv", DType::float32, {2, 1}}},
                {{"w8", m, DType::float8_e4m3fn, {256, 128}},
                 {"w8_scale_inv", m, DType::float32, {2, 1}}},
                RenameMap().add(RenameRule{NamePattern("a"), NamePattern("w8"), -1, 1, 0})),
            {"'a' -> 'w8'", "rotary permute of 256 rows", "without dequantizing"}));
  // ... and an FP8 tensor with scales into a bf16 parameter (never dequantized).
  CHECK(has(err({{"a", DType::float8_e4m3fn, {128, 128}}, {"a_scale_inv", DType::float32, {1, 1}}},
                {{"w", m, DType::bfloat16, {128, 128}}}, RenameMap().add("a", "w")),
            {"'a' -> 'w'", "cannot cast float8_e4m3fn to bfloat16"}));
  // A shard on 128-boundaries is fine: 512 columns over TP 2.
  CHECK(err({{"o", DType::bfloat16, {256, 512}}},
            {{"o8", m, DType::float8_e4m3fn, {256, 256}},
             {"o8_scale_inv", m, DType::float32, {2, 2}}},
            RenameMap({1, 2}).add("o", "o8", 1)) == "no error");
}

TEST_CASE("fp8 on load: derived copies are rebuilt once per update, after their last source",
          "[unit][fp8][loading]") {
  const Dims d = fp8_dims(false, false);
  HfModel hf = fp8_model(d);
  const std::string qkv = "model.layers.0.self_attn.qkv_proj.weight";
  const std::string qkv_s = qkv + "_scale_inv";
  Engine e = make_fp8_engine(d, 0, 1, Fp8Scaling::block128);
  std::size_t si = 0;
  while (e.params[si].name != qkv_s) ++si;
  const ParamInfo sp = e.params[si];  // [8, 2]
  // The engine's swizzled copy: the scales transposed, as a kernel might read them.
  std::vector<float> swizzled(16, -1.0f);
  int calls = 0;
  PlanOptions opt;
  opt.derived.push_back({"qkv scales, transposed", {qkv_s, qkv}, [&](void* stream) {
                           CHECK(stream == nullptr);
                           ++calls;
                           const auto* s = static_cast<const float*>(sp.data);
                           for (int r = 0; r < 8; ++r)
                             for (int c = 0; c < 2; ++c) swizzled[c * 8 + r] = s[r * 2 + c];
                         }});
  opt.derived.push_back({"never written", {"model.norm.weight"}, [](void*) {}});
  const auto map = fp8_map(d, 0, 1);
  auto metas = hf.metas;
  metas.erase(std::remove_if(metas.begin(), metas.end(),
                             [](const TensorMeta& m) { return m.name == "model.norm.weight"; }),
              metas.end());
  const auto plan = plan_loading(metas, e.params, map, opt);
  CHECK(plan.derived_not_written() == std::vector<std::string>{"never written"});
  for (int update = 0; update < 2; ++update) {
    if (update == 1)  // the trainer's next step: other weights, other scales
      for (auto& v : hf.data[hf.index.at("model.layers.0.self_attn.k_proj.weight")]) v ^= 0x0080;
    const int before = calls;
    // One tensor per load() call (a chunk each): the copy waits for v, the last qkv piece.
    for (const auto& m : metas) {
      const auto& bytes = hf.at(m.name);
      const TensorView v{&m, const_cast<std::uint16_t*>(bytes.data()), bytes.size() * 2};
      plan.load(std::span<const TensorView>(&v, 1), HostStream{});
      if (m.name == "model.layers.0.self_attn.k_proj.weight") CHECK(calls == before);
      if (m.name == "model.layers.0.self_attn.v_proj.weight") CHECK(calls == before + 1);
    }
    CHECK(calls == before + 1);
    const auto* s = static_cast<const float*>(sp.data);
    bool ok = true;
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 2; ++c)
        ok = ok && std::memcmp(&swizzled[c * 8 + r], &s[r * 2 + c], 4) == 0;
    CHECK(ok);
  }
  // An unknown source, or no hook: refused when the plan is made.
  PlanOptions bad;
  bad.derived.push_back({"x", {"nope"}, [](void*) {}});
  std::string what;
  try {
    (void)plan_loading(metas, e.params, map, bad);
  } catch (const config_error& x) {
    what = x.what();
  }
  CHECK(has(what, {"derived copy 'x'", "unknown parameter 'nope'"}));
  PlanOptions none;
  none.derived.push_back({"x", {qkv}, {}});
  CHECK_THROWS_AS(plan_loading(metas, e.params, map, none), config_error);
}

TEST_CASE("fp8 views: quantize_fp8_view_host against materialized views", "[unit][fp8]") {
  std::mt19937 rng(11);
  const std::int64_t R = 512, C = 384;
  std::vector<std::uint16_t> src(R * C);
  for (auto& v : src) v = static_cast<std::uint16_t>(rng() & 0xbfff);
  add_specials(src, R, C);
  const TensorMeta whole{"w", DType::bfloat16, {R, C}};
  struct V {
    std::int64_t row0, rows, col0, cols, head_rows;
  };
  for (const V v : {V{0, R, 0, C, 0}, V{128, 256, 128, 256, 0}, V{0, R, 0, C, 256},
                    V{256, 256, 0, 128, 128}, V{64, 200, 8, 130, 0}}) {
    CAPTURE(v.row0, v.rows, v.col0, v.cols, v.head_rows);
    // The view, materialized: permuted rows, then the slice.
    std::vector<std::uint16_t> mat(static_cast<std::size_t>(v.rows * v.cols));
    for (std::int64_t d = 0; d < v.rows; ++d) {
      std::int64_t r = v.row0 + d;
      if (v.head_rows) r = detail::permuted_row(r, v.head_rows);
      std::memcpy(&mat[static_cast<std::size_t>(d * v.cols)],
                  &src[static_cast<std::size_t>(r * C + v.col0)],
                  static_cast<std::size_t>(v.cols) * 2);
    }
    const TensorMeta vm{"v", DType::bfloat16, {v.rows, v.cols}};
    for (Fp8Scaling s :
         {Fp8Scaling::block128, Fp8Scaling::block128_ue8m0, Fp8Scaling::per_channel}) {
      CAPTURE(fp8_scaling_name(s));
      kernels::Fp8Params p = fp8_whole_view(whole, s, src.data(), nullptr, nullptr);
      p.rows = v.rows;
      p.cols = v.cols;
      p.row0 = v.row0;
      p.col0 = v.col0;
      p.head_rows = v.head_rows;
      p.scale_stride = (v.cols + 127) / 128;
      std::vector<std::uint8_t> got(mat.size()), want(mat.size());
      std::vector<float> gs(static_cast<std::size_t>(v.rows) * 4), ws(gs.size());
      p.dst = got.data();
      p.scales = gs.data();
      quantize_fp8_view_host(p);
      const bool full_rows = v.col0 == 0 && v.cols == C;
      if (s == Fp8Scaling::per_channel && !full_rows) {
        // per-channel over the whole source row: the full permuted rows, then the columns
        std::vector<std::uint16_t> rows(static_cast<std::size_t>(v.rows * C));
        for (std::int64_t d = 0; d < v.rows; ++d) {
          std::int64_t r = v.row0 + d;
          if (v.head_rows) r = detail::permuted_row(r, v.head_rows);
          std::memcpy(&rows[static_cast<std::size_t>(d * C)], &src[static_cast<std::size_t>(r * C)],
                      static_cast<std::size_t>(C) * 2);
        }
        std::vector<std::uint8_t> full(rows.size());
        quantize_fp8_host({"r", DType::bfloat16, {v.rows, C}}, rows.data(), s, full.data(),
                          ws.data());
        for (std::int64_t d = 0; d < v.rows; ++d)
          std::memcpy(&want[static_cast<std::size_t>(d * v.cols)],
                      &full[static_cast<std::size_t>(d * C + v.col0)],
                      static_cast<std::size_t>(v.cols));
      } else {
        quantize_fp8_host(vm, mat.data(), s, want.data(), ws.data());
      }
      const std::size_t ns = s == Fp8Scaling::per_channel
                                 ? static_cast<std::size_t>(v.rows)
                                 : static_cast<std::size_t>((v.rows + 127) / 128 * p.scale_stride);
      CHECK(got == want);
      CHECK(std::memcmp(gs.data(), ws.data(), ns * 4) == 0);
    }
  }
}

}  // namespace ws_test_fp8_load_test
