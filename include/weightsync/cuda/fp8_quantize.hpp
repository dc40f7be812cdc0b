// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! FP8 quantization on a CUDA stream: quantize_fp8(meta, src, scaling, dst, scales, stream)
//! writes what quantize_fp8_host (<weightsync/fp8/quantize.hpp>) writes, bit for bit. The kernels
//! ship as PTX text (detail/fp8_quantize_ptx.hpp, from kernels/fp8_quantize.cu, built
//! for compute_89: they need an sm_89 or later GPU) and are loaded on first use with
//! cudaLibraryLoadData, so including this header needs no nvcc.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/cuda/fp8_quantize.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "weightsync/cuda/check.hpp"
#include "weightsync/cuda/detail/fp8_quantize_ptx.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/fp8/quantize.hpp"
#include "weightsync/kernels/fp8_abi.hpp"

namespace weightsync {
namespace detail {

//! The loaded FP8 kernels (a context-independent library, loaded on first use, for the life of
//! the process).
class Fp8Kernels {
 public:
  static const Fp8Kernels& instance() {
    static Fp8Kernels k;
    return k;
  }
  cudaKernel_t block_bf16 = nullptr, block_f32 = nullptr, block_batch_bf16 = nullptr,
               block_batch_f32 = nullptr, rows = nullptr, tensor_amax = nullptr,
               tensor_finalize = nullptr, tensor_convert = nullptr;

 private:
  Fp8Kernels() {
    cudaLibrary_t lib = nullptr;
    check(cudaLibraryLoadData(&lib, kFp8QuantizePtx, nullptr, nullptr, 0, nullptr, nullptr, 0),
          "cudaLibraryLoadData(ws_fp8)");
    const auto get = [&](cudaKernel_t& k, const char* name) {
      check(cudaLibraryGetKernel(&k, lib, name), "cudaLibraryGetKernel(ws_fp8)");
    };
    get(block_bf16, "ws_fp8_block_bf16");
    get(block_f32, "ws_fp8_block_f32");
    get(block_batch_bf16, "ws_fp8_block_batch_bf16");
    get(block_batch_f32, "ws_fp8_block_batch_f32");
    get(rows, "ws_fp8_rows");
    get(tensor_amax, "ws_fp8_tensor_amax");
    get(tensor_finalize, "ws_fp8_tensor_finalize");
    get(tensor_convert, "ws_fp8_tensor_convert");
  }
};

//! Launches `k` (named `kernel`) for `what` (the tensor or batch, named in the error).
template <class Params>
inline void fp8_launch(cudaKernel_t k, dim3 grid, Params& p, cudaStream_t s, const char* kernel,
                       const std::string& what) {
  void* args[] = {&p};
  const cudaError_t e = cudaLaunchKernel(reinterpret_cast<const void*>(k), grid,
                                         dim3(kernels::kFp8Threads), args, 0, s);
  if (e != cudaSuccess) check(e, cat("cudaLaunchKernel(", kernel, ") for ", what).c_str());
}

//! The block kernels' persistent grid: two CTAs per SM of the current device (what their
//! registers allow; run 70), never more CTAs than blocks.
inline unsigned fp8_block_grid(unsigned long long blocks) {
  int dev = 0, sms = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
        "cudaDeviceGetAttribute(multiProcessorCount)");
  return static_cast<unsigned>(
      std::clamp<unsigned long long>(blocks, 1, 2ull * static_cast<unsigned>(std::max(sms, 1))));
}

}  // namespace detail

