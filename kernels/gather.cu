// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Source of the PTX embedded in weightsync/cuda/detail/gather_ptx.hpp, which the build writes
// (nvcc -ptx, cmake/WeightsyncPtx.cmake) and rewrites after any change to it, to
// include/weightsync/detail/float_bits.hpp or to include/weightsync/kernels/gather_abi.hpp.
// gather_abi.hpp is the ABI shared with the launcher
// (<weightsync/cuda/gather.hpp>): the parameter block, its limits and the element codes.
//
// One launch runs up to kMaxGathers load-planner gathers (weightsync::GatherOp): for each,
// out[d][c] = cast(src[perm(row0 + d)][col0 + c]) for d < rows, c < cols, where perm is the
// rotary permutation of w.view(H, R/H/2, 2, C).transpose(1, 2) (identity when head_rows == 0).
// Work is cut into tiles of kGatherTile output elements numbered across all gathers; blocks
// take tiles grid-stride and find their gather by binary search over the cumulative tile counts.
// Element codes: kGatherFloat32, kGatherFloat16, kGatherBfloat16 (converted when the two sides
// differ), kGatherCopy1/2/4/8 (elements of 1, 2, 4, 8 bytes, the same code on both sides: a
// plain copy, for any dtype). The conversions are the host path's own integer code
// (weightsync/detail/float_bits.hpp), so the device writes exactly the host's bits, NaNs
// included. Packed chunks hold tensors back to back, so a source need not be aligned to its
// element size: such a gather moves bytes one at a time.
#include "../include/weightsync/detail/float_bits.hpp"
#include "../include/weightsync/kernels/gather_abi.hpp"

namespace wk = weightsync::kernels;
static_assert(wk::kGatherTile % 16 == 0, "tiles start at whole 16-byte vectors (the copy path)");

// Element bytes of a code.
__device__ __forceinline__ unsigned ws_size(unsigned t) {
  return t == wk::kGatherCopy1                                ? 1u
         : t == wk::kGatherCopy8                              ? 8u
         : (t == wk::kGatherFloat32 || t == wk::kGatherCopy4) ? 4u
                                                              : 2u;
}

__device__ __forceinline__ unsigned long long ws_load(const unsigned char* p, unsigned n,
                                                      bool aligned) {
  if (aligned) {
    if (n == 1) return *p;
    if (n == 2) return *reinterpret_cast<const unsigned short*>(p);
    if (n == 4) return *reinterpret_cast<const unsigned*>(p);
    return *reinterpret_cast<const unsigned long long*>(p);
  }
  unsigned long long v = 0;
  for (unsigned i = 0; i < n; ++i) v |= static_cast<unsigned long long>(p[i]) << (8 * i);
  return v;
}

__device__ __forceinline__ void ws_store(unsigned char* p, unsigned n, bool aligned,
                                         unsigned long long v) {
  if (aligned) {
    if (n == 1)
      *p = static_cast<unsigned char>(v);
    else if (n == 2)
      *reinterpret_cast<unsigned short*>(p) = static_cast<unsigned short>(v);
    else if (n == 4)
      *reinterpret_cast<unsigned*>(p) = static_cast<unsigned>(v);
    else
      *reinterpret_cast<unsigned long long*>(p) = v;
    return;
  }
  for (unsigned i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

__device__ __forceinline__ unsigned long long ws_convert(unsigned long long v, unsigned from,
                                                         unsigned to) {
  using namespace weightsync::detail;
  const unsigned short h = static_cast<unsigned short>(v);
  const unsigned u = from == wk::kGatherFloat32   ? static_cast<unsigned>(v)
                     : from == wk::kGatherFloat16 ? fp16_bits_to_f32(h)
                                                  : bf16_bits_to_f32(h);
  return to == wk::kGatherFloat32   ? u
         : to == wk::kGatherFloat16 ? f32_bits_to_fp16(u)
                                    : f32_bits_to_bf16(u);
}

extern "C" __global__ void __launch_bounds__(wk::kGatherThreads)
    ws_gather(const __grid_constant__ wk::GatherBatchParams b) {
  for (unsigned long long t = blockIdx.x; t < b.total_tiles; t += gridDim.x) {
    unsigned lo = 0, hi = b.count - 1;
    while (lo < hi) {
      const unsigned mid = (lo + hi) / 2;
      if (b.g[mid].tile_end > t)
        hi = mid;
      else
        lo = mid + 1;
    }
    const wk::GatherDesc& g = b.g[lo];
    const unsigned long long first = lo ? b.g[lo - 1].tile_end : 0;
    const unsigned long long begin = (t - first) * wk::kGatherTile;
    const unsigned long long total = static_cast<unsigned long long>(g.rows) * g.cols;
    const unsigned long long end =
        begin + wk::kGatherTile < total ? begin + wk::kGatherTile : total;
    const unsigned ss = ws_size(g.src_type), ds = ws_size(g.dst_type);
    // Element offsets are multiples of the element size: the base addresses decide alignment.
    const bool src_aligned = (reinterpret_cast<unsigned long long>(g.src) & (ss - 1)) == 0;
    const bool dst_aligned = (reinterpret_cast<unsigned long long>(g.dst) & (ds - 1)) == 0;
    const bool copy = g.src_type == g.dst_type;
    // A plain copy whose rows are whole 16-byte vectors on both sides (every slice of a bf16
    // weight with a multiple of 8 columns at a multiple of 8): 16 bytes per load and store, one
    // division per vector instead of per element. Tiles start at multiples of kGatherTile
    // elements, so at whole vectors; the permutation moves whole rows, so it applies unchanged.
    const unsigned long long row_bytes = static_cast<unsigned long long>(g.cols) * ss;
    if (copy && ((reinterpret_cast<unsigned long long>(g.src) | reinterpret_cast<unsigned long long>(g.dst) |
                  static_cast<unsigned long long>(g.src_cols) * ss | static_cast<unsigned long long>(g.col0) * ss |
                  row_bytes) & 15ull) == 0) {
      for (unsigned long long v = begin * ss / 16 + threadIdx.x; v < end * ss / 16; v += blockDim.x) {
        const unsigned long long o = v * 16;
        const long long d = static_cast<long long>(o / row_bytes);
        const unsigned long long cb = o % row_bytes;
        long long r = g.row0 + d;
        if (g.head_rows) {
          const long long h = r / g.head_rows, w = r % g.head_rows, half = g.head_rows / 2;
          r = h * g.head_rows + (w % half) * 2 + w / half;
        }
        const uint4 x = *reinterpret_cast<const uint4*>(g.src + (r * g.src_cols + g.col0) * ss + cb);
        *reinterpret_cast<uint4*>(g.dst + o) = x;
      }
      continue;
    }
    for (unsigned long long e = begin + threadIdx.x; e < end; e += blockDim.x) {
      const long long d = static_cast<long long>(e / g.cols),
                      c = static_cast<long long>(e % g.cols);
      long long r = g.row0 + d;
      if (g.head_rows) {
        const long long h = r / g.head_rows, w = r % g.head_rows, half = g.head_rows / 2;
        r = h * g.head_rows + (w % half) * 2 + w / half;
      }
      unsigned long long v = ws_load(g.src + (r * g.src_cols + g.col0 + c) * ss, ss, src_aligned);
      if (!copy) v = ws_convert(v, g.src_type, g.dst_type);
      ws_store(g.dst + e * ds, ds, dst_aligned, v);
    }
  }
}
