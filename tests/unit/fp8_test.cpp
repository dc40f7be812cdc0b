// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// FP8 quantization on the host (fp8/quantize.hpp): hand-computed conversions (ties, subnormals,
// saturation, signed zeros, NaN), scales (zero groups, inf, NaN, UE8M0), the four layouts with
// partial edge blocks, and random tensors against a slow reference written here from the formula.
#include <weightsync/fp8/quantize.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_fp8_test {

using namespace weightsync;
using weightsync::detail::fp8_e4m3_from_quotient;
using weightsync::detail::fp8_e4m3_to_f32;
using weightsync::detail::fp8_scale_bits;

namespace {

float f(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
std::uint16_t bf16(float x) {
  return static_cast<std::uint16_t>(bits(x) >> 16);
}  // exact inputs

// The slow reference of the conversion: the nearest of the 253 finite non-negative... values by
// search in double, ties to the even code; clamp first; NaN -> 0x7f.
std::uint8_t slow_e4m3(float q) {
  if (std::isnan(q)) return 0x7f;
  const bool neg = std::signbit(q);
  double a = std::fabs(static_cast<double>(q));
  if (a > 448.0) a = 448.0;
  int best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= 0x7e; ++c) {
    int e = c >> 3, m = c & 7;
    const double v = e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
    const double d = std::fabs(v - a);
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return static_cast<std::uint8_t>(best | (neg ? 0x80 : 0));
}

// The slow reference of one tensor: element (r, c) belongs to group g(r, c); amax per group in
// float with explicit NaN handling; scale and quotient with fp32 division, as torch's formula.
struct Ref {
  std::vector<std::uint8_t> w;
  std::vector<float> s;
};
Ref slow_quantize(const std::vector<float>& x, std::int64_t rows, std::int64_t cols,
                  Fp8Scaling mode) {
  std::int64_t gr = 1, gc = 1;  // group grid
  if (mode == Fp8Scaling::per_channel) gr = rows;
  if (fp8_block_scaling(mode)) {
    gr = (rows + 127) / 128;
    gc = (cols + 127) / 128;
  }
  const auto group = [&](std::int64_t r, std::int64_t c) {
    if (mode == Fp8Scaling::per_tensor) return std::int64_t{0};
    if (mode == Fp8Scaling::per_channel) return r;
    return (r / 128) * gc + c / 128;
  };
  std::vector<float> amax(static_cast<std::size_t>(gr * gc), 0.0f);
  std::vector<char> nan(amax.size(), 0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const float v = x[static_cast<std::size_t>(r * cols + c)];
      const auto g = static_cast<std::size_t>(group(r, c));
      if (std::isnan(v)) nan[g] = 1;
      amax[g] = std::max(amax[g], std::fabs(v));
    }
  Ref ref;
  for (std::size_t g = 0; g < amax.size(); ++g) {
    float s = nan[g] ? std::numeric_limits<float>::quiet_NaN() : amax[g] / 448.0f;
    if (s == 0.0f) s = 1.0f;
    if (mode == Fp8Scaling::block128_ue8m0 && std::isfinite(s)) {
      int e;
      const float m = std::frexp(s, &e);  // s = m * 2^e, m in [0.5, 1)
      s = std::ldexp(1.0f, m == 0.5f ? e - 1 : e);
      s = std::max(s, std::ldexp(1.0f, -126));
    }
    ref.s.push_back(s);
  }
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      ref.w.push_back(slow_e4m3(x[static_cast<std::size_t>(r * cols + c)] /
                                ref.s[static_cast<std::size_t>(group(r, c))]));
  return ref;
}

// Runs the library on x (as bf16 or fp32) and compares with the slow reference bit for bit.
void check_against_reference(const std::vector<float>& x, std::int64_t rows, std::int64_t cols,
                             Fp8Scaling mode, DType dt) {
  CAPTURE(rows, cols, fp8_scaling_name(mode), dtype_name(dt));
  std::vector<std::byte> src(x.size() * dtype_size(dt));
  std::vector<float> xin(x);
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (dt == DType::bfloat16) {
      const std::uint16_t h = bf16(x[i]);
      std::memcpy(src.data() + 2 * i, &h, 2);
      xin[i] = f(static_cast<std::uint32_t>(h) << 16);
    } else {
      std::memcpy(src.data() + 4 * i, &x[i], 4);
    }
  }
  const TensorMeta m{"layers.0.w", dt, {rows, cols}};
  const auto sshape = fp8_scale_shape(m, mode);
  std::size_t ns = 1;
  for (auto d : sshape) ns *= static_cast<std::size_t>(d);
  std::vector<std::uint8_t> w(x.size(), 0xaa);
  std::vector<float> s(ns, -7.0f);
  quantize_fp8_host(m, src.data(), mode, w.data(), s.data());
  const Ref ref = slow_quantize(xin, rows, cols, mode);
  REQUIRE(ref.s.size() == ns);
  std::size_t bad = 0;
  for (std::size_t g = 0; g < ns; ++g)
    if (bits(s[g]) != bits(ref.s[g]) && !(std::isnan(s[g]) && std::isnan(ref.s[g]))) ++bad;
  CHECK(bad == 0);
  bad = 0;
  for (std::size_t i = 0; i < w.size(); ++i)
    if (w[i] != ref.w[i]) {
      if (bad++ < 5) UNSCOPED_INFO("element " << i << ": " << int(w[i]) << " vs " << int(ref.w[i]));
    }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("fp8: conversion of quotients, hand-computed", "[unit][fp8]") {
  CHECK(fp8_e4m3_from_quotient(1.0f) == 0x38);
  CHECK(fp8_e4m3_from_quotient(1.0625f) == 0x38);  // tie between 1 and 1.125: even (1)
  CHECK(fp8_e4m3_from_quotient(1.1875f) == 0x3a);  // tie between 1.125 and 1.25: even (1.25)
  CHECK(fp8_e4m3_from_quotient(1.0626f) == 0x39);
  CHECK(fp8_e4m3_from_quotient(240.0f) == 0x77);
  CHECK(fp8_e4m3_from_quotient(-448.0f) == 0xfe);
  CHECK(fp8_e4m3_from_quotient(440.0f) == 0x7e);  // 416 | 448: tie -> even (448, 0x7e)
  CHECK(fp8_e4m3_from_quotient(432.0f) == 0x7e);  // tie between 416 (0x7d) and 448: even
  CHECK(fp8_e4m3_from_quotient(431.0f) == 0x7d);
  // saturation: the clamp, never NaN
  CHECK(fp8_e4m3_from_quotient(460.0f) == 0x7e);
  CHECK(fp8_e4m3_from_quotient(1e30f) == 0x7e);
  CHECK(fp8_e4m3_from_quotient(std::numeric_limits<float>::infinity()) == 0x7e);
  CHECK(fp8_e4m3_from_quotient(-std::numeric_limits<float>::infinity()) == 0xfe);
  // NaN of either sign -> 0x7f
  CHECK(fp8_e4m3_from_quotient(std::numeric_limits<float>::quiet_NaN()) == 0x7f);
  CHECK(fp8_e4m3_from_quotient(f(0xffc00001u)) == 0x7f);
  // signed zeros and subnormals (step 2^-9)
  CHECK(fp8_e4m3_from_quotient(0.0f) == 0x00);
  CHECK(fp8_e4m3_from_quotient(-0.0f) == 0x80);
  const float sub = std::ldexp(1.0f, -9);
  CHECK(fp8_e4m3_from_quotient(sub) == 0x01);
  CHECK(fp8_e4m3_from_quotient(0.5f * sub) == 0x00);   // tie with 0: even (0)
  CHECK(fp8_e4m3_from_quotient(-0.5f * sub) == 0x80);  // ... keeping the sign
  CHECK(fp8_e4m3_from_quotient(0.5001f * sub) == 0x01);
  CHECK(fp8_e4m3_from_quotient(1.5f * sub) == 0x02);  // tie: even (2)
  CHECK(fp8_e4m3_from_quotient(2.5f * sub) == 0x02);  // tie: even (2)
  CHECK(fp8_e4m3_from_quotient(7.5f * sub) == 0x08);  // tie 7 | 8 (2^-6, the smallest normal)
  CHECK(fp8_e4m3_from_quotient(std::ldexp(1.0f, -6)) == 0x08);
  CHECK(fp8_e4m3_from_quotient(1e-30f) == 0x00);
  CHECK(fp8_e4m3_from_quotient(f(1u)) == 0x00);  // the smallest fp32 subnormal
}

TEST_CASE("fp8: every code round-trips and every midpoint rounds to even", "[unit][fp8]") {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) {
      CHECK(std::isnan(fp8_e4m3_to_f32(static_cast<std::uint8_t>(b))));
      continue;
    }
    const float v = fp8_e4m3_to_f32(static_cast<std::uint8_t>(b));
    CHECK(fp8_e4m3_from_quotient(v) == b);
    if ((b & 0x7f) < 0x7e) {  // the midpoint to the next code of larger magnitude, and around it
      const float next = fp8_e4m3_to_f32(static_cast<std::uint8_t>(b + 1));
      const float mid = (v + next) / 2;  // exact in fp32
      const int even = (b & 1) == 0 ? b : b + 1;
      CHECK(fp8_e4m3_from_quotient(mid) == even);
      CHECK(fp8_e4m3_from_quotient(std::nextafter(mid, 0.0f)) ==
            slow_e4m3(std::nextafter(mid, 0.0f)));
      CHECK(fp8_e4m3_from_quotient(std::nextafter(mid, 1e9f * (v < 0 ? -1 : 1))) ==
            slow_e4m3(std::nextafter(mid, 1e9f * (v < 0 ? -1 : 1))));
    }
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> any;
  for (int i = 0; i < 200000; ++i) {
    // random bit patterns, most of them scaled into the interesting range [2^-12, 2^10)
    std::uint32_t u = any(rng);
    if (i % 4) u = (u & 0x807fffffu) | ((115u + (u >> 23) % 22u) << 23);
    const float q = f(u);
    if (fp8_e4m3_from_quotient(q) != slow_e4m3(q)) {
      FAIL_CHECK("bits " << u);
      break;
    }
  }
}

TEST_CASE("fp8: scales, zero groups, inf, NaN and UE8M0", "[unit][fp8]") {
  const auto scale = [](float amax, bool ue8m0) { return f(fp8_scale_bits(bits(amax), ue8m0)); };
  CHECK(scale(448.0f, false) == 1.0f);
  CHECK(bits(scale(3.0f, false)) == bits(3.0f / 448.0f));
  CHECK(scale(0.0f, false) == 1.0f);  // all-zero group
  CHECK(scale(0.0f, true) == 1.0f);
  CHECK(scale(f(1u), false) == 1.0f);  // 2^-149 / 448 underflows to 0: as a zero group
  CHECK(std::isinf(scale(std::numeric_limits<float>::infinity(), false)));
  CHECK(std::isinf(scale(std::numeric_limits<float>::infinity(), true)));
  CHECK(fp8_scale_bits(0x7fc01234u, false) == 0x7fc00000u);
  CHECK(fp8_scale_bits(0x7f800001u, true) == 0x7fc00000u);
  CHECK(scale(448.0f, true) == 1.0f);  // already a power of two
  CHECK(scale(449.0f, true) == 2.0f);  // rounded up
  CHECK(scale(300.0f, true) == 1.0f);  // 0.67 -> 1
  CHECK(scale(224.0f, true) == 0.5f);
  CHECK(scale(1e-36f, true) == std::ldexp(1.0f, -126));  // s subnormal: the smallest normal
}

TEST_CASE("fp8: block groups, partial edge blocks, zero / inf / NaN blocks", "[unit][fp8]") {
  const std::int64_t rows = 200, cols = 130;  // 2 x 2 blocks, the last row and column partial
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  for (auto& v : x) v = nd(rng);
  const auto at = [&](std::int64_t r, std::int64_t c) -> float& {
    return x[static_cast<std::size_t>(r * cols + c)];
  };
  // block (0, 1) (cols 128..129): zeros, one of them negative
  for (std::int64_t r = 0; r < 128; ++r)
    for (std::int64_t c = 128; c < cols; ++c) at(r, c) = r == 5 ? -0.0f : 0.0f;
  // block (1, 0): an inf; block (1, 1): a NaN
  at(150, 3) = -std::numeric_limits<float>::infinity();
  at(199, 129) = std::numeric_limits<float>::quiet_NaN();
  for (DType dt : {DType::bfloat16, DType::float32}) {
    std::vector<std::byte> src(x.size() * dtype_size(dt));
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (dt == DType::bfloat16) {
        const std::uint16_t h = bf16(x[i]);
        std::memcpy(src.data() + 2 * i, &h, 2);
      } else {
        std::memcpy(src.data() + 4 * i, &x[i], 4);
      }
    }
    const TensorMeta m{"w", dt, {rows, cols}};
    REQUIRE(fp8_scale_shape(m, Fp8Scaling::block128) == std::vector<std::int64_t>{2, 2});
    std::vector<std::uint8_t> w(x.size());
    std::vector<float> s(4);
    quantize_fp8_host(m, src.data(), Fp8Scaling::block128, w.data(), s.data());
    const auto wat = [&](std::int64_t r, std::int64_t c) {
      return w[static_cast<std::size_t>(r * cols + c)];
    };
    CHECK(s[1] == 1.0f);  // zero block
    CHECK(wat(0, 128) == 0x00);
    CHECK(wat(5, 129) == 0x80);
    CHECK(std::isinf(s[2]));  // inf block: finite -> signed zero, inf -> NaN
    CHECK(wat(150, 3) == 0x7f);
    CHECK((wat(140, 0) & 0x7f) == 0);
    CHECK(std::isnan(s[3]));  // NaN block: all NaN
    CHECK(wat(128, 128) == 0x7f);
    CHECK(wat(199, 128) == 0x7f);
    CHECK(std::isfinite(s[0]));  // the NaN and inf stay in their blocks
    CHECK(wat(0, 0) != 0x7f);
    check_against_reference(x, rows, cols, Fp8Scaling::block128, dt);
    check_against_reference(x, rows, cols, Fp8Scaling::block128_ue8m0, dt);
    check_against_reference(x, rows, cols, Fp8Scaling::per_channel, dt);
  }
}

