// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The ABI of the batched copy kernel (kernels/batched_copy.cu): the parameter block it takes by
//! value and its limits. Plain C++17 included by the .cu source (nvcc) and by the launcher
//! (<weightsync/cuda/batched_copy.hpp>, g++), so the static_asserts below check the layout on
//! both sides.
//!
//! One launch copies up to kMaxCopyDescs (src, dst, bytes) pieces by value (up to kSmallCopyDescs
//! in a small parameter block), or any number from a table in device memory. Work is cut into tiles of
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

//! Pieces of the small by-value launch (ws_batched_copy_small): a launch's parameters are copied
//! with it, so a few pieces travel in 528 bytes rather than CopyBatchParams' 30 KiB.
inline constexpr std::uint32_t kSmallCopyDescs = 16;
//! The small launch's only parameter.
struct CopyBatchSmallParams {
  unsigned long long total_tiles;
  std::uint32_t count;  //!< pieces in d, 1..kSmallCopyDescs
  std::uint32_t pad;
  CopyDesc d[kSmallCopyDescs];
};
static_assert(offsetof(CopyBatchSmallParams, count) == 8 && offsetof(CopyBatchSmallParams, d) == 16);
static_assert(sizeof(CopyBatchSmallParams) == 16 + sizeof(CopyDesc) * kSmallCopyDescs,
              "CopyBatchSmallParams is an ABI: u64, 2 u32, kSmallCopyDescs CopyDesc");

//! The parameter of a launch whose pieces lie in device memory (ws_batched_copy_table): any
//! number of them, uploaded once and reused while they stay the same (detail::CopyTable).
struct CopyTableParams {
  const CopyDesc* d;  //!< device memory, `count` pieces
  unsigned long long total_tiles;
  std::uint32_t count;  //!< at least 1
  std::uint32_t pad;
};
static_assert(offsetof(CopyTableParams, total_tiles) == 8 && offsetof(CopyTableParams, count) == 16);
static_assert(sizeof(CopyTableParams) == 24, "CopyTableParams is an ABI: pointer, u64, 2 u32");

}  // namespace weightsync::kernels
