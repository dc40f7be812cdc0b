// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! CudaFp8Quantizer: the Fp8Source policy (<weightsync/fp8/source.hpp>) for device tensors, so
//! that `Fp8Source<S, CudaFp8Quantizer>` sends a CUDA trainer's bf16 weights as FP8 over the nccl
//! backend. Its arenas are device memory; each tensor is quantized by the kernels
//! (<weightsync/cuda/fp8_quantize.hpp>) on `stream`, and copies into the ring with
//! cudaMemcpyAsync on it; finish() synchronizes it: the pipeline orders its reads after the
//! trainer's stream once, at the start of a transfer, so a tensor must be complete when it is
//! handed over. Fp8Source calls finish() once per chunk in ring mode (once per tensor with
//! arenas). Only that stream is waited for; the broadcasts of earlier chunks keep running on the
//! pipeline's streams meanwhile.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/cuda/fp8_source.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>

#include "weightsync/cuda/check.hpp"
#include "weightsync/cuda/device_buffer.hpp"
#include "weightsync/cuda/fp8_quantize.hpp"
#include "weightsync/fp8/source.hpp"

namespace weightsync {

struct CudaFp8Quantizer {
  using Buffer = DeviceBuffer;
  //! Where the kernels run: the stream that produced the weights, or one ordered after it.
  cudaStream_t stream = nullptr;
  //! The device of the arenas (-1: the current device).
  int device = -1;

  Buffer alloc(std::size_t bytes) const {
    int d = device;
    if (d < 0) detail::check(cudaGetDevice(&d), "cudaGetDevice");
    return DeviceBuffer(bytes, d);
  }
  static std::byte* data(Buffer& b) { return b.data(); }
  void quantize(const TensorMeta& m, const void* src, Fp8Scaling s, void* dst,
                float* scales) const {
    quantize_fp8(m, src, s, dst, scales, stream);
  }
  //! Block-scaled views batched (quantize_fp8_views).
  void quantize_views(std::span<const kernels::Fp8Params> views) const {
    quantize_fp8_views(views, stream, "fp8 source");
  }
  void copy(void* dst, const void* src, std::size_t n) const {
    if (n)
      detail::check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream),
                    "cudaMemcpyAsync(fp8 source)");
  }
  void finish() const {
    detail::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize(fp8 quantize)");
  }
  void operator()(const TensorMeta& m, const void* src, Fp8Scaling s, void* dst,
                  float* scales) const {
    quantize(m, src, s, dst, scales);
    finish();
  }
};

}  // namespace weightsync
