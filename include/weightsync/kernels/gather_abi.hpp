// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The ABI of the load planner's gather kernel (kernels/gather.cu): the parameter block it takes by
//! value, its limits and the named element codes in it. Plain C++17 included by the .cu source
//! (nvcc) and by the launcher (<weightsync/cuda/gather.hpp>, g++), so the static_asserts below
//! check the layout on both sides.
//!
//! One launch runs up to kMaxGathers gathers. Work is cut into tiles of kGatherTile output
//! elements numbered across all gathers; GatherDesc::tile_end is the running count of tiles up to
//! and including that gather, which the kernel binary-searches to find a tile's gather.

#include <cstddef>
#include <cstdint>

namespace weightsync::kernels {

//! Element codes (GatherDesc::src_type, dst_type). When the two codes differ, the kernel
//! converts among float32, float16 and bfloat16 with the host path's integer code
//! (weightsync/detail/float_bits.hpp); when they are equal it copies elements of that size,
//! whatever their dtype (the kCopy codes are only ever used on both sides at once).
inline constexpr std::uint32_t kGatherFloat32 = 0;
inline constexpr std::uint32_t kGatherFloat16 = 1;
inline constexpr std::uint32_t kGatherBfloat16 = 2;
inline constexpr std::uint32_t kGatherCopy1 = 3;  //!< 1-byte elements
inline constexpr std::uint32_t kGatherCopy2 = 4;  //!< 2-byte elements
inline constexpr std::uint32_t kGatherCopy4 = 5;  //!< 4-byte elements
inline constexpr std::uint32_t kGatherCopy8 = 6;  //!< 8-byte elements
//! One past the largest code.
inline constexpr std::uint32_t kGatherTypeCodes = 7;

//! Gathers per launch: GatherBatchParams travels as the kernel's parameter, so it must fit the
//! 32,764-byte kernel-parameter limit (CUDA >= 12.1, sm_70 and newer).
inline constexpr std::uint32_t kMaxGathers = 384;
//! Output elements per tile (a tile is one CTA's work).
inline constexpr std::uint64_t kGatherTile = 8192;
//! Threads of the kernel's CTA (its __launch_bounds__ and the launch's block size).
inline constexpr int kGatherThreads = 256;

//! One gather: out[d][c] = cast(src[perm(row0 + d)][col0 + c]) for d < rows, c < cols, where perm
//! is the rotary permutation of w.view(H, R/H/2, 2, C).transpose(1, 2) (identity when
//! head_rows == 0). src is row-major with src_cols columns; dst is dense [rows, cols].
struct GatherDesc {
  const unsigned char* src;
  unsigned char* dst;
  long long src_cols, rows, cols, row0, col0, head_rows;
  unsigned long long tile_end;  //!< cumulative tiles up to and including this gather
  std::uint32_t src_type, dst_type;
};
static_assert(sizeof(GatherDesc) == 80, "GatherDesc is an ABI: 2 pointers, 6 int64, u64, 2 u32");
static_assert(offsetof(GatherDesc, src_cols) == 16 && offsetof(GatherDesc, head_rows) == 56 &&
              offsetof(GatherDesc, tile_end) == 64 && offsetof(GatherDesc, src_type) == 72 &&
              offsetof(GatherDesc, dst_type) == 76);

//! The kernel's only parameter (passed as __grid_constant__).
struct GatherBatchParams {
  unsigned long long total_tiles;
  std::uint32_t count;  //!< gathers in g, at least 1
  std::uint32_t pad;
  GatherDesc g[kMaxGathers];
};
static_assert(offsetof(GatherBatchParams, count) == 8 && offsetof(GatherBatchParams, g) == 16);
static_assert(sizeof(GatherBatchParams) == 16 + sizeof(GatherDesc) * kMaxGathers,
              "GatherBatchParams is an ABI: u64, 2 u32, kMaxGathers GatherDesc");
static_assert(sizeof(GatherBatchParams) <= 32764, "over the kernel-parameter limit");

}  // namespace weightsync::kernels