//! Quantizes the view `p` (kernels/fp8_abi.hpp; src, dst and scales in device memory) in
//! `stream` order: what quantize_fp8_view_host writes for the same parameters, bit for bit.
//! `what` names the tensor in errors. Nothing is synchronized.
//! @throws cuda_error from the launches.
inline void quantize_fp8_view(kernels::Fp8Params p, cudaStream_t stream,
                              const std::string& what = "fp8 view") {
  using namespace kernels;
  const auto& k = detail::Fp8Kernels::instance();
  const long long n = p.rows * p.cols;
  if (p.mode == kFp8PerTensor) {
    // scales[0] holds the amax bits between the passes; an empty source's amax is 0: scale 1
    const long long ns = p.src_rows * p.src_cols;
    if (const cudaError_t e = cudaMemsetAsync(p.scales, 0, sizeof(float), stream); e != cudaSuccess)
      detail::check(e, detail::cat("cudaMemsetAsync(fp8 amax) for ", what).c_str());
    const auto grid_of = [](long long e) {
      return static_cast<unsigned>(
          std::clamp<long long>((e + 8LL * kFp8Threads - 1) / (8LL * kFp8Threads), 1, 4096));
    };
    if (ns > 0)
      detail::fp8_launch(k.tensor_amax, dim3(grid_of(ns)), p, stream,
                         "ws_fp8_tensor_amax", what);
    detail::fp8_launch(k.tensor_finalize, dim3(1), p, stream,
                       "ws_fp8_tensor_finalize", what);
    if (n > 0)
      detail::fp8_launch(k.tensor_convert, dim3(grid_of(n)), p, stream,
                         "ws_fp8_tensor_convert", what);
    return;
  }
  if (p.mode == kFp8PerChannel) {
    if (p.rows == 0) return;  // no rows, no scales ([rows, 0]: the kernel writes scales of 1)
    const auto grid = static_cast<unsigned>(std::min<long long>(p.rows, 1LL << 20));
    detail::fp8_launch(k.rows, dim3(grid), p, stream, "ws_fp8_rows", what);
    return;
  }
  if (n == 0) return;  // an empty block grid: no scale either
  const auto blocks = static_cast<unsigned long long>((p.cols + kFp8Block - 1) / kFp8Block) *
                      static_cast<unsigned long long>((p.rows + kFp8Block - 1) / kFp8Block);
  detail::fp8_launch(p.src_type == kFp8SrcBfloat16 ? k.block_bf16 : k.block_f32,
                     dim3(detail::fp8_block_grid(blocks)), p, stream,
                     "ws_fp8_block", what);
}

//! Quantizes the views `views` (as quantize_fp8_view each) in `stream` order, with one launch per
//! kernels::kFp8MaxBatch block-mode views of one source type (the load planner's pieces of a
//! chunk: a layer's 384 expert tensors take 3 launches, not 384); per-channel and per-tensor views
//! are launched one by one. `what` names the batch in errors.
inline void quantize_fp8_views(std::span<const kernels::Fp8Params> views, cudaStream_t stream,
                               const std::string& what = "fp8 views") {
  using namespace kernels;
  const auto& k = detail::Fp8Kernels::instance();
  for (const std::uint32_t type : {kFp8SrcBfloat16, kFp8SrcFloat32}) {
    Fp8Batch b;
    b.count = 0;
    b.total_blocks = 0;
    const auto flush = [&] {
      if (b.count == 0) return;
      detail::fp8_launch(type == kFp8SrcBfloat16 ? k.block_batch_bf16 : k.block_batch_f32,
                         dim3(detail::fp8_block_grid(b.total_blocks)), b, stream,
                         "ws_fp8_block_batch", what);
      b.count = 0;
      b.total_blocks = 0;
    };
    for (const Fp8Params& p : views) {
      if (p.src_type != type) continue;
      if (p.mode != kFp8Block128 && p.mode != kFp8Block128Ue8m0) {
        quantize_fp8_view(p, stream, what);
        continue;
      }
      const long long n = p.rows * p.cols;
      if (n == 0) continue;
      const auto blocks = static_cast<unsigned long long>((p.rows + kFp8Block - 1) / kFp8Block) *
                          static_cast<unsigned long long>((p.cols + kFp8Block - 1) / kFp8Block);
      b.total_blocks += blocks;
      b.block_end[b.count] = b.total_blocks;
      b.v[b.count++] = p;
      if (b.count == kFp8MaxBatch) flush();
    }
    flush();
  }
}

//! Quantizes `src` (meta `m`: bfloat16 or float32, device memory) into `dst` (m.numel() bytes of
//! float8_e4m3fn, device memory) and `scales` (fp32, device memory, the element count of
//! fp8_scale_shape(m, s)), in `stream` order. Nothing is synchronized.
//! @throws config_error naming the tensor (dtype, rank); cuda_error from the launches, naming it
//! too.
inline void quantize_fp8(const TensorMeta& m, const void* src, Fp8Scaling s, void* dst,
                         float* scales, cudaStream_t stream) {
  quantize_fp8_view(fp8_whole_view(m, s, src, dst, scales), stream, "'" + m.name + "'");
}

}  // namespace weightsync
