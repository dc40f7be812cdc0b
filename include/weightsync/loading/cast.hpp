// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Element conversions among float32, float16 and bfloat16 on the host (round to nearest even,
//! NaN stays NaN: quiet, same sign, top payload bits kept; infinities and subnormals kept), and a
//! row converter used by the load planner. The bit-level code is shared with the CUDA gather
//! kernel (<weightsync/detail/float_bits.hpp>), so the host and device paths agree bit for bit.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "weightsync/detail/float_bits.hpp"
#include "weightsync/dtype.hpp"
#include "weightsync/error.hpp"

namespace weightsync {

//! The bits of a bfloat16 as a float.
inline float bf16_to_float(std::uint16_t h) noexcept {
  return std::bit_cast<float>(detail::bf16_bits_to_f32(h));
}

//! A float rounded to the nearest bfloat16 (ties to even); NaN gives a quiet NaN of the same sign.
inline std::uint16_t float_to_bf16(float f) noexcept {
  return detail::f32_bits_to_bf16(std::bit_cast<std::uint32_t>(f));
}

//! The bits of an IEEE half as a float (exact; a NaN comes back quiet).
inline float fp16_to_float(std::uint16_t h) noexcept {
  return std::bit_cast<float>(detail::fp16_bits_to_f32(h));
}

//! A float rounded to the nearest IEEE half (ties to even; overflow to infinity, subnormals kept;
//! NaN gives a quiet NaN of the same sign).
inline std::uint16_t float_to_fp16(float f) noexcept {
  return detail::f32_bits_to_fp16(std::bit_cast<std::uint32_t>(f));
}

//! True for the dtypes the planner converts between.
inline bool castable_dtype(DType d) noexcept {
  return d == DType::float32 || d == DType::float16 || d == DType::bfloat16;
}

namespace detail {

//! float32 bits of one float32 / float16 / bfloat16 element at `p`.
inline std::uint32_t load_f32_bits(const std::byte* p, DType t) noexcept {
  if (t == DType::float32) {
    std::uint32_t u;
    std::memcpy(&u, p, 4);
    return u;
  }
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return t == DType::bfloat16 ? bf16_bits_to_f32(h) : fp16_bits_to_f32(h);
}

//! Stores float32 bits `u` at `p` as one float32 / float16 / bfloat16 element.
inline void store_f32_bits(std::byte* p, DType t, std::uint32_t u) noexcept {
  if (t == DType::float32) {
    std::memcpy(p, &u, 4);
    return;
  }
  const std::uint16_t h = t == DType::bfloat16 ? f32_bits_to_bf16(u) : f32_bits_to_fp16(u);
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
  for (std::size_t i = 0; i < n; ++i)
    store_f32_bits(dst + i * ds, dt, load_f32_bits(src + i * ss, st));
}

}  // namespace detail
}  // namespace weightsync
