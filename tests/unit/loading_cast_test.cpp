// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Model-aware loading, the casts: fp16/bf16 round trips and rounding, the planner's lossy casts
// against an independent reference, 1- and 8-byte dtypes copied and other casts refused, and the
// CUDA gather's element codes (host side only: no device is touched).
#include <weightsync/config.hpp>
#include <weightsync/loading.hpp>
#if WEIGHTSYNC_HAS_CUDA
#include <weightsync/cuda/gather.hpp>  // host-side parts only: no device is touched
#endif

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/loading_model.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_loading_cast_test {

using namespace weightsync;
using namespace std::chrono_literals;
using namespace ws_test::loading_model;

TEST_CASE("loading cast: fp16/bf16 round trips and round-to-nearest-even", "[unit][loading]") {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto b = static_cast<std::uint16_t>(h);
    const float fb = bf16_to_float(b), fh = fp16_to_float(b);
    if (std::isnan(fb)) {
      CHECK(std::isnan(bf16_to_float(float_to_bf16(fb))));
    } else if (float_to_bf16(fb) != b) {
      FAIL_CHECK("bf16 " << h << " does not round trip");
    }
    if (std::isnan(fh)) {
      CHECK(std::isnan(fp16_to_float(float_to_fp16(fh))));
    } else if (float_to_fp16(fh) != b) {
      FAIL_CHECK("fp16 " << h << " does not round trip (" << fh << " -> " << float_to_fp16(fh)
                         << ")");
    }
  }
  CHECK(fp16_to_float(0x3c00) == 1.0f);
  CHECK(fp16_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(fp16_to_float(0x7bff) == 65504.0f);
  CHECK(float_to_fp16(65520.0f) == 0x7c00);  // rounds to infinity
  CHECK(float_to_fp16(65519.0f) == 0x7bff);
  CHECK(float_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);  // tie to even: zero
  CHECK(float_to_fp16(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(float_to_fp16(-0.0f) == 0x8000);
  CHECK(float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);  // tie to even: down
  CHECK(float_to_bf16(1.0f + std::ldexp(3.0f, -8)) == 0x3f82);  // tie to even: up
  CHECK(float_to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
#if defined(__FLT16_MAX__) && defined(__x86_64__)
  // The compiler's _Float16 is an independent reference for fp32 -> fp16.
  std::mt19937 rng(1);
  for (int i = 0; i < 200000; ++i) {
    const std::uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    const _Float16 r = static_cast<_Float16>(f);
    std::uint16_t want;
    std::memcpy(&want, &r, 2);
    if (float_to_fp16(f) != want)
      FAIL_CHECK("fp32 bits " << u << ": got " << float_to_fp16(f) << " want " << want);
  }
#endif
}

namespace {

// ---- An independent reference for the casts: values as doubles, rounding by search ----

// The value of the non-negative code `h` of a binary float with `mb` mantissa bits and exponent
// bias `bias`. The infinity code reads as 2^(emax + 1), the first value past the largest finite
// one: values from halfway to it on round to infinity.
double code_value(std::uint32_t h, int mb, int bias) {
  const std::uint32_t e = h >> mb, m = h & ((1u << mb) - 1u);
  return e == 0 ? std::ldexp(static_cast<double>(m), 1 - bias - mb)
                : std::ldexp(static_cast<double>((1u << mb) + m), static_cast<int>(e) - bias - mb);
}

// float32 bits `u` to the nearest code of the narrower format (ties to the even code); NaN: a
// quiet NaN of the same sign that keeps the payload's top bits.
std::uint16_t narrow_ref(std::uint32_t u, int mb, int bias, std::uint32_t inf_code) {
  const auto sign = static_cast<std::uint32_t>(u >> 31) << 15;
  float f;
  std::memcpy(&f, &u, 4);
  if (std::isnan(f))
    return static_cast<std::uint16_t>(sign | inf_code | (1u << (mb - 1)) |
                                      ((u & 0x7fffffu) >> (23 - mb)));
  const double a = std::fabs(static_cast<double>(f));
  if (a >= code_value(inf_code, mb, bias)) return static_cast<std::uint16_t>(sign | inf_code);
  std::uint32_t lo = 0, hi = inf_code;  // the largest code whose value is <= a
  while (lo < hi) {
    const std::uint32_t mid = (lo + hi + 1) / 2;
    if (code_value(mid, mb, bias) <= a)
      lo = mid;
    else
      hi = mid - 1;
  }
  std::uint32_t r = lo;
  if (code_value(lo, mb, bias) != a) {
    const double down = a - code_value(lo, mb, bias), up = code_value(lo + 1, mb, bias) - a;
    if (up < down || (up == down && (lo & 1u))) r = lo + 1;
  }
  return static_cast<std::uint16_t>(sign | r);
}
std::uint16_t bf16_ref(std::uint32_t u) {
  return narrow_ref(u, 7, 127, 0x7f80);
}
std::uint16_t fp16_ref(std::uint32_t u) {
  return narrow_ref(u, 10, 15, 0x7c00);
}

// float16 bits to float32 bits (exact); NaN: quiet, same sign, payload kept.
std::uint32_t widen_fp16_ref(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h >> 15) << 31;
  const std::uint32_t mag = h & 0x7fffu;
  if (mag > 0x7c00u) return sign | 0x7fc00000u | ((mag & 0x3ffu) << 13);
  if (mag == 0x7c00u) return sign | 0x7f800000u;
  const float f = static_cast<float>(code_value(mag, 10, 15));
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return sign | u;
}

}  // namespace

TEST_CASE(
    "loading planner: lossy casts fp32 -> bf16 / fp16 (NaN, inf, ties, subnormals) match a "
    "plain-loop reference",
    "[unit][loading]") {
  // fp32 inputs: the edge cases, then random bit patterns (NaNs with payloads included).
  std::vector<std::uint32_t> x{0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7f800001u,
                               0xff800001u, 0x7fc00000u, 0xffc12345u, 0x7fbfffffu, 0x7f7fffffu,
                               0x00000001u, 0x807fffffu, 0x3f808000u, 0x3f818000u, 0x3f801000u,
                               0x3f803000u, 0x477fe000u, 0x477fefffu, 0x477ff000u, 0x47800000u,
                               0x33000000u, 0x33000001u, 0x33400000u, 0x33800000u, 0x387fc000u,
                               0x387fe000u, 0x38800000u, 0xc77ff000u, 0x7f7f8000u, 0x7f7f7fffu};
  std::mt19937 rng(7);
  while (x.size() % 64 != 0 || x.size() < 40000) x.push_back(rng());
  const auto rows = static_cast<std::int64_t>(x.size() / 64);
  // fp16 and bf16 inputs: every code.
  std::vector<std::uint16_t> h(65536);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = static_cast<std::uint16_t>(i);
  const std::vector<TensorMeta> metas{{"x", DType::float32, {rows, 64}},
                                      {"y", DType::float32, {rows, 64}},
                                      {"h", DType::float16, {1024, 64}},
                                      {"g", DType::float16, {1024, 64}},
                                      {"b", DType::bfloat16, {1024, 64}}};
  Engine eng;
  eng.mem.reserve(8);
  eng.add("X", DType::bfloat16, {rows, 64});
  eng.add("Y", DType::float16, {rows, 32});  // TP rank 1 of 2: columns [32, 64)
  eng.add("H", DType::float32, {1024, 64});
  eng.add("G", DType::bfloat16, {1024, 64});
  eng.add("B", DType::float16, {1024, 64});
  RenameMap map({1, 2});
  map.add("x", "X").add("y", "Y", 1).add("h", "H").add("g", "G").add("b", "B");
  const auto plan = plan_loading(metas, eng.params, map);
  CHECK(plan.gather_count() == 5);
  const std::vector<TensorView> views{{&metas[0], x.data(), x.size() * 4},
                                      {&metas[1], x.data(), x.size() * 4},
                                      {&metas[2], h.data(), h.size() * 2},
                                      {&metas[3], h.data(), h.size() * 2},
                                      {&metas[4], h.data(), h.size() * 2}};
  plan.load(std::span<const TensorView>(views), HostStream{});
  const auto get16 = [&](const std::string& n, std::size_t i) {
    std::uint16_t v;
    std::memcpy(&v, eng.at(n).data() + 2 * i, 2);
    return v;
  };
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (get16("X", i) != bf16_ref(x[i]) && wrong++ < 8)
      UNSCOPED_INFO("fp32 " << std::hex << x[i] << " -> bf16 " << get16("X", i) << ", want "
                            << bf16_ref(x[i]));
    if (i % 64 >= 32 && get16("Y", i / 64 * 32 + i % 64 - 32) != fp16_ref(x[i]) && wrong++ < 8)
      UNSCOPED_INFO("fp32 " << std::hex << x[i] << " -> fp16 "
                            << get16("Y", i / 64 * 32 + i % 64 - 32) << ", want "
                            << fp16_ref(x[i]));
  }
  for (std::size_t i = 0; i < h.size(); ++i) {
    std::uint32_t got;
    std::memcpy(&got, eng.at("H").data() + 4 * i, 4);
    if (got != widen_fp16_ref(h[i]) && wrong++ < 8)
      UNSCOPED_INFO("fp16 " << std::hex << h[i] << " -> fp32 " << got << ", want "
                            << widen_fp16_ref(h[i]));
    if (get16("G", i) != bf16_ref(widen_fp16_ref(h[i])) && wrong++ < 8)
      UNSCOPED_INFO("fp16 " << std::hex << h[i] << " -> bf16 " << get16("G", i));
    const std::uint32_t bf = static_cast<std::uint32_t>(h[i]) << 16;  // bf16 -> fp32 is exact
    if (get16("B", i) != fp16_ref(bf) && wrong++ < 8)
      UNSCOPED_INFO("bf16 " << std::hex << h[i] << " -> fp16 " << get16("B", i) << ", want "
                            << fp16_ref(bf));
  }
  CHECK(wrong == 0);
}

TEST_CASE(
    "loading planner: 1- and 8-byte dtypes are copied, sliced and permuted, other casts "
    "are refused when the plan is made",
    "[unit][loading]") {
  // int8 [8, 6] rotary-permuted (2 heads) then rows [4, 8); int64 [4, 6] columns [3, 6); bool,
  // float8 and float64 whole.
  std::vector<std::int8_t> i8(48);
  std::vector<std::int64_t> i64(24);
  std::vector<std::uint8_t> b1(10), f8(12);
  std::vector<double> f64(5);
  for (std::size_t i = 0; i < i8.size(); ++i) i8[i] = static_cast<std::int8_t>(i * 37 - 100);
  for (std::size_t i = 0; i < i64.size(); ++i)
    i64[i] = static_cast<std::int64_t>(i) * 0x0101010101010101ll - 5;
  for (std::size_t i = 0; i < b1.size(); ++i) b1[i] = static_cast<std::uint8_t>(i % 3 == 0);
  for (std::size_t i = 0; i < f8.size(); ++i) f8[i] = static_cast<std::uint8_t>(i * 29 + 1);
  for (std::size_t i = 0; i < f64.size(); ++i) f64[i] = 1.0 / (1.0 + static_cast<double>(i));
  const std::vector<TensorMeta> metas{{"q", DType::int8, {8, 6}},
                                      {"o", DType::int64, {4, 6}},
                                      {"m", DType::bool_, {10}},
                                      {"f", DType::float8_e4m3fn, {3, 4}},
                                      {"d", DType::float64, {5}}};
  std::vector<std::int8_t> Q(24, 0);
  std::vector<std::int64_t> O(12, 0);
  std::vector<std::uint8_t> M(10, 0xCD), F(12, 0xCD);
  std::vector<double> D(5, 0.0);
  const std::vector<ParamInfo> params{{"Q", Q.data(), DType::int8, {4, 6}},
                                      {"O", O.data(), DType::int64, {4, 3}},
                                      {"M", M.data(), DType::bool_, {10}},
                                      {"F", F.data(), DType::float8_e4m3fn, {3, 4}},
                                      {"D", D.data(), DType::float64, {5}}};
  RenameMap map({1, 2});
  map.add({NamePattern("q"), NamePattern("Q"), 0, 2, 0}).add("o", "O", 1).add("m", "M");
  map.add("f", "F").add("d", "D");
  const auto plan = plan_loading(metas, params, map, {.require_full_coverage = true});
  const std::vector<TensorView> views{{&metas[0], i8.data(), 48},
                                      {&metas[1], i64.data(), 192},
                                      {&metas[2], b1.data(), 10},
                                      {&metas[3], f8.data(), 12},
                                      {&metas[4], f64.data(), 40}};
  plan.load(std::span<const TensorView>(views), HostStream{});
  std::vector<std::int8_t> q_perm(48);
  for (std::int64_t hd = 0; hd < 2; ++hd)  // w.view(2, 2, 2, 6).transpose(1, 2)
    for (std::int64_t a = 0; a < 2; ++a)
      for (std::int64_t b = 0; b < 2; ++b)
        for (std::int64_t c = 0; c < 6; ++c)
          q_perm[static_cast<std::size_t>(((hd * 2 + a) * 2 + b) * 6 + c)] =
              i8[static_cast<std::size_t>(((hd * 2 + b) * 2 + a) * 6 + c)];
  CHECK(Q == std::vector<std::int8_t>(q_perm.begin() + 24, q_perm.end()));
  std::vector<std::int64_t> o_want;
  for (std::size_t r = 0; r < 4; ++r)
    for (std::size_t c = 3; c < 6; ++c) o_want.push_back(i64[r * 6 + c]);
  CHECK(O == o_want);
  CHECK(M == b1);
  CHECK(F == f8);
  CHECK(D == f64);
  // Casts from or to anything but fp32 / fp16 / bf16 fail at plan time, naming both dtypes.
  const auto refused = [&](DType from, DType to) -> std::string {
    std::vector<std::byte> mem(64);
    const std::vector<TensorMeta> m{{"t", from, {4}}};
    const std::vector<ParamInfo> p{{"T", mem.data(), to, {4}}};
    try {
      (void)plan_loading(m, p, RenameMap().add("t", "T"));
    } catch (const config_error& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(has(refused(DType::int8, DType::bfloat16), {"'t'", "cannot cast int8 to bfloat16"}));
  CHECK(has(refused(DType::float8_e4m3fn, DType::float16), {"cannot cast float8_e4m3fn"}));
  CHECK(has(refused(DType::float64, DType::float32), {"cannot cast float64 to float32"}));
  CHECK(has(refused(DType::bfloat16, DType::int64), {"cannot cast bfloat16 to int64"}));
  CHECK(has(refused(DType::uint8, DType::bool_), {"cannot cast uint8 to bool"}));
}

#if WEIGHTSYNC_HAS_CUDA
TEST_CASE(
    "loading cuda gather: every planned op has kernel codes (any element size copies, "
    "fp32/fp16/bf16 casts) and the PTX converts with the host's integer code",
    "[unit][loading]") {
  for (int k = 0; k < 12; ++k) {
    const auto d = static_cast<DType>(k);
    INFO(dtype_name(d));
    std::pair<unsigned, unsigned> c;
    REQUIRE_NOTHROW(c = detail::gather_type_codes(d, d));
    CHECK(c.first == c.second);
    const unsigned size[] = {0, 0, 0, 1, 2, 4, 8};
    REQUIRE(c.first < 7);
    CHECK(size[c.first] == dtype_size(d));
  }
  const DType f[] = {DType::float32, DType::float16, DType::bfloat16};
  for (const DType a : f)
    for (const DType b : f)
      if (a != b) {
        const auto c = detail::gather_type_codes(a, b);
        CHECK(c.first != c.second);
        CHECK(c.first < 3);
        CHECK(c.second < 3);
      }
  CHECK_THROWS_AS(detail::gather_type_codes(DType::int8, DType::bfloat16), config_error);
  CHECK_THROWS_AS(detail::gather_type_codes(DType::float64, DType::float32), config_error);
  // The hardware half conversions (cvt.rn.f16.f32, cvt.f32.f16) canonicalize NaNs; the kernel
  // must use the shared integer code instead, or NaN payloads differ from the host path's.
  const std::string ptx = detail::kGatherPtx;
  CHECK(ptx.find("cvt.rn.f16.f32") == std::string::npos);
  CHECK(ptx.find("cvt.f32.f16") == std::string::npos);
  CHECK(ptx.find(".entry ws_gather") != std::string::npos);
}
#endif

}  // namespace ws_test_loading_cast_test
