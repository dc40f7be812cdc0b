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

//! One quantization: `src` is a row-major [rows, cols] matrix of src_type, `dst` the same shape
//! in float8_e4m3fn, `scales` the fp32 scales (block: [ceil(rows/128), ceil(cols/128)];
//! per-channel: [rows]; per-tensor: [1], which also holds the amax bits between the passes).
struct Fp8Params {
  const void* src;
  void* dst;
  float* scales;
  long long rows;
  long long cols;
  std::uint32_t src_type;
  std::uint32_t mode;
};
static_assert(sizeof(Fp8Params) == 48, "Fp8Params is an ABI: 3 pointers, 2 int64, 2 uint32");
static_assert(offsetof(Fp8Params, rows) == 24 && offsetof(Fp8Params, src_type) == 40 &&
              offsetof(Fp8Params, mode) == 44);

}  // namespace weightsync::kernels
