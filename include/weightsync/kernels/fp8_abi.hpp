// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The ABI of the FP8 quantize kernels (kernels/fp8_quantize.cu): the parameter block
//! every kernel takes by value and the named codes in it. Plain C++17 included by the .cu source
//! (nvcc) and by the launcher (<weightsync/cuda/fp8_quantize.hpp>, g++), so the static_asserts
//! below check the layout on both sides.

#include <cstddef>
#include <cstdint>

namespace weightsync::kernels {

//! Source dtype codes (Fp8Params::src_type).
inline constexpr std::uint32_t kFp8SrcFloat32 = 0;
inline constexpr std::uint32_t kFp8SrcBfloat16 = 1;

//! Scale modes (Fp8Params::mode); they match weightsync::Fp8Scaling's values.
inline constexpr std::uint32_t kFp8Block128 = 0;
inline constexpr std::uint32_t kFp8Block128Ue8m0 = 1;
inline constexpr std::uint32_t kFp8PerTensor = 2;
inline constexpr std::uint32_t kFp8PerChannel = 3;

//! The block edge of the block modes, and the threads of every kernel's CTA.
inline constexpr int kFp8Block = 128;
inline constexpr int kFp8Threads = 256;

//! One quantization of a view of a row-major [src_rows, src_cols] source of src_type into a dense
//! [rows, cols] float8_e4m3fn `dst`: view element (d, c) is source element
//! (perm(row0 + d), col0 + c), where perm is the rotary permutation of
//! w.view(H, R/H/2, 2, C).transpose(1, 2) with head_rows rows per head (identity when 0). A whole
//! tensor is the view src_rows = rows, src_cols = cols, row0 = col0 = head_rows = 0; the load
//! planner quantizes a fused / sharded piece straight into its parameter this way. The scale
//! groups:
//! - block modes: 128 x 128 blocks of the view; block (i, j)'s scale at scales[i * scale_stride +
//! j];
//! - per-channel: view row d's scale at scales[d], over the whole source row perm(row0 + d) (all
//!   src_cols columns, not only the view's: a column shard keeps its row's checkpoint scale);
//! - per-tensor: one scale at scales[0] over the whole source (scales[0] also holds the amax bits
//!   between the passes).
struct Fp8Params {
  const void* src;
  void* dst;
  float* scales;
  long long rows;  //!< view rows (written)
  long long cols;  //!< view columns (written; the row length of dst)
  std::uint32_t src_type;
  std::uint32_t mode;
  long long src_rows;      //!< the source's rows (per-tensor amax)
  long long src_cols;      //!< the source's row length
  long long row0;          //!< first source row of the view, in permuted order
  long long col0;          //!< first source column of the view
  long long head_rows;     //!< rotary permute: rows per head (even); 0: none
  long long scale_stride;  //!< block modes: scales between block rows (>= ceil(cols / 128))
};
static_assert(sizeof(Fp8Params) == 96,
              "Fp8Params is an ABI: 3 pointers, 2 int64, 2 uint32, 6 int64");
static_assert(offsetof(Fp8Params, rows) == 24 && offsetof(Fp8Params, src_type) == 40 &&
              offsetof(Fp8Params, mode) == 44 && offsetof(Fp8Params, src_rows) == 48 &&
              offsetof(Fp8Params, head_rows) == 80 && offsetof(Fp8Params, scale_stride) == 88);

//! Views per batched launch (Fp8Batch travels as the kernel's parameter: within the 32,764-byte
//! kernel-parameter limit of CUDA >= 12.1).
inline constexpr std::uint32_t kFp8MaxBatch = 256;

//! A batch of block-mode views of one source type: block_end[i] is the running count of 128x128
//! blocks up to and including view i, which the kernel binary-searches.
struct Fp8Batch {
  unsigned long long total_blocks;
  std::uint32_t count;  //!< views in v, at least 1
  std::uint32_t pad;
  unsigned long long block_end[kFp8MaxBatch];
  Fp8Params v[kFp8MaxBatch];
};
static_assert(offsetof(Fp8Batch, count) == 8 && offsetof(Fp8Batch, block_end) == 16 &&
              offsetof(Fp8Batch, v) == 16 + 8 * kFp8MaxBatch);
static_assert(sizeof(Fp8Batch) == 16 + (8 + sizeof(Fp8Params)) * kFp8MaxBatch,
              "Fp8Batch is an ABI: u64, 2 u32, kFp8MaxBatch u64, kFp8MaxBatch Fp8Params");
static_assert(sizeof(Fp8Batch) <= 32764, "over the kernel-parameter limit");

}  // namespace weightsync::kernels
