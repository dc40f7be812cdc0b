// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! FP8 quantization of bfloat16 / float32 weights to float8_e4m3fn, on the host: the reference
//! that the CUDA kernels (<weightsync/cuda/fp8_quantize.hpp>) match bit for bit.
//!
//! fp8/ is its own subsystem because both directions need it: the sender's source adapter
//! (fp8/source.hpp), the CUDA launcher, and a loading plan that quantizes on load.
//!
//! The reference is torch's plain formula, per group G of elements (a 128x128 block, a row, or the
//! whole tensor), with `scale` a float32 tensor (never a Python scalar: torch's CUDA division by a
//! CPU scalar multiplies by its reciprocal, which rounds differently):
//!   amax  = x[G].abs().amax().float()                (NaN if any element is NaN)
//!   scale = amax / 448                               (fp32 division)
//!   scale = 1 where scale == 0                       (all-zero groups; fp32 amax < 448 * 2^-150)
//!   [ue8m0] scale = 2 ** ceil(log2(scale)), computed on the bits: the next power of two unless
//!           already one, at least 2^-126; inf and NaN stay
//!   q     = (x[G].float() / scale)                   (fp32 division, round to nearest even)
//!   w[G]  = q.clamp(-448, 448).to(torch.float8_e4m3fn)  (round to nearest even)
//! and the stored scale is `scale` itself (DeepSeek-V3's `weight_scale_inv`: dequantized =
//! fp8 * scale). Consequences, all defined:
//! - the sign of zero is kept (-0.0 -> 0x80), and results below 2^-10 round to signed zero;
//! - finite values never saturate except by rounding of x / scale (the clamp catches those);
//! - a group holding an inf has scale inf: its finite elements become signed zeros and its infs
//!   NaN (inf / inf);
//! - a group holding a NaN has scale NaN (0x7fc00000) and every element NaN;
//! - every NaN quotient is stored as 0x7f (torch keeps the NaN's sign, 0x7f or 0xff: comparisons
//!   with torch treat both as NaN).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/fp8_bits.hpp"
#include "weightsync/dtype.hpp"
#include "weightsync/error.hpp"
#include "weightsync/kernels/fp8_abi.hpp"
#include "weightsync/tensor_meta.hpp"

