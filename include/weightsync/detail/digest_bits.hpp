// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The scalar arithmetic of the chunk digest (detail/digest.hpp), as plain C++17 shared by the
//! host reference and the CUDA kernel (kernels/digest.cu, which compiles these functions as
//! __host__ __device__), so that both compute every lane from the same bits the same way.

#include <cstdint>

#include "float_bits.hpp"  // WEIGHTSYNC_HOST_DEVICE (relative: nvcc compiles the kernels without -I)

namespace weightsync::detail {

inline constexpr std::uint64_t kDigestSeed = 0x5753444947455354ull;     // "WSDIGEST"
inline constexpr std::uint64_t kDigestLengthSeed = 0x5753444c454e4754ull;  // "WSDLENGT"
inline constexpr std::uint64_t kDigestMul = 0x9e3779b97f4a7c15ull;
inline constexpr std::uint64_t kDigestLaneStep = 0xc2b2ae3d27d4eb4full;

//! murmur3's 64-bit finalizer: a bijection that spreads every input bit over the output.
WEIGHTSYNC_HOST_DEVICE inline std::uint64_t digest_fmix(std::uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

//! One step of a lane over an 8-byte word (little-endian): for a fixed state a bijection of the
//! word, for a fixed word a bijection of the state, so any change within a lane changes it.
WEIGHTSYNC_HOST_DEVICE inline std::uint64_t digest_round(std::uint64_t s, std::uint64_t w) {
  s = (s ^ w) * kDigestMul;
  return s ^ (s >> 29);
}

//! The key of block `block` of the piece at position `ordinal` in its chunk: it binds the block's
//! lanes to their place, so that moved or swapped blocks or pieces change the digest.
WEIGHTSYNC_HOST_DEVICE inline std::uint64_t digest_key(std::uint64_t ordinal, std::uint64_t block) {
  return digest_fmix(digest_fmix(kDigestSeed + ordinal) + block);
}

//! Lane `lane`'s state before its first granule.
WEIGHTSYNC_HOST_DEVICE inline std::uint64_t digest_lane_init(std::uint64_t key, unsigned lane) {
  return key + (static_cast<std::uint64_t>(lane) + 1) * kDigestLaneStep;
}

//! The term of a piece's length (a granule past a piece's end is zero-padded: the length tells
//! trailing zeros from none).
WEIGHTSYNC_HOST_DEVICE inline std::uint64_t digest_length_term(std::uint64_t ordinal,
                                                               std::uint64_t bytes) {
  return digest_fmix(digest_fmix(kDigestLengthSeed + ordinal) ^ bytes);
}

}  // namespace weightsync::detail