TEST_CASE("fp8: random tensors against the slow reference, all layouts", "[unit][fp8]") {
  std::mt19937 rng(42);
  for (auto [rows, cols] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {128, 128}, {256, 384}, {1, 1}, {3, 700}, {129, 127}, {300, 257}}) {
    std::vector<float> x(static_cast<std::size_t>(rows * cols));
    // per-row magnitudes differ by orders, so per-channel and per-block scales differ
    for (std::int64_t r = 0; r < rows; ++r) {
      std::normal_distribution<float> nd(0.0f, std::ldexp(1.0f, static_cast<int>(r % 23) - 12));
      for (std::int64_t c = 0; c < cols; ++c) x[static_cast<std::size_t>(r * cols + c)] = nd(rng);
    }
    for (DType dt : {DType::bfloat16, DType::float32})
      for (auto mode : {Fp8Scaling::block128, Fp8Scaling::block128_ue8m0, Fp8Scaling::per_tensor,
                        Fp8Scaling::per_channel})
        check_against_reference(x, rows, cols, mode, dt);
  }
}

TEST_CASE("fp8: shapes and dtypes that do not fit are errors naming the tensor", "[unit][fp8]") {
  const auto message = [](const TensorMeta& m, Fp8Scaling s) -> std::string {
    try {
      (void)fp8_scale_shape(m, s);
    } catch (const config_error& e) {
      return e.what();
    }
    return "";
  };
  CHECK(message({"a.norm", DType::bfloat16, {64}}, Fp8Scaling::block128).find("a.norm") !=
        std::string::npos);
  CHECK(message({"a.idx", DType::int32, {4, 4}}, Fp8Scaling::per_tensor).find("a.idx") !=
        std::string::npos);
  CHECK(message({"s", DType::float32, {}}, Fp8Scaling::per_channel).find("s") != std::string::npos);
  CHECK(fp8_scale_shape({"x", DType::float32, {3, 4, 5}}, Fp8Scaling::per_channel) ==
        std::vector<std::int64_t>{3, 1});
  CHECK(fp8_scale_shape({"x", DType::float32, {}}, Fp8Scaling::per_tensor).empty());
  CHECK(fp8_scale_shape({"x", DType::bfloat16, {0, 5}}, Fp8Scaling::block128) ==
        std::vector<std::int64_t>{0, 1});
  CHECK(parse_fp8_scaling("block128_ue8m0") == Fp8Scaling::block128_ue8m0);
  CHECK_THROWS_AS(parse_fp8_scaling("mxfp8"), config_error);
}

}  // namespace ws_test_fp8_test

