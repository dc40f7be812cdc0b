// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Quantize on load on a CUDA stream: Fp8LoadExecutor<cudaStream_t> runs the load planner's
//! quantize ops (GatherOp::quantize(): a bfloat16 / float32 piece into an FP8 parameter and its
//! scales; <weightsync/loading/planner.hpp>) with the FP8 kernels
//! (<weightsync/cuda/fp8_quantize.hpp>) in stream order: block-scaled pieces batched, one launch
//! per kernels::kFp8MaxBatch of them; per-channel pieces one launch each, per-tensor three. The
//! kernels write the bits quantize_fp8_view_host writes, so the host and CUDA paths of a plan agree
//! bit for bit.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/cuda/fp8_load.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <vector>

#include "weightsync/cuda/fp8_quantize.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/loading/planner.hpp"

namespace weightsync {

//! Runs LoadPlan quantize-on-load ops on a CUDA stream: the views' bytes, the parameters and
//! their scales are device memory.
template <>
struct Fp8LoadExecutor<cudaStream_t> {
  static constexpr bool available = true;
  static void run(std::span<const GatherOp> ops, std::span<const void* const> srcs,
                  cudaStream_t s) {
    if (srcs.size() != ops.size())
      throw config_error("srcs", detail::cat(srcs.size(), " sources for ", ops.size(), " ops"));
    views_.clear();
    for (std::size_t i = 0; i < ops.size(); ++i)
      views_.push_back(detail::fp8_load_view(ops[i], srcs[i]));
    quantize_fp8_views(views_, s, "quantize on load");
  }

 private:
  static inline thread_local std::vector<kernels::Fp8Params> views_;
};

}  // namespace weightsync
