// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Source of the PTX embedded in include/weightsync/cuda/detail/batched_copy_ptx.hpp. Regenerate
// with kernels/embed_ptx.sh after any change to it or to
// include/weightsync/kernels/batched_copy_abi.hpp, the ABI shared with the launcher
// (<weightsync/cuda/batched_copy.hpp>) (a CTest checks that they agree).
//
// One launch copies up to kMaxCopyDescs (src, dst, bytes) pieces. Work is cut into 64 KiB tiles
// numbered across all pieces; blocks take tiles grid-stride and find their piece by binary search
// over the cumulative tile counts. The descriptor table travels as a __grid_constant__ kernel
// parameter (<= 32 KiB, CUDA >= 12.1), so no staging buffer or host sync is needed.
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

extern "C" __global__ void __launch_bounds__(wk::kCopyThreads)
    ws_batched_copy(const __grid_constant__ wk::CopyBatchParams b) {
  for (unsigned long long t = blockIdx.x; t < b.total_tiles; t += gridDim.x) {
    unsigned lo = 0, hi = b.count - 1;
    while (lo < hi) {
      const unsigned mid = (lo + hi) / 2;
      if (b.d[mid].tile_end > t) hi = mid;
      else lo = mid + 1;
    }
    const unsigned long long first = lo ? b.d[lo - 1].tile_end : 0;
    const unsigned long long off = (t - first) * wk::kCopyTileBytes;
    const unsigned long long left = b.d[lo].bytes - off;
    const unsigned long long n = left < wk::kCopyTileBytes ? left : wk::kCopyTileBytes;
    const unsigned char* s = b.d[lo].src + off;
    unsigned char* q = b.d[lo].dst + off;
    const unsigned long long align = reinterpret_cast<unsigned long long>(s) |
                                     reinterpret_cast<unsigned long long>(q) | n;
    if ((align & 15) == 0) copy_vec<uint4>(s, q, n);
    else if ((align & 7) == 0) copy_vec<uint2>(s, q, n);
    else if ((align & 3) == 0) copy_vec<unsigned int>(s, q, n);
    else if ((align & 1) == 0) copy_vec<unsigned short>(s, q, n);
    else copy_vec<unsigned char>(s, q, n);
  }
}