namespace ws_test_fp8_fast_quotient {

// x / scale without a division (the kernels' path for scales in [2^-100, 2^100]) against the IEEE
// division: the float8 bytes over every bfloat16 x of every `step`-th bfloat16 amax's scale
// (|x| <= amax, as in a group), and random float32 pairs. step 1 (all 890 M pairs, ~10 s) is the
// hidden [.slow] test; the default run takes every 13th amax.
void fast_quotient_matches(std::uint32_t step) {
  using namespace weightsync::detail;
  long long pairs = 0, bad = 0;
  for (std::uint32_t a = 1; a < 0x7f80; a += step) {
    const std::uint32_t amax = a << 16;
    const std::uint32_t sb = fp8_scale_bits(amax, false);
    if (!fp8_fast_scale(sb)) continue;
    const float s = fp8_f32_from_bits(sb), inv = 1.0f / s;
    for (std::uint32_t xb = 0; xb < 0x10000; ++xb) {
      const std::uint32_t xu = xb << 16;
      if ((xu & 0x7fffffffu) > amax) continue;
      const float x = fp8_f32_from_bits(xu);
      ++pairs;
      if (fp8_e4m3_from_quotient(x / s) != fp8_e4m3_from_quotient(fp8_quotient_fast(x, s, inv)) &&
          bad++ < 5)
        UNSCOPED_INFO("amax bits " << amax << ", x bits " << xu);
    }
  }
  std::mt19937_64 rng(3);
  for (int i = 0; i < 4000000; ++i) {
    const std::uint64_t r = rng();
    const auto amax = static_cast<std::uint32_t>(r & 0x7f7fffffu);
    const std::uint32_t sb = fp8_scale_bits(amax, false);
    if (!fp8_fast_scale(sb)) continue;
    std::uint32_t xa = static_cast<std::uint32_t>(r >> 32) & 0x7fffffffu;
    xa = i % 3 == 0 ? amax - static_cast<std::uint32_t>(r >> 50) % (amax + 1) : xa % (amax + 1);
    const float x = fp8_f32_from_bits(xa | (static_cast<std::uint32_t>(r >> 31) & 0x80000000u));
    const float s = fp8_f32_from_bits(sb);
    ++pairs;
    if (fp8_e4m3_from_quotient(x / s) !=
            fp8_e4m3_from_quotient(fp8_quotient_fast(x, s, 1.0f / s)) &&
        bad++ < 5)
      UNSCOPED_INFO("fp32: amax bits " << amax << ", x bits " << xa);
  }
  INFO(pairs << " pairs");
  CHECK(bad == 0);
  // -0 stays -0; the range bounds
  CHECK(fp8_f32_to_bits(fp8_quotient_fast(-0.0f, 3.0f, 1.0f / 3.0f)) == 0x80000000u);
  CHECK(fp8_fast_scale(fp8_f32_to_bits(1.0f)));
  CHECK_FALSE(fp8_fast_scale(0x7f800000u));  // inf
  CHECK_FALSE(fp8_fast_scale(0x7fc00000u));  // NaN
  CHECK_FALSE(fp8_fast_scale(0x00400000u));  // subnormal
}

TEST_CASE("fp8: the kernels' division-free quotient rounds like the IEEE division", "[unit][fp8]") {
  fast_quotient_matches(13);
}

TEST_CASE("fp8: the division-free quotient over every bfloat16 pair", "[.slow][fp8]") {
  fast_quotient_matches(1);
}

}  // namespace ws_test_fp8_fast_quotient
