// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Source of the PTX embedded in weightsync/cuda/detail/batched_copy_ptx.hpp, which the build
// writes (nvcc -ptx, cmake/WeightsyncPtx.cmake) and rewrites after any change to it or to
// include/weightsync/kernels/batched_copy_abi.hpp, the ABI shared with the launcher
// (<weightsync/cuda/batched_copy.hpp>).
//
// One launch copies up to kMaxCopyDescs (src, dst, bytes) pieces. Work is cut into 64 KiB tiles
// numbered across all pieces; blocks take tiles grid-stride and find their piece by binary search
// over the cumulative tile counts. The descriptors travel as a __grid_constant__ kernel parameter
// (<= 32 KiB, CUDA >= 12.1; a small block of 16 for a few pieces), or lie in device memory
// (ws_batched_copy_table): a launch's parameters are copied with it, and 30 KiB of them cost more
// host time than the copies of a small sync (run 109).
#include <cstdint>

#include "../include/weightsync/kernels/batched_copy_abi.hpp"

namespace wk = weightsync::kernels;

template <class V>
__device__ __forceinline__ void copy_vec(const unsigned char* s, unsigned char* q, unsigned long long n) {
  const V* sv = reinterpret_cast<const V*>(s);
  V* qv = reinterpret_cast<V*>(q);
  const unsigned long long m = n / sizeof(V);
  unsigned long long i = threadIdx.x;
  // Four independent loads in flight per thread.
  for (; i + 3 * blockDim.x < m; i += 4 * blockDim.x) {
    const V a = sv[i], b = sv[i + blockDim.x], c = sv[i + 2 * blockDim.x], d = sv[i + 3 * blockDim.x];
    qv[i] = a;
    qv[i + blockDim.x] = b;
    qv[i + 2 * blockDim.x] = c;
    qv[i + 3 * blockDim.x] = d;
  }
  for (; i < m; i += blockDim.x) qv[i] = sv[i];
}

// Copies tile t of the pieces d[0..count) (their cumulative tile counts in tile_end).
__device__ __forceinline__ void copy_tile(const wk::CopyDesc* d, unsigned count, unsigned long long t) {
  unsigned lo = 0, hi = count - 1;
  while (lo < hi) {
    const unsigned mid = (lo + hi) / 2;
    if (d[mid].tile_end > t) hi = mid;
    else lo = mid + 1;
  }
  const unsigned long long first = lo ? d[lo - 1].tile_end : 0;
  const unsigned long long off = (t - first) * wk::kCopyTileBytes;
  const unsigned long long left = d[lo].bytes - off;
  const unsigned long long n = left < wk::kCopyTileBytes ? left : wk::kCopyTileBytes;
  const unsigned char* s = d[lo].src + off;
  unsigned char* q = d[lo].dst + off;
  const unsigned long long align = reinterpret_cast<unsigned long long>(s) |
                                   reinterpret_cast<unsigned long long>(q) | n;
  if ((align & 15) == 0) copy_vec<uint4>(s, q, n);
  else if ((align & 7) == 0) copy_vec<uint2>(s, q, n);
  else if ((align & 3) == 0) copy_vec<unsigned int>(s, q, n);
  else if ((align & 1) == 0) copy_vec<unsigned short>(s, q, n);
  else copy_vec<unsigned char>(s, q, n);
}

extern "C" __global__ void __launch_bounds__(wk::kCopyThreads)
    ws_batched_copy(const __grid_constant__ wk::CopyBatchParams b) {
  for (unsigned long long t = blockIdx.x; t < b.total_tiles; t += gridDim.x) copy_tile(b.d, b.count, t);
}

// A few pieces, in a parameter block of 528 bytes.
extern "C" __global__ void __launch_bounds__(wk::kCopyThreads)
    ws_batched_copy_small(const __grid_constant__ wk::CopyBatchSmallParams b) {
  for (unsigned long long t = blockIdx.x; t < b.total_tiles; t += gridDim.x) copy_tile(b.d, b.count, t);
}

// Any number of pieces, from a table in device memory.
extern "C" __global__ void __launch_bounds__(wk::kCopyThreads)
    ws_batched_copy_table(const __grid_constant__ wk::CopyTableParams b) {
  for (unsigned long long t = blockIdx.x; t < b.total_tiles; t += gridDim.x) copy_tile(b.d, b.count, t);
}
