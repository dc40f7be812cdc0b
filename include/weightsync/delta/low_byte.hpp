// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The low-byte reference: a trainer keeps, for a tensor of 2-byte elements (bf16, fp16), only
//! the low byte of every element of the version the receivers hold, plus a 64-bit hash of each
//! block of kLowByteBlock elements. That is 1 + 8 / 256 bytes per element, 51.6 % of a full
//! reference (which is the tensor's own 2 bytes per element).
//!
//! An element has changed when its low byte differs (what TRL does). That misses a change that
//! kept the low byte: the sign or the upper exponent bits changed and the rest did not (+0.0 to
//! -0.0, x to -x, x to 4x). The check that catches it, per block, in the same pass:
//! - every element whose low byte is the same is taken to be unchanged, and every element whose
//!   low byte differs is taken to have moved to the nearest value with the reference's low byte
//!   (low_byte_nearest: a change of fewer than 128 steps of the 15-bit magnitude, which is what
//!   an optimizer step of a few ULPs is): that rebuilds the receivers' block;
//! - the rebuilt block's hash is compared with the stored one. Equal: the block's changes are
//!   exactly the low-byte changes. Different (a missed change, or a change of 128 steps or more,
//!   or a sign flip): the whole block is marked changed, so the receivers get every element of it
//!   in this same sync.
//! So a missed change goes unsent only when two different blocks hash alike: a sum of 64-bit
//! mixes of (position, value), about 2^-64 per block that hides one. Nothing less than the high
//! bytes themselves can make that a certainty (they are what the check must tell apart); the full
//! reference (DeltaReference::full) is the option that rests on no hash.
//!
//! Layout of a low-byte reference of numel elements: the low bytes (numel bytes), then at
//! align8(numel) the block hashes (little-endian uint64, one per block, the last block shorter).
//! The measure writes the new low bytes and hashes as it goes, so after it the reference is the
//! source's (the caller treats it as the new version: see DeltaSource).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "format.hpp"  // (relative: nvcc compiles the kernels without -I)

namespace weightsync::delta {

//! Elements per hashed block of a low-byte reference.
inline constexpr std::uint32_t kLowByteBlock = 256;

//! Bytes of the low-byte reference of `numel` 2-byte elements.
constexpr std::uint64_t low_byte_ref_bytes(std::uint64_t numel) {
  return align8(numel) + (numel + kLowByteBlock - 1) / kLowByteBlock * 8;
}

//! murmur3's 64-bit finalizer: a bijection that mixes every input bit into every output bit.
WEIGHTSYNC_HOST_DEVICE constexpr std::uint64_t low_byte_mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

//! One element's share of its block's hash (k: its position in the block).
WEIGHTSYNC_HOST_DEVICE constexpr std::uint64_t low_byte_term(std::uint32_t k, std::uint16_t v) {
  return low_byte_mix(((std::uint64_t{k} << 16) | v) + 0x9e3779b97f4a7c15ull);
}

//! The value with low byte `lo` nearest to `s` in the 15-bit magnitude, with s's sign: what a
//! reference element of low byte `lo` was, if the step to `s` moved it by fewer than 128 steps.
WEIGHTSYNC_HOST_DEVICE constexpr std::uint16_t low_byte_nearest(std::uint16_t s, std::uint8_t lo) {
  const int m = s & 0x7fff;
  int r = m + static_cast<std::int8_t>(static_cast<std::uint8_t>(lo - (m & 0xff)));
  if (r < 0)
    r += 256;
  else if (r > 0x7fff)
    r -= 256;
  return static_cast<std::uint16_t>((s & 0x8000) | r);
}

//! The block hashes and low bytes of `src` into `ref` (a whole round: the reference becomes the
//! source).
inline void low_byte_seed_host(void* ref, const void* src, std::uint64_t numel) {
  auto* lo = static_cast<std::uint8_t*>(ref);
  auto* hashes = lo + align8(numel);
  const auto* s = static_cast<const std::byte*>(src);
  for (std::uint64_t b0 = 0; b0 < numel; b0 += kLowByteBlock) {
    const std::uint64_t n = numel - b0 < kLowByteBlock ? numel - b0 : kLowByteBlock;
    std::uint64_t h = 0;
    for (std::uint64_t k = 0; k < n; ++k) {
      std::uint16_t v;
      std::memcpy(&v, s + (b0 + k) * 2, 2);
      lo[b0 + k] = static_cast<std::uint8_t>(v);
      h += low_byte_term(static_cast<std::uint32_t>(k), v);
    }
    std::memcpy(hashes + b0 / kLowByteBlock * 8, &h, 8);
  }
}

//! What a round sends against a low-byte reference, and the reference updated to `src` in the
//! same pass: sets changed[i / 64] bit i % 64 for every element to send (the low-byte changes, and
//! every element of a block whose check failed), and returns the count per bucket of
//! bucket_elems (encode with encode_delta_host_if and those bits). `failed_blocks` (optional)
//! gets how many blocks failed their check.
inline std::vector<std::uint32_t> low_byte_changes_host(const void* src, void* ref,
                                                        std::uint64_t numel,
                                                        std::uint32_t bucket_elems,
                                                        std::vector<std::uint64_t>& changed,
                                                        std::uint64_t* failed_blocks = nullptr) {
  auto* lo = static_cast<std::uint8_t*>(ref);
  auto* hashes = lo + align8(numel);
  const auto* s = static_cast<const std::byte*>(src);
  changed.assign((numel + 63) / 64, 0);
  std::vector<std::uint32_t> counts(bucket_count(numel, bucket_elems), 0);
  std::uint64_t failed = 0;
  for (std::uint64_t b0 = 0; b0 < numel; b0 += kLowByteBlock) {
    const std::uint64_t n = numel - b0 < kLowByteBlock ? numel - b0 : kLowByteBlock;
    std::uint64_t rebuilt = 0, now = 0;
    bool any = false;
    for (std::uint64_t k = 0; k < n; ++k) {
      const std::uint64_t i = b0 + k;
      std::uint16_t v;
      std::memcpy(&v, s + i * 2, 2);
      const auto kk = static_cast<std::uint32_t>(k);
      const std::uint64_t t = low_byte_term(kk, v);
      now += t;
      if (static_cast<std::uint8_t>(v) != lo[i]) {
        any = true;
        changed[i / 64] |= std::uint64_t{1} << (i % 64);
        rebuilt += low_byte_term(kk, low_byte_nearest(v, lo[i]));
        lo[i] = static_cast<std::uint8_t>(v);
      } else {
        rebuilt += t;
      }
    }
    std::uint64_t stored;
    std::memcpy(&stored, hashes + b0 / kLowByteBlock * 8, 8);
    if ((any ? rebuilt : now) != stored) {  // a change the low bytes did not show: send it all
      ++failed;
      for (std::uint64_t i = b0; i < b0 + n; ++i) changed[i / 64] |= std::uint64_t{1} << (i % 64);
    }
    std::memcpy(hashes + b0 / kLowByteBlock * 8, &now, 8);
  }
  for (std::uint64_t w = 0; w < changed.size(); ++w) {
    std::uint64_t bits = changed[w];
    while (bits != 0) {
      const std::uint64_t i = w * 64 + static_cast<std::uint64_t>(__builtin_ctzll(bits));
      bits &= bits - 1;
      ++counts[i / bucket_elems];
    }
  }
  if (failed_blocks != nullptr) *failed_blocks = failed;
  return counts;
}

}  // namespace weightsync::delta
