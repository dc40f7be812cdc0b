// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The load planner's gathers (slice, rotary permute, cast) on a CUDA stream: one launch of a
//! batched kernel per load() call (per received chunk), never a launch per tensor. The kernel
//! ships as PTX text (detail/gather_ptx.hpp, generated from kernels/gather.cu; its ABI:
//! <weightsync/kernels/gather_abi.hpp>) and is loaded at run time with cudaLibraryLoadData, so
//! including this header needs no nvcc. It copies elements of any size (1, 2, 4, 8 bytes, from
//! sources of any alignment) and converts among float32 / float16 / bfloat16 with the host path's
//! own bit-level code. Including it enables LoadPlan::load on cudaStream_t
//! (GatherExecutor<cudaStream_t>).

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/cuda/gather.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <utility>

#include "weightsync/cuda/check.hpp"
#include "weightsync/cuda/detail/gather_ptx.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/kernels/gather_abi.hpp"
#include "weightsync/loading/cast.hpp"
#include "weightsync/loading/planner.hpp"

namespace weightsync {
namespace detail {

//! The kernel's element codes (kernels/gather_abi.hpp) for a gather's source and destination
//! dtypes: a conversion among float32, float16 and bfloat16 when they differ; a plain copy of
//! 1-, 2-, 4- or 8-byte elements when they are equal (any dtype). These are exactly the pairs
//! plan_loading() accepts, so a planned gather always runs.
//! @throws config_error naming both dtypes for any other pair.
inline std::pair<unsigned, unsigned> gather_type_codes(DType src, DType dst) {
  if (src == dst) {
    switch (dtype_size(src)) {
      case 1:
        return {kernels::kGatherCopy1, kernels::kGatherCopy1};
      case 2:
        return {kernels::kGatherCopy2, kernels::kGatherCopy2};
      case 4:
        return {kernels::kGatherCopy4, kernels::kGatherCopy4};
      case 8:
        return {kernels::kGatherCopy8, kernels::kGatherCopy8};
      default:
        break;
    }
  } else if (castable_dtype(src) && castable_dtype(dst)) {
    const auto code = [](DType d) -> unsigned {
      return d == DType::float32   ? kernels::kGatherFloat32
             : d == DType::float16 ? kernels::kGatherFloat16
                                   : kernels::kGatherBfloat16;
    };
    return {code(src), code(dst)};
  }
  throw config_error(
      "dtype", cat("the CUDA gather cannot convert ", dtype_name(src), " to ", dtype_name(dst)));
}

//! The loaded gather kernel (context-independent library), loaded on first use.
class GatherKernel {
 public:
  static const GatherKernel& instance() {
    static GatherKernel k;
    return k;
  }

  //! Launches the gathers `ops` (sources `srcs`), kernels::kMaxGathers per launch. Every op is
  //! checked before the first launch: an op the kernel cannot run writes nothing at all.
  void launch(std::span<const GatherOp> ops, std::span<const void* const> srcs,
              cudaStream_t stream) const {
    if (srcs.size() != ops.size())
      throw config_error("srcs", cat(srcs.size(), " sources for ", ops.size(), " gathers"));
    for (const GatherOp& o : ops) {
      (void)gather_type_codes(o.src_dtype, o.dst_dtype);
      if (o.rows < 0 || o.cols < 0 || o.src_cols < 0 || o.row0 < 0 || o.col0 < 0 ||
          o.head_rows < 0 || (o.head_rows % 2) != 0)
        throw config_error("gather", "negative extent or odd rotary head");
    }
    kernels::GatherBatchParams p;
    std::size_t i = 0;
    while (i < ops.size()) {
      p.count = 0;
      p.total_tiles = 0;
      for (; i < ops.size() && p.count < kernels::kMaxGathers; ++i) {
        const GatherOp& o = ops[i];
        const auto n =
            static_cast<unsigned long long>(o.rows) * static_cast<unsigned long long>(o.cols);
        if (n == 0) continue;
        p.total_tiles += (n + kernels::kGatherTile - 1) / kernels::kGatherTile;
        const auto [st, dt] = gather_type_codes(o.src_dtype, o.dst_dtype);
        p.g[p.count++] = kernels::GatherDesc{static_cast<const unsigned char*>(srcs[i]),
                                             reinterpret_cast<unsigned char*>(o.dst),
                                             o.src_cols,
                                             o.rows,
                                             o.cols,
                                             o.row0,
                                             o.col0,
                                             o.head_rows,
                                             p.total_tiles,
                                             st,
                                             dt};
      }
      if (p.count == 0) continue;
      const auto grid =
          static_cast<unsigned>(std::min<unsigned long long>(p.total_tiles, 0x7fffffffull));
      void* args[] = {&p};
      check(cudaLaunchKernel(reinterpret_cast<const void*>(kernel_), dim3(grid),
                             dim3(kernels::kGatherThreads), args, 0, stream),
            "cudaLaunchKernel(ws_gather)");
    }
  }

 private:
  GatherKernel() {
    cudaLibrary_t lib = nullptr;
    check(cudaLibraryLoadData(&lib, kGatherPtx, nullptr, nullptr, 0, nullptr, nullptr, 0),
          "cudaLibraryLoadData(ws_gather)");
    check(cudaLibraryGetKernel(&kernel_, lib, "ws_gather"), "cudaLibraryGetKernel(ws_gather)");
    // The library stays loaded for the life of the process (one per process, like a module).
  }
  cudaKernel_t kernel_ = nullptr;
};

}  // namespace detail

//! Runs LoadPlan gathers on a CUDA stream: the views' bytes and the parameters are device memory.
template <>
struct GatherExecutor<cudaStream_t> {
  static constexpr bool available = true;
  static void run(std::span<const GatherOp> ops, std::span<const void* const> srcs,
                  cudaStream_t s) {
    detail::GatherKernel::instance().launch(ops, srcs, s);
  }
};

}  // namespace weightsync
