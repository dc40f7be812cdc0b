// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! A gather/scatter copy kernel for packing and unpacking: one launch moves up to
//! kernels::kMaxCopyDescs (960) pieces of any size and alignment, using the SMs at device-memory
//! bandwidth, where copy engines pay a fixed cost per piece. The kernel ships as PTX text
//! (detail/batched_copy_ptx.hpp, generated from kernels/batched_copy.cu; its ABI:
//! <weightsync/kernels/batched_copy_abi.hpp>) and is loaded at run time with cudaLibraryLoadData,
//! so that including this header needs no nvcc. If it cannot be loaded, callers fall back to copy
//! engines.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/cuda/batched_copy.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "weightsync/cuda/check.hpp"
#include "weightsync/cuda/detail/batched_copy_ptx.hpp"
#include "weightsync/kernels/batched_copy_abi.hpp"
#include "weightsync/log.hpp"

namespace weightsync::detail {

//! The loaded kernel (context-independent library), or null when loading failed (logged once).
class BatchedCopyKernel {
 public:
  static const BatchedCopyKernel* instance() {
    static BatchedCopyKernel k;
    return k.kernel_ ? &k : nullptr;
  }

  //! Copies `count` pieces on `stream`; `sms` is the device's multiprocessor count.
  void launch(void* const* dst, const void* const* src, const std::size_t* n, std::size_t count,
              cudaStream_t stream, int sms) const {
    kernels::CopyBatchParams p;
    std::size_t i = 0;
    while (i < count) {
      p.count = 0;
      p.total_tiles = 0;
      for (; i < count && p.count < kernels::kMaxCopyDescs; ++i) {
        if (n[i] == 0) continue;
        p.total_tiles += (n[i] + kernels::kCopyTileBytes - 1) / kernels::kCopyTileBytes;
        p.d[p.count++] =
            kernels::CopyDesc{static_cast<const unsigned char*>(src[i]),
                              static_cast<unsigned char*>(dst[i]), n[i], p.total_tiles};
      }
      if (p.count == 0) continue;
      // One short-lived block per tile (not a persistent grid), so that the blocks of NCCL's
      // kernels, on a higher-priority stream, get SMs as soon as they are launched.
      (void)sms;
      const auto grid = static_cast<unsigned>(std::min<unsigned long long>(p.total_tiles, 0x7fffffffull));
      void* args[] = {&p};
      check(cudaLaunchKernel(reinterpret_cast<const void*>(kernel_), dim3(grid),
                             dim3(kernels::kCopyThreads), args, 0, stream),
            "cudaLaunchKernel(ws_batched_copy)");
    }
  }

 private:
  BatchedCopyKernel() {
    if (std::getenv("WEIGHTSYNC_COPY") && std::string(std::getenv("WEIGHTSYNC_COPY")) == "ce") return;
    cudaLibrary_t lib = nullptr;
    auto st = cudaLibraryLoadData(&lib, kBatchedCopyPtx, nullptr, nullptr, 0, nullptr, nullptr, 0);
    if (st == cudaSuccess) st = cudaLibraryGetKernel(&kernel_, lib, "ws_batched_copy");
    if (st != cudaSuccess) {
      (void)cudaGetLastError();
      kernel_ = nullptr;
      log(LogLevel::warning, std::string("batched copy kernel unavailable (") +
                                 cudaGetErrorName(st) + "); packing falls back to copy engines");
    }
    // The library stays loaded for the life of the process (one per process, like a module).
  }
  cudaKernel_t kernel_ = nullptr;
};

}  // namespace weightsync::detail
