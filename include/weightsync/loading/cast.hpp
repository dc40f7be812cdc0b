// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Element conversions among float32, float16 and bfloat16 on the host (round to nearest even,
//! NaN stays NaN, infinities and subnormals kept), and a row converter used by the load planner.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "weightsync/dtype.hpp"
#include "weightsync/error.hpp"

namespace weightsync {

//! The bits of a bfloat16 as a float.
inline float bf16_to_float(std::uint16_t h) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

//! A float rounded to the nearest bfloat16 (ties to even); NaN gives a quiet NaN of the same sign.
inline std::uint16_t float_to_bf16(float f) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

//! The bits of an IEEE half as a float (exact).
inline float fp16_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t man = h & 0x3ffu;
  std::uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      u = sign | (static_cast<std::uint32_t>(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  return std::bit_cast<float>(u);
}

//! A float rounded to the nearest IEEE half (ties to even; overflow to infinity, subnormals kept).
inline std::uint16_t float_to_fp16(float f) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x47800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65536: inf
  if (a < 0x38800000u) {               // below the smallest normal half (2^-14): subnormal or zero
    if (a < 0x33000000u) return sign;  // below half the smallest subnormal (2^-25): zero
    const std::uint32_t exp = a >> 23;
    const std::uint32_t man = (a & 0x7fffffu) | 0x800000u;
    // value = man * 2^(exp-150); in units of 2^-24 (the half subnormal step): man >> (126 - exp),
    // a shift of 14..24 here
    const std::uint32_t shift = 126 - exp;
    const std::uint32_t q = man >> shift;
    const std::uint32_t rem = man & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1);
    const std::uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | r);
  }
  // normal: rebias and round the 13 dropped bits to nearest even (a carry may reach inf: correct)
  const std::uint32_t v = a - 0x38000000u;  // exponent 127-15
  const std::uint32_t r = (v + 0xfffu + ((v >> 13) & 1u)) >> 13;
  return static_cast<std::uint16_t>(sign | r);
}

//! True for the dtypes the planner converts between.
inline bool castable_dtype(DType d) noexcept {
  return d == DType::float32 || d == DType::float16 || d == DType::bfloat16;
}

namespace detail {

inline float load_float(const std::byte* p, DType t) noexcept {
  if (t == DType::float32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return t == DType::bfloat16 ? bf16_to_float(h) : fp16_to_float(h);
}

inline void store_float(std::byte* p, DType t, float f) noexcept {
  if (t == DType::float32) {
    std::memcpy(p, &f, 4);
    return;
  }
  const std::uint16_t h = t == DType::bfloat16 ? float_to_bf16(f) : float_to_fp16(f);
  std::memcpy(p, &h, 2);
}

//! Converts `n` elements from `src` (type `st`) to `dst` (type `dt`); a plain copy when equal.
//! @pre st == dt, or both are castable_dtype().
inline void convert_row(std::byte* dst, DType dt, const std::byte* src, DType st, std::size_t n) {
  if (dt == st) {
    if (n) std::memcpy(dst, src, n * dtype_size(st));
    return;
  }
  const std::size_t ss = dtype_size(st), ds = dtype_size(dt);
  for (std::size_t i = 0; i < n; ++i) store_float(dst + i * ds, dt, load_float(src + i * ss, st));
}

}  // namespace detail
}  // namespace weightsync
