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
//! in any schedule, and the same bits as the host's sequential loop.

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
inline constexpr std::uint32_t kMaxDigestPieces = 1000;

//! One piece of a chunk: `bytes` bytes at `data`, its position `ordinal` in its chunk.
struct DigestPiece {
  const unsigned char* data;
  unsigned long long bytes;
  unsigned long long block_end;  //!< cumulative blocks of the launch up to and including this one
  unsigned long long ordinal;
};
static_assert(sizeof(DigestPiece) == 32 && offsetof(DigestPiece, block_end) == 16 &&
                  offsetof(DigestPiece, ordinal) == 24,
              "DigestPiece is an ABI: a pointer, 3 u64");

//! The kernel's only parameter (passed as __grid_constant__). Every piece's lanes are added to
//! *sum (which the launcher zeroes before the chunk's first launch), and `base` once, by CTA 0.
struct DigestParams {
  unsigned long long* sum;
  unsigned long long base;
  unsigned long long total_blocks;
  std::uint32_t count;  //!< pieces in p, at least 1
  std::uint32_t pad;
  DigestPiece p[kMaxDigestPieces];
};
static_assert(offsetof(DigestParams, base) == 8 && offsetof(DigestParams, total_blocks) == 16 &&
              offsetof(DigestParams, count) == 24 && offsetof(DigestParams, p) == 32);
static_assert(sizeof(DigestParams) == 32 + sizeof(DigestPiece) * kMaxDigestPieces,
              "DigestParams is an ABI: a pointer, 2 u64, 2 u32, kMaxDigestPieces DigestPiece");
static_assert(sizeof(DigestParams) <= 32764, "over the kernel-parameter limit");

}  // namespace weightsync::kernels
