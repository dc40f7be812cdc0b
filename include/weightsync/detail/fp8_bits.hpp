// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The scalar arithmetic of the FP8 (float8_e4m3fn) quantization, as plain C++17 shared by the
//! host implementation (<weightsync/fp8/quantize.hpp>) and the CUDA kernels
//! (kernels/fp8_quantize.cu, which compiles these functions as __host__ __device__), so
//! that both compute each scale from the same bits the same way. The reference they implement is
//! torch's plain formula (see fp8/quantize.hpp):
//!   scale = amax / 448 (fp32 division; 1 when that is 0), q = (x.float() / scale) (fp32
//!   division), clamp(q, -448, 448), then float8_e4m3fn rounded to nearest even.

#include <cmath>
#include <cstdint>
#include <cstring>

#include "float_bits.hpp"  // WEIGHTSYNC_HOST_DEVICE (relative: nvcc compiles the kernels without -I)

namespace weightsync::detail {

inline constexpr float kFp8E4m3Max = 448.0f;       //!< the largest finite float8_e4m3fn
inline constexpr std::uint8_t kFp8E4m3Nan = 0x7f;  //!< the NaN every NaN quotient becomes
inline constexpr std::uint32_t kF32One = 0x3f800000u;
inline constexpr std::uint32_t kF32QuietNan = 0x7fc00000u;

WEIGHTSYNC_HOST_DEVICE inline float fp8_f32_from_bits(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

WEIGHTSYNC_HOST_DEVICE inline std::uint32_t fp8_f32_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

//! IEEE fp32 division rounded to nearest even (never a reciprocal, never flushed).
WEIGHTSYNC_HOST_DEVICE inline float fp8_div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

//! The bits of |x| for a float32's bits. As unsigned integers they order like |x| does, and every
//! NaN is above +inf, so an integer max over them is a NaN-propagating amax.
WEIGHTSYNC_HOST_DEVICE inline std::uint32_t fp8_abs_bits(std::uint32_t f32_bits) {
  return f32_bits & 0x7fffffffu;
}

//! The scale (the stored `weight_scale_inv`, the dequantization multiplier) of a group whose amax
//! has the float32 bits `amax_bits` (non-negative, from fp8_abs_bits):
//! - NaN amax: the scale is a quiet NaN (0x7fc00000), and so is every quotient of the group;
//! - otherwise s = amax / 448 in fp32 (an inf amax gives an inf scale);
//! - s == 0 (an all-zero group, or an fp32 amax below 448 * 2^-150): the scale is 1, so the group
//!   quantizes to signed zeros with a finite scale;
//! - ue8m0: s is rounded up to a power of two (the next one when its mantissa is not 0), and a
//!   positive s below 2^-126 becomes 2^-126; inf stays inf.
WEIGHTSYNC_HOST_DEVICE inline std::uint32_t fp8_scale_bits(std::uint32_t amax_bits, bool ue8m0) {
  if (amax_bits > 0x7f800000u) return kF32QuietNan;
  const std::uint32_t s = fp8_f32_to_bits(fp8_div(fp8_f32_from_bits(amax_bits), kFp8E4m3Max));
  if (s == 0) return kF32One;
  if (!ue8m0 || s == 0x7f800000u) return s;
  if (s < 0x00800000u) return 0x00800000u;
  if ((s & 0x007fffffu) == 0) return s;
  return (s & 0x7f800000u) + 0x00800000u;
}

//! Whether x / scale may be computed by fp8_quotient_fast: a finite, normal scale in
//! [2^-100, 2^100]. Then 1 / scale is normal, and for every x whose quotient can round to a
//! non-zero float8 (|x / scale| > 2^-10) the residual x - q * scale is exact in fp32.
WEIGHTSYNC_HOST_DEVICE inline bool fp8_fast_scale(std::uint32_t scale_bits) {
  return scale_bits >= (27u << 23) && scale_bits <= (227u << 23);
}

//! x / scale from inv = RN(1 / scale) without a division: q0 = RN(x * inv), r = x - q0 * scale
//! (one fma, exact), q = RN(q0 + r * inv) (Markstein's correction), and the sign of x (so that
//! -0 stays -0). For fp8_fast_scale(scale) and finite x, its float8_e4m3fn rounding
//! (fp8_e4m3_from_quotient) is that of the IEEE quotient x / scale: tests/unit/fp8_test.cpp checks
//! it over every bfloat16 x against every bfloat16 amax's scale, and on random float32 pairs.
//! (The fp32 quotients themselves agree wherever |x / scale| >= 2^-11; below, where the residual
//! can be subnormal, both round to a signed float8 zero.)
WEIGHTSYNC_HOST_DEVICE inline float fp8_quotient_fast(float x, float scale, float inv) {
#if defined(__CUDA_ARCH__)
  const float q0 = __fmul_rn(x, inv);
  const float q = __fmaf_rn(__fmaf_rn(-q0, scale, x), inv, q0);
#else
  const float q0 = x * inv;
  const float q = std::fma(std::fma(-q0, scale, x), inv, q0);
#endif
  return fp8_f32_from_bits(fp8_f32_to_bits(q) | (fp8_f32_to_bits(x) & 0x80000000u));
}

//! float8_e4m3fn bits of a quotient q = x / scale: NaN -> 0x7f; otherwise q is clamped to
//! [-448, 448] (inf included) and rounded to nearest even; the sign of a zero result is kept.
WEIGHTSYNC_HOST_DEVICE inline std::uint8_t fp8_e4m3_from_quotient(float q) {
  const std::uint32_t u = fp8_f32_to_bits(q);
  const auto sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return kFp8E4m3Nan;
  if (a > 0x43e00000u) a = 0x43e00000u;  // clamp(-448, 448)
  if (a < 0x3c800000u) {                 // below 2^-6, the smallest normal: subnormal or zero
    if (a <= 0x3a800000u) return sign;   // at most 2^-10, half the smallest subnormal: zero
    // value = man * 2^(exp-150); in units of 2^-9 (the subnormal step): man >> (141 - exp),
    // a shift of 21..24 here. A carry into 8 is 2^-6, the smallest normal: still correct.
    const std::uint32_t exp = a >> 23;
    const std::uint32_t man = (a & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 141 - exp;
    const std::uint32_t q8 = man >> shift;
    const std::uint32_t rem = man & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1);
    const std::uint32_t r = q8 + ((rem > half || (rem == half && (q8 & 1u))) ? 1u : 0u);
    return static_cast<std::uint8_t>(sign | r);
  }
  // normal: rebias (127 -> 7) and round the 20 dropped bits to nearest even; 448 is 0x7e and
  // nothing above it is left, so no rounding reaches 0x7f (NaN)
  const std::uint32_t v = a - (120u << 23);
  const std::uint32_t r = (v + 0x7ffffu + ((v >> 20) & 1u)) >> 20;
  return static_cast<std::uint8_t>(sign | r);
}

//! The float32 value of float8_e4m3fn bits (exact; 0x7f / 0xff are NaN).
WEIGHTSYNC_HOST_DEVICE inline float fp8_e4m3_to_f32(std::uint8_t b) {
  const std::uint32_t sign = static_cast<std::uint32_t>(b & 0x80u) << 24;
  const std::uint32_t exp = (b >> 3) & 0xfu;
  const std::uint32_t man = b & 0x7u;
  if (exp == 0xf && man == 0x7) return fp8_f32_from_bits(sign | kF32QuietNan);
  if (exp == 0) {  // subnormal: man * 2^-9
    const float m = static_cast<float>(man) * (1.0f / 512.0f);
    return sign ? -m : m;
  }
  return fp8_f32_from_bits(sign | ((exp + 120u) << 23) | (man << 20));
}

}  // namespace weightsync::detail
