// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Conversions among the bits of float32, float16 and bfloat16: round to nearest even, overflow to
//! infinity, subnormals kept, and a NaN becomes a quiet NaN of the same sign that keeps the top
//! bits of its payload. Plain integer code (C++17, no library but `<cstdint>`) shared by the host
//! path (<weightsync/loading/cast.hpp>) and the CUDA gather kernel (kernels/gather.cu,
//! which nvcc compiles with these functions as __host__ __device__), so both give the same bits
//! for every input, NaNs included; the hardware conversions (__float2half_rn) canonicalize NaNs.

#include <cstdint>

#if defined(__CUDACC__)
#define WEIGHTSYNC_HOST_DEVICE __host__ __device__
#else
#define WEIGHTSYNC_HOST_DEVICE
#endif

namespace weightsync::detail {

//! float32 bits of a bfloat16 (exact).
WEIGHTSYNC_HOST_DEVICE inline std::uint32_t bf16_bits_to_f32(std::uint16_t h) {
  return static_cast<std::uint32_t>(h) << 16;
}

//! bfloat16 bits of a float32, rounded to nearest even.
WEIGHTSYNC_HOST_DEVICE inline std::uint16_t f32_bits_to_bf16(std::uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

//! float32 bits of an IEEE half (exact; a signalling NaN comes back quiet).
WEIGHTSYNC_HOST_DEVICE inline std::uint32_t fp16_bits_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return sign | 0x7f800000u | (man ? 0x400000u | (man << 13) : 0u);
  if (exp != 0) return sign | ((exp + 127 - 15) << 23) | (man << 13);
  if (man == 0) return sign;
  std::uint32_t e = 0;  // subnormal: normalize
  while ((man & 0x400u) == 0) {
    man <<= 1;
    ++e;
  }
  return sign | ((127 - 15 + 1 - e) << 23) | ((man & 0x3ffu) << 13);
}

//! IEEE half bits of a float32, rounded to nearest even.
WEIGHTSYNC_HOST_DEVICE inline std::uint16_t f32_bits_to_fp16(std::uint32_t u) {
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

}  // namespace weightsync::detail
