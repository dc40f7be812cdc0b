// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The ABI of the chunk digest kernel (kernels/digest.cu): the digest's shape (lanes, granules,
//! blocks), the parameter block the kernel takes by value and its limits. Plain C++17 included by
//! the .cu source (nvcc), by the host reference (<weightsync/detail/digest.hpp>) and by the
//! launcher (<weightsync/cuda/digest.hpp>, g++), so the static_asserts below check the layout on
//! every side.
//!
//! The digest of a chunk (detail/digest.hpp says it in full): each piece is cut into blocks of
//! kDigestBlockBytes; a block is kDigestLanes lanes, lane l hashing granules l, l + kDigestLanes,
//! ... (kDigestGranuleBytes each, kDigestGranulesPerLane of them) sequentially; the digest is the
//! sum modulo 2^64 of every lane's finalized state and of one length term per piece. A sum is
//! order-free, so CTAs add their blocks with one atomicAdd each and the result is the same bits
//! in any schedule, and the same bits as the host's sequential loop. One launch may digest
//! several chunks (or tensors) at once: each piece names the sum it goes to.

#include <cstddef>
#include <cstdint>

namespace weightsync::kernels {

//! Lanes of a block: the kernel's CTA is one thread per lane.
inline constexpr int kDigestLanes = 256;
//! Bytes a lane reads at a time (one 16-byte vector load where aligned).
inline constexpr std::uint64_t kDigestGranuleBytes = 16;
//! Granules per lane and block.
inline constexpr std::uint64_t kDigestGranulesPerLane = 16;
//! Bytes of one block (64 KiB): the unit a CTA hashes.
inline constexpr std::uint64_t kDigestBlockBytes =
    kDigestGranuleBytes * kDigestGranulesPerLane * static_cast<std::uint64_t>(kDigestLanes);

//! Pieces per launch: DigestParams travels as the kernel's parameter, so it must fit the
//! 32,764-byte kernel-parameter limit (CUDA >= 12.1, sm_70 and newer).
inline constexpr std::uint32_t kMaxDigestPieces = 800;

//! One piece: `bytes` bytes at `data`, at position `ordinal` in its chunk, digested into
//! sums[sum] of its launch; and, when `copy_to` is not null, copied there as they are read (one
//! read for the copy and the digest).
struct DigestPiece {
  const unsigned char* data;
  unsigned char* copy_to;
  unsigned long long bytes;
  unsigned long long block_end;  //!< cumulative blocks of the launch up to and including this one
  std::uint32_t ordinal;
  std::uint32_t sum;
};
static_assert(sizeof(DigestPiece) == 40 && offsetof(DigestPiece, bytes) == 16 &&
                  offsetof(DigestPiece, block_end) == 24 && offsetof(DigestPiece, ordinal) == 32 &&
                  offsetof(DigestPiece, sum) == 36,
              "DigestPiece is an ABI: 2 pointers, 2 u64, 2 u32");

//! The kernel's only parameter (passed as __grid_constant__). Each piece's lanes and its length
//! term (added by the CTA of its block 0) are added to sums[piece.sum], which the launcher
//! zeroes first.
struct DigestParams {
  unsigned long long* sums;
  unsigned long long total_blocks;
  std::uint32_t count;  //!< pieces in p, at least 1
  std::uint32_t pad;
  DigestPiece p[kMaxDigestPieces];
};
static_assert(offsetof(DigestParams, total_blocks) == 8 && offsetof(DigestParams, count) == 16 &&
              offsetof(DigestParams, p) == 24);
static_assert(sizeof(DigestParams) == 24 + sizeof(DigestPiece) * kMaxDigestPieces,
              "DigestParams is an ABI: a pointer, a u64, 2 u32, kMaxDigestPieces DigestPiece");
static_assert(sizeof(DigestParams) <= 32764, "over the kernel-parameter limit");

}  // namespace weightsync::kernels
