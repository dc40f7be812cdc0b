// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The ABI of the batched copy kernel (kernels/batched_copy.cu): the parameter block it takes by
//! value and its limits. Plain C++17 included by the .cu source (nvcc) and by the launcher
//! (<weightsync/cuda/batched_copy.hpp>, g++), so the static_asserts below check the layout on
//! both sides.
//!
//! One launch copies up to kMaxCopyDescs (src, dst, bytes) pieces. Work is cut into tiles of
//! kCopyTileBytes numbered across all pieces; CopyDesc::tile_end is the running count of tiles up
//! to and including that piece, which the kernel binary-searches to find a tile's piece.

#include <cstddef>
#include <cstdint>

namespace weightsync::kernels {

//! Pieces per launch: CopyBatchParams travels as the kernel's parameter, so it must fit the
//! 32,764-byte kernel-parameter limit (CUDA >= 12.1, sm_70 and newer).
inline constexpr std::uint32_t kMaxCopyDescs = 960;
//! Bytes per tile (a tile is one CTA's work).
inline constexpr std::uint64_t kCopyTileBytes = 65536;
//! Threads of the kernel's CTA (its __launch_bounds__ and the launch's block size).
inline constexpr int kCopyThreads = 512;

//! One piece: `bytes` bytes from src to dst, any alignment.
struct CopyDesc {
  const unsigned char* src;
  unsigned char* dst;
  unsigned long long bytes;
  unsigned long long tile_end;  //!< cumulative tiles up to and including this piece
};
static_assert(sizeof(CopyDesc) == 32, "CopyDesc is an ABI: 2 pointers, 2 u64");
static_assert(offsetof(CopyDesc, bytes) == 16 && offsetof(CopyDesc, tile_end) == 24);

//! The kernel's only parameter (passed as __grid_constant__).
struct CopyBatchParams {
  unsigned long long total_tiles;
  std::uint32_t count;  //!< pieces in d, at least 1
  std::uint32_t pad;
  CopyDesc d[kMaxCopyDescs];
};
static_assert(offsetof(CopyBatchParams, count) == 8 && offsetof(CopyBatchParams, d) == 16);
static_assert(sizeof(CopyBatchParams) == 16 + sizeof(CopyDesc) * kMaxCopyDescs,
              "CopyBatchParams is an ABI: u64, 2 u32, kMaxCopyDescs CopyDesc");
static_assert(sizeof(CopyBatchParams) <= 32764, "over the kernel-parameter limit");

}  // namespace weightsync::kernels
