// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The chunk digest (detail/digest.hpp) on a CUDA stream: one launch of the digest kernel per
//! chunk (kernels::kMaxDigestPieces pieces per launch), whose result lands in device memory, so
//! that a producer can write it into its status frame and a consumer compare it without a host
//! round trip in the middle of a transfer. The kernel ships as PTX text (detail/digest_ptx.hpp,
//! generated from kernels/digest.cu; its ABI: <weightsync/kernels/digest_abi.hpp>) and is loaded
//! at run time with cudaLibraryLoadData, so including this header needs no nvcc.

#include "weightsync/config.hpp"
#if !WEIGHTSYNC_HAS_CUDA
#error "<weightsync/cuda/digest.hpp> needs the CUDA runtime (WEIGHTSYNC_HAS_CUDA=0)"
#endif

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "weightsync/cuda/check.hpp"
#include "weightsync/cuda/detail/digest_ptx.hpp"
#include "weightsync/detail/digest.hpp"
#include "weightsync/kernels/digest_abi.hpp"

namespace weightsync::detail {

//! The loaded digest kernel (context-independent library), loaded on first use.
class DigestKernel {
 public:
  //! @throws cuda_error when the kernel cannot be loaded.
  static const DigestKernel& instance() {
    static DigestKernel k;
    return k;
  }

  //! Enqueues on `stream`: sums[0..zero) <- 0, then each of the `count` pieces (device
  //! memory) digested into sums[piece.sum] (device memory): after it, sums[i] is the digest of
  //! the chunk of the pieces that name i (a chunk without bytes: 0), when every piece of that
  //! chunk was in this call or in calls after the one that zeroed it.
  //! A piece with copy_to is also copied there, from the bytes it digests (what was read is
  //! what was digested): one read for both.
  void launch(const DigestSpan* spans, std::size_t count, std::uint64_t* sums, std::size_t zero,
              cudaStream_t stream) const {
    if (zero > 0)
      check(cudaMemsetAsync(sums, 0, zero * sizeof(std::uint64_t), stream),
            "cudaMemsetAsync(digest)");
    kernels::DigestParams p;
    p.sums = reinterpret_cast<unsigned long long*>(sums);
    p.pad = 0;
    std::size_t i = 0;
    while (i < count) {
      p.count = 0;
      p.total_blocks = 0;
      for (; i < count && p.count < kernels::kMaxDigestPieces; ++i) {
        if (spans[i].bytes == 0) continue;
        p.total_blocks +=
            (spans[i].bytes + kernels::kDigestBlockBytes - 1) / kernels::kDigestBlockBytes;
        p.p[p.count++] = kernels::DigestPiece{static_cast<const unsigned char*>(spans[i].data),
                                              static_cast<unsigned char*>(spans[i].copy_to),
                                              spans[i].bytes,
                                              p.total_blocks,
                                              spans[i].ordinal,
                                              spans[i].sum};
      }
      if (p.count == 0) break;
      // One short-lived CTA per block (not a persistent grid), so that the blocks of NCCL's
      // kernels, on a higher-priority stream, get SMs as soon as they are launched.
      const auto grid =
          static_cast<unsigned>(std::min<unsigned long long>(p.total_blocks, 0x7fffffffull));
      void* args[] = {&p};
      check(cudaLaunchKernel(reinterpret_cast<const void*>(kernel_), dim3(grid),
                             dim3(kernels::kDigestLanes), args, 0, stream),
            "cudaLaunchKernel(ws_digest)");
    }
  }

 private:
  DigestKernel() {
    cudaLibrary_t lib = nullptr;
    check(cudaLibraryLoadData(&lib, kDigestPtx, nullptr, nullptr, 0, nullptr, nullptr, 0),
          "cudaLibraryLoadData(ws_digest)");
    check(cudaLibraryGetKernel(&kernel_, lib, "ws_digest"), "cudaLibraryGetKernel(ws_digest)");
    // The library stays loaded for the life of the process (one per process, like a module).
  }
  cudaKernel_t kernel_ = nullptr;
};

}  // namespace weightsync::detail
