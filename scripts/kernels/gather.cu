// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Source of the PTX embedded in include/weightsync/cuda/detail/gather_ptx.hpp. Regenerate with
// `bash scripts/kernels/embed_ptx.sh nvcc include/weightsync/cuda/detail/gather_ptx.hpp
// scripts/kernels/gather.cu kGatherPtx` after any change (a CTest checks that they agree).
//
// One launch runs up to WS_MAX_GATHERS load-planner gathers (weightsync::GatherOp): for each,
// out[d][c] = cast(src[perm(row0 + d)][col0 + c]) for d < rows, c < cols, where perm is the
// rotary permutation of w.view(H, R/H/2, 2, C).transpose(1, 2) (identity when head_rows == 0).
// Work is cut into tiles of WS_GATHER_TILE output elements numbered across all gathers; blocks
// take tiles grid-stride and find their gather by binary search over the cumulative tile counts.
// dtype codes: 0 float32, 1 float16, 2 bfloat16 (same code on both sides: a plain copy of 4 or 2
// bytes, which also serves any other dtype of that size). Conversions round to nearest even,
// exactly as the host path (weightsync/loading/cast.hpp) does.
#include <cuda_fp16.h>

#define WS_MAX_GATHERS 384
#define WS_GATHER_TILE 8192ull

struct WsGather {
  const unsigned char* src;
  unsigned char* dst;
  long long src_cols, rows, cols, row0, col0, head_rows;
  unsigned long long tile_end;  // cumulative tiles up to and including this gather
  unsigned int src_type, dst_type;
};

struct WsGatherBatch {
  unsigned long long total_tiles;
  unsigned int count;
  unsigned int pad;
  WsGather g[WS_MAX_GATHERS];
};

__device__ __forceinline__ float ws_load(const unsigned char* p, unsigned t) {
  if (t == 0) return *reinterpret_cast<const float*>(p);
  const unsigned short h = *reinterpret_cast<const unsigned short*>(p);
  if (t == 2) return __uint_as_float(static_cast<unsigned>(h) << 16);
  return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ void ws_store(unsigned char* p, unsigned t, float f) {
  if (t == 0) {
    *reinterpret_cast<float*>(p) = f;
    return;
  }
  unsigned short h;
  if (t == 2) {
    const unsigned u = __float_as_uint(f);
    h = (u & 0x7fffffffu) > 0x7f800000u ? static_cast<unsigned short>((u >> 16) | 0x40u)
                                         : static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  } else {
    h = __half_as_ushort(__float2half_rn(f));
  }
  *reinterpret_cast<unsigned short*>(p) = h;
}

extern "C" __global__ void __launch_bounds__(256) ws_gather(const __grid_constant__ WsGatherBatch b) {
  for (unsigned long long t = blockIdx.x; t < b.total_tiles; t += gridDim.x) {
    unsigned lo = 0, hi = b.count - 1;
    while (lo < hi) {
      const unsigned mid = (lo + hi) / 2;
      if (b.g[mid].tile_end > t) hi = mid;
      else lo = mid + 1;
    }
    const WsGather& g = b.g[lo];
    const unsigned long long first = lo ? b.g[lo - 1].tile_end : 0;
    const unsigned long long begin = (t - first) * WS_GATHER_TILE;
    const unsigned long long total = static_cast<unsigned long long>(g.rows) * g.cols;
    const unsigned long long end = begin + WS_GATHER_TILE < total ? begin + WS_GATHER_TILE : total;
    const unsigned ss = g.src_type == 0 ? 4 : 2, ds = g.dst_type == 0 ? 4 : 2;
    for (unsigned long long e = begin + threadIdx.x; e < end; e += blockDim.x) {
      const long long d = static_cast<long long>(e / g.cols), c = static_cast<long long>(e % g.cols);
      long long r = g.row0 + d;
      if (g.head_rows) {
        const long long h = r / g.head_rows, w = r % g.head_rows, half = g.head_rows / 2;
        r = h * g.head_rows + (w % half) * 2 + w / half;
      }
      const unsigned char* s = g.src + (r * g.src_cols + g.col0 + c) * ss;
      unsigned char* q = g.dst + e * ds;
      if (g.src_type == g.dst_type) {
        if (ss == 4) *reinterpret_cast<unsigned*>(q) = *reinterpret_cast<const unsigned*>(s);
        else *reinterpret_cast<unsigned short*>(q) = *reinterpret_cast<const unsigned short*>(s);
      } else {
        ws_store(q, g.dst_type, ws_load(s, g.src_type));
      }
    }
  }
}
