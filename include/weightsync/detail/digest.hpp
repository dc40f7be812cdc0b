// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The chunk digest of TransferOptions::checksum: a 64-bit digest of a chunk's pieces (each a run
//! of bytes, at its position in the chunk) that a GPU computes in parallel at memory speed
//! (kernels/digest.cu, launched by <weightsync/cuda/digest.hpp>) and that this host reference
//! reproduces bit for bit. Not cryptographic: it tells a corrupted or torn chunk from the one
//! that was sent. Hash64 (detail/hash.hpp) is sequential: one chain over every byte.
//!
//! Definition. The piece at position p (`ordinal`) of `n` bytes is cut into blocks of
//! kDigestBlockBytes (64 KiB; the last one shorter). Block b has kDigestLanes (256) lanes; its
//! bytes are granules of 16 (the last one zero-padded), and granule g belongs to lane g % 256,
//! which reads its granules in order: a lane starts at digest_lane_init(digest_key(p, b), lane)
//! and takes each granule as two little-endian words through digest_round. Every lane of every
//! block (those without a granule too) adds digest_fmix(its state) to the digest, and every piece
//! adds digest_length_term(p, n); all sums are modulo 2^64. Pieces of 0 bytes add nothing.
//!
//! Why this shape: lanes are independent (a CTA's threads), blocks are independent (CTAs), and a
//! sum is the same in any order (CTAs finish with one atomicAdd each): the kernel needs no
//! ordering and gets the same bits as this loop. Any change within one lane changes its state
//! (digest_round is a bijection either way), so a flipped bit always changes the digest; changes
//! in several lanes cancel with probability about 2^-64.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "weightsync/detail/digest_bits.hpp"
#include "weightsync/kernels/digest_abi.hpp"

namespace weightsync::detail {

//! One piece of a chunk to digest: `bytes` bytes at `data` (host or device memory, as the policy
//! that digests it), at position `ordinal` in its chunk, into sums[sum] of the call. The device
//! kernel also copies them to `copy_to` when it is set (the host reference ignores it).
struct DigestSpan {
  const void* data = nullptr;
  std::size_t bytes = 0;
  std::uint32_t ordinal = 0;
  std::uint32_t sum = 0;
  void* copy_to = nullptr;
};

//! The host reference: a chunk's digest, one piece at a time (any order of pieces gives the same
//! value; a piece's position is its ordinal).
class ChunkDigest {
 public:
  //! Adds the piece at position `ordinal`: `n` bytes at `p` (host memory).
  ChunkDigest& piece(std::uint64_t ordinal, const void* p, std::size_t n) {
    if (n == 0) return *this;
    using kernels::kDigestBlockBytes;
    using kernels::kDigestGranuleBytes;
    using kernels::kDigestLanes;
    const auto* bytes = static_cast<const unsigned char*>(p);
    sum_ += digest_length_term(ordinal, n);
    std::uint64_t lane[kDigestLanes];
    for (std::uint64_t b = 0; b * kDigestBlockBytes < n; ++b) {
      const std::uint64_t key = digest_key(ordinal, b);
      for (int l = 0; l < kDigestLanes; ++l) lane[l] = digest_lane_init(key, static_cast<unsigned>(l));
      const unsigned char* blk = bytes + b * kDigestBlockBytes;
      const std::size_t left = static_cast<std::size_t>(
          std::min<std::uint64_t>(kDigestBlockBytes, n - b * kDigestBlockBytes));
      const std::size_t granules = (left + kDigestGranuleBytes - 1) / kDigestGranuleBytes;
      for (std::size_t g = 0; g < granules; ++g) {
        unsigned char v[kDigestGranuleBytes] = {};
        const std::size_t off = g * kDigestGranuleBytes;
        std::memcpy(v, blk + off, std::min<std::size_t>(kDigestGranuleBytes, left - off));
        std::uint64_t lo, hi;
        std::memcpy(&lo, v, 8);
        std::memcpy(&hi, v + 8, 8);
        std::uint64_t& s = lane[g % kDigestLanes];
        s = digest_round(digest_round(s, lo), hi);
      }
      for (int l = 0; l < kDigestLanes; ++l) sum_ += digest_fmix(lane[l]);
    }
    return *this;
  }
  ChunkDigest& piece(const DigestSpan& s) { return piece(s.ordinal, s.data, s.bytes); }
  //! The digest of the pieces added so far.
  std::uint64_t value() const noexcept { return sum_; }

 private:
  std::uint64_t sum_ = 0;
};

//! The digest of `count` pieces in host memory (their `sum` ignored: one chunk).
inline std::uint64_t chunk_digest(const DigestSpan* spans, std::size_t count) {
  ChunkDigest d;
  for (std::size_t i = 0; i < count; ++i) d.piece(spans[i]);
  return d.value();
}

//! sums[0..nsums) <- the digests of the chunks that `count` pieces in host memory make up (each
//! piece goes to sums[piece.sum]).
inline void digest_sums(const DigestSpan* spans, std::size_t count, std::uint64_t* sums,
                        std::size_t nsums) {
  // No buffer holds more sums than this; saying so keeps GCC 13 from warning that the zeroing
  // below might exceed the largest object (-Wstringop-overflow).
  nsums = std::min(nsums, static_cast<std::size_t>(PTRDIFF_MAX) / sizeof(std::uint64_t));
  for (std::size_t i = 0; i < nsums; ++i) sums[i] = 0;
  for (std::size_t i = 0; i < count; ++i)
    sums[spans[i].sum] += ChunkDigest().piece(spans[i]).value();
}

}  // namespace weightsync::detail