namespace weightsync {

//! How scales are grouped (values are the kernels' mode codes, kernels/fp8_abi.hpp).
enum class Fp8Scaling : std::uint32_t {
  block128 = kernels::kFp8Block128,             //!< 128x128 blocks, fp32 scale amax/448
  block128_ue8m0 = kernels::kFp8Block128Ue8m0,  //!< 128x128 blocks, power-of-two scales
  per_tensor = kernels::kFp8PerTensor,          //!< one scale (a 0-dim fp32 tensor)
  per_channel = kernels::kFp8PerChannel,        //!< one scale per output row: [rows, 1]
};

inline const char* fp8_scaling_name(Fp8Scaling s) noexcept {
  switch (s) {
    case Fp8Scaling::block128:
      return "block128";
    case Fp8Scaling::block128_ue8m0:
      return "block128_ue8m0";
    case Fp8Scaling::per_tensor:
      return "per_tensor";
    case Fp8Scaling::per_channel:
      return "per_channel";
  }
  return "?";
}

//! @throws config_error naming the text for anything but the four names above.
inline Fp8Scaling parse_fp8_scaling(std::string_view s) {
  for (auto m : {Fp8Scaling::block128, Fp8Scaling::block128_ue8m0, Fp8Scaling::per_tensor,
                 Fp8Scaling::per_channel})
    if (s == fp8_scaling_name(m)) return m;
  throw config_error("fp8 scaling", detail::cat("unknown '", s,
                                                "' (block128, block128_ue8m0, per_tensor, "
                                                "per_channel)"));
}

inline bool fp8_block_scaling(Fp8Scaling s) noexcept {
  return s == Fp8Scaling::block128 || s == Fp8Scaling::block128_ue8m0;
}

//! A tensor seen as the matrix the scales are laid over: rows = shape[0] (output channels), cols =
//! the product of the other dims (1 for a 0-dim tensor, which only per_tensor accepts).
struct Fp8Matrix {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
};

//! The matrix of `m` under `s`. @throws config_error naming the tensor when its dtype is not
//! bfloat16 / float32, or its rank does not fit (block modes: 2-D; per_channel: >= 1-D).
inline Fp8Matrix fp8_matrix(const TensorMeta& m, Fp8Scaling s) {
  if (m.dtype != DType::bfloat16 && m.dtype != DType::float32)
    throw config_error(m.name + ".dtype", detail::cat("FP8 quantization takes bfloat16 or float32, "
                                                      "got ",
                                                      dtype_name(m.dtype)));
  (void)m.nbytes();  // validates the shape
  if (fp8_block_scaling(s) && m.shape.size() != 2)
    throw config_error(
        m.name + ".shape",
        detail::cat(fp8_scaling_name(s), " needs a 2-D weight, got ", m.shape.size(), " dims"));
  if (s == Fp8Scaling::per_channel && m.shape.empty())
    throw config_error(m.name + ".shape", "per_channel needs at least 1 dim, got a 0-dim tensor");
  Fp8Matrix x;
  x.rows = m.shape.empty() ? 1 : m.shape[0];
  x.cols = 1;
  for (std::size_t i = 1; i < m.shape.size(); ++i) x.cols *= m.shape[i];
  return x;
}

//! The shape of the fp32 scale tensor of `m` under `s` (see Fp8Scaling).
inline std::vector<std::int64_t> fp8_scale_shape(const TensorMeta& m, Fp8Scaling s) {
  const Fp8Matrix x = fp8_matrix(m, s);
  constexpr std::int64_t B = kernels::kFp8Block;
  switch (s) {
    case Fp8Scaling::per_tensor:
      return {};
    case Fp8Scaling::per_channel:
      return {x.rows, 1};
    default:
      return {(x.rows + B - 1) / B, (x.cols + B - 1) / B};
  }
}

//! The scale tensor's name for weight `name`: `.weight` -> `.weight_scale_inv` (block layouts)
//! or `.weight_scale` (per tensor / channel); any other name gets the suffix appended.
inline std::string fp8_scale_name(const std::string& name, Fp8Scaling s) {
  const char* suffix = fp8_block_scaling(s) ? "_scale_inv" : "_scale";
  return name + suffix;
}

//! The metadata of the quantized weight (same name and shape, float8_e4m3fn) and of its scales
//! (`scale_name`, float32, fp8_scale_shape).
inline TensorMeta fp8_weight_meta(const TensorMeta& m) {
  return TensorMeta{m.name, DType::float8_e4m3fn, m.shape};
}
inline TensorMeta fp8_scale_meta(const TensorMeta& m, Fp8Scaling s, std::string scale_name) {
  return TensorMeta{std::move(scale_name), DType::float32, fp8_scale_shape(m, s)};
}

namespace detail {
//! float32 bits of element i of a bfloat16 / float32 source at any alignment.
inline std::uint32_t fp8_load_bits(const std::byte* p, bool bf16, std::size_t i) noexcept {
  if (bf16) {
    std::uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return static_cast<std::uint32_t>(h) << 16;
  }
  std::uint32_t u;
  std::memcpy(&u, p + 4 * i, 4);
  return u;
}

//! Quantizes the group rows [r0, r1) x cols [c0, c1) of a [rows, cols] matrix with one scale.
inline float fp8_quantize_group(const std::byte* src, bool bf16, std::int64_t cols, std::int64_t r0,
                                std::int64_t r1, std::int64_t c0, std::int64_t c1, bool ue8m0,
                                std::uint8_t* dst) noexcept {
  std::uint32_t amax = 0;
  for (std::int64_t r = r0; r < r1; ++r)
    for (std::int64_t c = c0; c < c1; ++c)
      amax = std::max(
          amax, fp8_abs_bits(fp8_load_bits(src, bf16, static_cast<std::size_t>(r * cols + c))));
  const float scale = fp8_f32_from_bits(fp8_scale_bits(amax, ue8m0));
  for (std::int64_t r = r0; r < r1; ++r)
    for (std::int64_t c = c0; c < c1; ++c) {
      const auto i = static_cast<std::size_t>(r * cols + c);
      dst[i] =
          fp8_e4m3_from_quotient(fp8_div(fp8_f32_from_bits(fp8_load_bits(src, bf16, i)), scale));
    }
  return scale;
}
}  // namespace detail

//! Quantizes `src` (meta `m`, host memory, any alignment) into `dst` (m.numel() bytes of
//! float8_e4m3fn) and `scales` (the element count of fp8_scale_shape(m, s), fp32, host memory).
//! @throws config_error naming the tensor (see fp8_matrix).
inline void quantize_fp8_host(const TensorMeta& m, const void* src, Fp8Scaling s, void* dst,
                              float* scales) {
  const Fp8Matrix x = fp8_matrix(m, s);
  const auto* in = static_cast<const std::byte*>(src);
  auto* out = static_cast<std::uint8_t*>(dst);
  const bool bf16 = m.dtype == DType::bfloat16;
  constexpr std::int64_t B = kernels::kFp8Block;
  switch (s) {
    case Fp8Scaling::per_tensor:
      scales[0] = detail::fp8_quantize_group(in, bf16, x.cols, 0, x.rows, 0, x.cols, false, out);
      return;
    case Fp8Scaling::per_channel:
      for (std::int64_t r = 0; r < x.rows; ++r)
        scales[r] = detail::fp8_quantize_group(in, bf16, x.cols, r, r + 1, 0, x.cols, false, out);
      return;
    default: {
      const bool ue8m0 = s == Fp8Scaling::block128_ue8m0;
      const std::int64_t bc = (x.cols + B - 1) / B;
      for (std::int64_t br = 0; br * B < x.rows; ++br)
        for (std::int64_t b = 0; b < bc; ++b)
          scales[br * bc + b] =
              detail::fp8_quantize_group(in, bf16, x.cols, br * B, std::min(x.rows, br * B + B),
                                         b * B, std::min(x.cols, b * B + B), ue8m0, out);
      return;
    }
  }
}

//! The view (kernels/fp8_abi.hpp) that quantizes the whole tensor `m` (see quantize_fp8_host).
inline kernels::Fp8Params fp8_whole_view(const TensorMeta& m, Fp8Scaling s, const void* src,
                                         void* dst, float* scales) {
  const Fp8Matrix x = fp8_matrix(m, s);
  constexpr std::int64_t B = kernels::kFp8Block;
  kernels::Fp8Params p{};
  p.src = src;
  p.dst = dst;
  p.scales = scales;
  p.rows = p.src_rows = x.rows;
  p.cols = p.src_cols = x.cols;
  p.src_type = m.dtype == DType::bfloat16 ? kernels::kFp8SrcBfloat16 : kernels::kFp8SrcFloat32;
  p.mode = static_cast<std::uint32_t>(s);
  p.scale_stride = (x.cols + B - 1) / B;
  return p;
}

namespace detail {
//! The source row of view row d (Fp8Params::head_rows: the rotary permutation).
inline std::int64_t fp8_view_src_row(const kernels::Fp8Params& p, std::int64_t d) noexcept {
  std::int64_t r = p.row0 + d;
  if (p.head_rows) {
    const std::int64_t h = r / p.head_rows, w = r % p.head_rows, half = p.head_rows / 2;
    r = h * p.head_rows + (w % half) * 2 + w / half;
  }
  return r;
}
}  // namespace detail

//! Quantizes the view `p` (kernels/fp8_abi.hpp: a slice, permuted or not, of a wider source, and
//! its scale groups) on the host: exactly what the kernels write for the same parameters
//! (<weightsync/cuda/fp8_quantize.hpp>, quantize_fp8_view). The load planner's host path.
//! @pre p describes memory that holds it; the mode and source codes are valid.
inline void quantize_fp8_view_host(const kernels::Fp8Params& p) {
  const auto* src = static_cast<const std::byte*>(p.src);
  auto* dst = static_cast<std::uint8_t*>(p.dst);
  const bool bf16 = p.src_type == kernels::kFp8SrcBfloat16;
  const auto at = [&](std::int64_t d, std::int64_t c) {
    return detail::fp8_load_bits(
        src, bf16,
        static_cast<std::size_t>(detail::fp8_view_src_row(p, d) * p.src_cols + p.col0 + c));
  };
  const auto convert = [&](std::int64_t d0, std::int64_t d1, std::int64_t c0, std::int64_t c1,
                           float scale) {
    for (std::int64_t d = d0; d < d1; ++d)
      for (std::int64_t c = c0; c < c1; ++c)
        dst[d * p.cols + c] = detail::fp8_e4m3_from_quotient(
            detail::fp8_div(detail::fp8_f32_from_bits(at(d, c)), scale));
  };
  constexpr std::int64_t B = kernels::kFp8Block;
  switch (p.mode) {
    case kernels::kFp8PerTensor: {
      std::uint32_t amax = 0;
      const auto n = static_cast<std::size_t>(p.src_rows * p.src_cols);
      for (std::size_t i = 0; i < n; ++i)
        amax = std::max(amax, detail::fp8_abs_bits(detail::fp8_load_bits(src, bf16, i)));
      p.scales[0] = detail::fp8_f32_from_bits(detail::fp8_scale_bits(amax, false));
      convert(0, p.rows, 0, p.cols, p.scales[0]);
      return;
    }
    case kernels::kFp8PerChannel:
      for (std::int64_t d = 0; d < p.rows; ++d) {
        // the whole source row: a column shard keeps its row's checkpoint scale
        const std::byte* row =
            src +
            static_cast<std::size_t>(detail::fp8_view_src_row(p, d) * p.src_cols) * (bf16 ? 2 : 4);
        std::uint32_t amax = 0;
        for (std::int64_t c = 0; c < p.src_cols; ++c)
          amax = std::max(amax, detail::fp8_abs_bits(
                                    detail::fp8_load_bits(row, bf16, static_cast<std::size_t>(c))));
        p.scales[d] = detail::fp8_f32_from_bits(detail::fp8_scale_bits(amax, false));
        convert(d, d + 1, 0, p.cols, p.scales[d]);
      }
      return;
    default: {
      const bool ue8m0 = p.mode == kernels::kFp8Block128Ue8m0;
      for (std::int64_t br = 0; br * B < p.rows; ++br)
        for (std::int64_t bc = 0; bc * B < p.cols; ++bc) {
          const std::int64_t d1 = std::min<std::int64_t>(p.rows, br * B + B);
          const std::int64_t c1 = std::min<std::int64_t>(p.cols, bc * B + B);
          std::uint32_t amax = 0;
          for (std::int64_t d = br * B; d < d1; ++d)
            for (std::int64_t c = bc * B; c < c1; ++c)
              amax = std::max(amax, detail::fp8_abs_bits(at(d, c)));
          const float scale = detail::fp8_f32_from_bits(detail::fp8_scale_bits(amax, ue8m0));
          p.scales[br * p.scale_stride + bc] = scale;
          convert(br * B, d1, bc * B, c1, scale);
        }
      return;
    }
  }
}

}  // namespace weightsync
