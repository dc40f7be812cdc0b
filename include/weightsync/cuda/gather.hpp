// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The load planner's gathers (slice, rotary permute, cast) on a CUDA stream: one launch of a
//! batched kernel per load() call (per received chunk), never a launch per tensor. The kernel
//! ships as PTX text (detail/gather_ptx.hpp, generated from scripts/kernels/gather.cu) and is
//! loaded at run time with cudaLibraryLoadData, so including this header needs no nvcc.
//! Including it enables LoadPlan::load on cudaStream_t (GatherExecutor<cudaStream_t>).

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/cuda/gather.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>

#include "weightsync/cuda/check.hpp"
#include "weightsync/cuda/detail/gather_ptx.hpp"
#include "weightsync/error.hpp"
#include "weightsync/loading/planner.hpp"

namespace weightsync {
namespace detail {

inline constexpr std::size_t kMaxGathers = 384;          // must match WS_MAX_GATHERS
inline constexpr unsigned long long kGatherTile = 8192;  // must match WS_GATHER_TILE

struct GatherDesc {  // must match WsGather
  const void* src;
  void* dst;
  long long src_cols, rows, cols, row0, col0, head_rows;
  unsigned long long tile_end;
  unsigned int src_type, dst_type;
};
struct GatherBatchParams {  // must match WsGatherBatch
  unsigned long long total_tiles;
  unsigned int count;
  unsigned int pad;
  GatherDesc g[kMaxGathers];
};
static_assert(sizeof(GatherDesc) == 80 && sizeof(GatherBatchParams) == 16 + 80 * kMaxGathers);

//! The kernel's code for a dtype: 0 float32 (or any 4-byte copy), 1 float16, 2 bfloat16 (or any
//! 2-byte copy). @throws config_error for a gather it cannot run.
inline unsigned gather_type_code(DType d, DType other) {
  if (d == DType::float32) return 0;
  if (d == DType::float16) return 1;
  if (d == DType::bfloat16) return 2;
  if (d == other && dtype_size(d) == 4) return 0;
  if (d == other && dtype_size(d) == 2) return 2;
  throw config_error("dtype",
                     "the CUDA gather handles float32/float16/bfloat16 casts and 2- or "
                     "4-byte copies, not " +
                         std::string(dtype_name(d)));
}

//! The loaded gather kernel (context-independent library), loaded on first use.
class GatherKernel {
 public:
  static const GatherKernel& instance() {
    static GatherKernel k;
    return k;
  }

  void launch(std::span<const GatherOp> ops, std::span<const void* const> srcs,
              cudaStream_t stream) const {
    GatherBatchParams p;
    std::size_t i = 0;
    while (i < ops.size()) {
      p.count = 0;
      p.total_tiles = 0;
      for (; i < ops.size() && p.count < kMaxGathers; ++i) {
        const GatherOp& o = ops[i];
        const auto n =
            static_cast<unsigned long long>(o.rows) * static_cast<unsigned long long>(o.cols);
        if (n == 0) continue;
        p.total_tiles += (n + kGatherTile - 1) / kGatherTile;
        p.g[p.count++] = GatherDesc{srcs[i],
                                    o.dst,
                                    o.src_cols,
                                    o.rows,
                                    o.cols,
                                    o.row0,
                                    o.col0,
                                    o.head_rows,
                                    p.total_tiles,
                                    gather_type_code(o.src_dtype, o.dst_dtype),
                                    gather_type_code(o.dst_dtype, o.src_dtype)};
      }
      if (p.count == 0) continue;
      const auto grid =
          static_cast<unsigned>(std::min<unsigned long long>(p.total_tiles, 0x7fffffffull));
      void* args[] = {&p};
      check(cudaLaunchKernel(reinterpret_cast<const void*>(kernel_), dim3(grid), dim3(256), args, 0,
                             stream),
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
