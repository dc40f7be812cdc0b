// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Source of the PTX embedded in weightsync/cuda/detail/fp8_quantize_ptx.hpp, which the build
// writes (nvcc -ptx -arch=compute_89, cmake/WeightsyncPtx.cmake) and rewrites after any change to
// it, to include/weightsync/detail/fp8_bits.hpp or to include/weightsync/kernels/fp8_abi.hpp.
// compute_89: cvt.rn.satfinite.e4m3x2.f32 needs sm_89 or later.
//
// bfloat16 / float32 -> float8_e4m3fn after the reference in include/weightsync/fp8/quantize.hpp:
// scale = fp8_scale_bits(amax) (the host's own code), q = x / scale, NaN -> 0x7f, clamp to +-448,
// then the hardware's round-to-nearest-even conversion. Every kernel quantizes a view of its
// source (kernels/fp8_abi.hpp: rows of a slice, permuted or not, of a wider tensor; a whole tensor
// is the trivial view), so the load planner writes a fused / sharded piece straight into its FP8
// parameter with the same code that quantizes whole tensors.
//
// Two ways to divide, chosen per group (uniform in a CTA, so no divergence):
// - a scale in [2^-100, 2^100] (wd::fp8_fast_scale; every finite group but the tiniest): every
//   element of the group is finite (|x| <= amax), q = wd::fp8_quotient_fast (one multiply by the
//   correctly rounded reciprocal and two fma: the IEEE quotient's float8 rounding, checked on the
//   host over every bfloat16 pair), and the conversion needs neither the clamp (satfinite
//   saturates to 448 as the clamp does) nor the NaN fix-up;
// - otherwise (inf / NaN groups, subnormal scales) the IEEE division __fdiv_rn, the clamp and the
//   NaN fix-up, as the host computes them.
//
// Kernels (256 threads each, parameters weightsync::kernels::Fp8Params):
// - ws_fp8_block_bf16 / ws_fp8_block_f32: a persistent grid (the launcher: two CTAs per SM) over
//   the view's 128x128 blocks, row-block-major. When the view's rows are whole 16-byte vectors
//   (source row length, first column and view width multiples of 8 for bf16 / 4 for fp32) and
//   the pointers aligned, each thread loads its 8 (bf16) or 16 (fp32) vectors once into
//   registers (streaming loads), the CTA reduces the amax, and the registers are converted: the
//   input is read once; bf16 loads the next block before it reduces and stores this one (see
//   ws_blocks). Otherwise (odd shapes) elements are loaded one at a time, twice.
// - ws_fp8_block_batch_bf16 / ws_fp8_block_batch_f32: the same for a batch of views
//   (kernels::Fp8Batch), one launch for all the pieces of a load() call.
// - ws_fp8_rows: per-channel, one CTA per view row (grid-stride): the amax over the whole source
//   row, then the view's columns converted (a second pass, which hits L2).
// - ws_fp8_tensor_amax, ws_fp8_tensor_finalize, ws_fp8_tensor_convert: per-tensor; the amax bits
//   of the whole source are reduced with atomicMax into scales[0] (zeroed by the launcher), turned
//   into the scale in place, then every element of the view is converted.
#include "../include/weightsync/detail/fp8_bits.hpp"
#include "../include/weightsync/kernels/fp8_abi.hpp"

using weightsync::kernels::Fp8Params;
namespace wd = weightsync::detail;

#define WS_THREADS 256
static_assert(WS_THREADS == weightsync::kernels::kFp8Threads, "threads per CTA");
static_assert(weightsync::kernels::kFp8Block == 128, "block edge");

// Two quotients to two float8_e4m3fn bytes (lo at the lower address), NaN -> 0x7f.
__device__ __forceinline__ unsigned ws_cvt2(float lo, float hi) {
  const float l = fminf(fmaxf(lo, -448.0f), 448.0f), h = fminf(fmaxf(hi, -448.0f), 448.0f);
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(h), "f"(l));
  unsigned v = r;
  if (lo != lo) v = (v & 0xff00u) | wd::kFp8E4m3Nan;
  if (hi != hi) v = (v & 0x00ffu) | (static_cast<unsigned>(wd::kFp8E4m3Nan) << 8);
  return v;
}

// Two finite quotients: satfinite saturates to +-448 exactly as the clamp does.
__device__ __forceinline__ unsigned ws_cvt2_finite(float lo, float hi) {
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

// x / scale for a group, on the path chosen for it (see the file comment).
template <bool FAST>
struct WsDiv {
  float s, inv;
  __device__ __forceinline__ float operator()(float x) const {
    return FAST ? wd::fp8_quotient_fast(x, s, inv) : __fdiv_rn(x, s);
  }
  __device__ __forceinline__ unsigned cvt2(float lo, float hi) const {
    return FAST ? ws_cvt2_finite((*this)(lo), (*this)(hi)) : ws_cvt2((*this)(lo), (*this)(hi));
  }
};

// The max over the CTA (every thread gets it); `red` holds one word per warp.
__device__ __forceinline__ unsigned ws_block_max(unsigned v, unsigned* red) {
  v = __reduce_max_sync(0xffffffffu, v);
  if ((threadIdx.x & 31u) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  unsigned m = 0;
#pragma unroll
  for (int w = 0; w < WS_THREADS / 32; ++w) m = max(m, red[w]);
  __syncthreads();  // red may be written again
  return m;
}

// The source row of view row d (the rotary permutation when head_rows > 0).
__device__ __forceinline__ long long ws_src_row(const Fp8Params& p, long long d) {
  long long r = p.row0 + d;
  if (p.head_rows) {
    const long long h = r / p.head_rows, w = r % p.head_rows, half = p.head_rows / 2;
    r = h * p.head_rows + (w % half) * 2 + w / half;
  }
  return r;
}

// float32 bits of element i of a source at any alignment.
__device__ __forceinline__ unsigned ws_load_bits(const unsigned char* p, bool bf16,
                                                 unsigned long long i) {
  if (bf16) {
    const unsigned char* q = p + 2 * i;
    if ((reinterpret_cast<unsigned long long>(q) & 1ull) == 0)
      return static_cast<unsigned>(*reinterpret_cast<const unsigned short*>(q)) << 16;
    return (static_cast<unsigned>(q[0]) | (static_cast<unsigned>(q[1]) << 8)) << 16;
  }
  const unsigned char* q = p + 4 * i;
  if ((reinterpret_cast<unsigned long long>(q) & 3ull) == 0)
    return *reinterpret_cast<const unsigned*>(q);
  return static_cast<unsigned>(q[0]) | (static_cast<unsigned>(q[1]) << 8) |
         (static_cast<unsigned>(q[2]) << 16) | (static_cast<unsigned>(q[3]) << 24);
}

// The amax bits of one 16-byte vector (8 bf16 or 4 fp32), as float32 bits of |x|.
template <bool BF16>
__device__ __forceinline__ unsigned ws_vec_amax(const uint4& v) {
  if (BF16) {
    const unsigned m = __vmaxu2(__vmaxu2(v.x & 0x7fff7fffu, v.y & 0x7fff7fffu),
                                __vmaxu2(v.z & 0x7fff7fffu, v.w & 0x7fff7fffu));
    return max(m & 0xffffu, m >> 16) << 16;
  }
  return max(max(v.x & 0x7fffffffu, v.y & 0x7fffffffu), max(v.z & 0x7fffffffu, v.w & 0x7fffffffu));
}

// Converts one 16-byte vector and stores its 8 (bf16) or 4 (fp32) bytes at `out`.
template <bool BF16, bool FAST>
__device__ __forceinline__ void ws_vec_store(const uint4& v, const WsDiv<FAST>& d,
                                             unsigned char* out) {
  if (BF16) {
    const auto lo = [](unsigned w) { return __uint_as_float(w << 16); };
    const auto hi = [](unsigned w) { return __uint_as_float(w & 0xffff0000u); };
    const unsigned a = d.cvt2(lo(v.x), hi(v.x)) | (d.cvt2(lo(v.y), hi(v.y)) << 16);
    const unsigned b = d.cvt2(lo(v.z), hi(v.z)) | (d.cvt2(lo(v.w), hi(v.w)) << 16);
    *reinterpret_cast<uint2*>(out) = make_uint2(a, b);
  } else {
    const unsigned a = d.cvt2(__uint_as_float(v.x), __uint_as_float(v.y)) |
                       (d.cvt2(__uint_as_float(v.z), __uint_as_float(v.w)) << 16);
    *reinterpret_cast<unsigned*>(out) = a;
  }
}

// The source's rows are whole 16-byte vectors from aligned memory (amax over whole rows).
__device__ __forceinline__ bool ws_src_vec_ok(const Fp8Params& p, unsigned epv) {
  return p.src_cols % epv == 0 && (reinterpret_cast<unsigned long long>(p.src) & 15ull) == 0;
}

// ... and the view's rows too, into an aligned destination.
__device__ __forceinline__ bool ws_vec_ok(const Fp8Params& p, unsigned epv) {
  return ws_src_vec_ok(p, epv) && p.col0 % epv == 0 && p.cols % epv == 0 &&
         (reinterpret_cast<unsigned long long>(p.dst) & (epv - 1)) == 0;
}

template <bool BF16, bool FAST, unsigned NV, unsigned RPS, unsigned ES>
__device__ __forceinline__ void ws_block_store(const Fp8Params& p, const uint4 (&v)[NV],
                                               long long r0, long long col, unsigned tr, float s) {
  WsDiv<FAST> d{s, FAST ? __frcp_rn(s) : 0.0f};
  auto* dst = static_cast<unsigned char*>(p.dst);
#pragma unroll
  for (unsigned j = 0; j < NV; ++j) {
    const long long row = r0 + j * RPS + tr;
    if (row < p.rows && col < p.cols) ws_vec_store<BF16, FAST>(v[j], d, dst + row * p.cols + col);
  }
}

// One CTA's share of a sequence of 128x128 blocks: blocks t = blockIdx.x, + gridDim.x, ... of
// `nblocks`, `locate(t)` giving a block's view and (bx, by). A block whose view has whole 16-byte
// rows (ws_vec_ok) is loaded once into registers (thread t takes column vector t % VPR of rows
// t / VPR, t / VPR + RPS, ...: a warp reads whole 256-byte row segments), its amax reduced over
// the CTA, and converted from the registers. With PREFETCH (bf16: 8 vectors a thread, two sets
// fit) the next block's vectors are loaded before this block's reduction and stores, so a CTA
// always has loads in flight: run 70 measured 2.27-2.49 TB/s of input on an H200 with two CTAs
// per SM, against 1.76-1.95 TB/s for a CTA per block. Other views (odd shapes or alignment) go
// element by element, read twice, divided exactly.
struct WsBlockAt {
  const Fp8Params* p;
  unsigned bx, by;
};

template <bool BF16, unsigned NV, unsigned VPR, unsigned RPS>
__device__ __forceinline__ void ws_block_load(const WsBlockAt& b, uint4 (&v)[NV]) {
  constexpr unsigned EPV = BF16 ? 8 : 4, ES = BF16 ? 2 : 4;
  const Fp8Params& p = *b.p;
  // (the view's fields read once, not per vector: the loads below wait on them)
  const auto* src = static_cast<const unsigned char*>(p.src);
  const long long rows = p.rows, cols = p.cols, src_cols = p.src_cols, row0 = p.row0;
  const long long base = p.col0 + static_cast<long long>(b.bx) * 128 + (threadIdx.x % VPR) * EPV;
  const long long col = static_cast<long long>(b.bx) * 128 + (threadIdx.x % VPR) * EPV;
  const bool permuted = p.head_rows != 0;
  const long long r0 = static_cast<long long>(b.by) * 128 + threadIdx.x / VPR;
#pragma unroll
  for (unsigned j = 0; j < NV; ++j) {
    const long long row = r0 + j * RPS;
    const long long sr = permuted ? ws_src_row(p, row) : row0 + row;
    v[j] = row < rows && col < cols
               ? __ldcs(reinterpret_cast<const uint4*>(src + (sr * src_cols + base) * ES))
               : make_uint4(0, 0, 0, 0);  // (amax 0: no effect; never stored)
  }
}

template <bool BF16, unsigned NV, unsigned VPR, unsigned RPS>
__device__ __forceinline__ void ws_block_vec(const WsBlockAt& b, const uint4 (&v)[NV],
                                             unsigned* red) {
  constexpr unsigned EPV = BF16 ? 8 : 4, ES = BF16 ? 2 : 4;
  const Fp8Params& p = *b.p;
  unsigned amax = 0;
#pragma unroll
  for (unsigned j = 0; j < NV; ++j) amax = max(amax, ws_vec_amax<BF16>(v[j]));
  amax = ws_block_max(amax, red);
  const unsigned sb = wd::fp8_scale_bits(amax, p.mode == weightsync::kernels::kFp8Block128Ue8m0);
  const float s = __uint_as_float(sb);
  if (threadIdx.x == 0)
    p.scales[static_cast<unsigned long long>(b.by) * p.scale_stride + b.bx] = s;
  const long long r0 = static_cast<long long>(b.by) * 128;
  const long long col = static_cast<long long>(b.bx) * 128 + (threadIdx.x % VPR) * EPV;
  const unsigned tr = threadIdx.x / VPR;
  if (wd::fp8_fast_scale(sb))
    ws_block_store<BF16, true, NV, RPS, ES>(p, v, r0, col, tr, s);
  else
    ws_block_store<BF16, false, NV, RPS, ES>(p, v, r0, col, tr, s);
}

template <bool BF16>
__device__ __forceinline__ void ws_block_slow(const WsBlockAt& b, unsigned* red) {
  const Fp8Params& p = *b.p;
  const auto* src = static_cast<const unsigned char*>(p.src);
  auto* dst = static_cast<unsigned char*>(p.dst);
  const long long r0 = static_cast<long long>(b.by) * 128;
  const long long c0 = static_cast<long long>(b.bx) * 128;
  unsigned amax = 0;
  for (unsigned e = threadIdx.x; e < 128u * 128u; e += WS_THREADS) {
    const long long row = r0 + e / 128, col = c0 + e % 128;
    if (row < p.rows && col < p.cols)
      amax = max(amax, wd::fp8_abs_bits(ws_load_bits(
                           src, BF16, ws_src_row(p, row) * p.src_cols + p.col0 + col)));
  }
  amax = ws_block_max(amax, red);
  const WsDiv<false> d{__uint_as_float(wd::fp8_scale_bits(
                           amax, p.mode == weightsync::kernels::kFp8Block128Ue8m0)),
                       0.0f};
  if (threadIdx.x == 0) p.scales[static_cast<unsigned long long>(b.by) * p.scale_stride + b.bx] = d.s;
  for (unsigned e = threadIdx.x; e < 128u * 128u; e += WS_THREADS) {
    const long long row = r0 + e / 128, col = c0 + e % 128;
    if (row < p.rows && col < p.cols) {
      const float x =
          __uint_as_float(ws_load_bits(src, BF16, ws_src_row(p, row) * p.src_cols + p.col0 + col));
      dst[row * p.cols + col] = static_cast<unsigned char>(d.cvt2(x, 0.0f) & 0xffu);
    }
  }
}

template <bool BF16, bool PREFETCH, class Locate>
__device__ __forceinline__ void ws_blocks(unsigned long long nblocks, Locate locate) {
  constexpr unsigned EPV = BF16 ? 8 : 4;           // elements per 16-byte vector
  constexpr unsigned VPR = 128 / EPV;              // vectors per block row
  constexpr unsigned NV = 128 * VPR / WS_THREADS;  // vectors per thread
  constexpr unsigned RPS = WS_THREADS / VPR;       // block rows per step of the CTA
  __shared__ unsigned red[WS_THREADS / 32];
  unsigned long long t = blockIdx.x;
  if (t >= nblocks) return;
  WsBlockAt cur = locate(t);
  bool cur_vec = ws_vec_ok(*cur.p, EPV);
  uint4 v[NV];
  if (PREFETCH && cur_vec) ws_block_load<BF16, NV, VPR, RPS>(cur, v);
  for (; t < nblocks; t += gridDim.x) {
    const unsigned long long tn = t + gridDim.x;
    if constexpr (PREFETCH) {
      WsBlockAt nxt{};
      bool nxt_vec = false;
      uint4 nx[NV];
      if (tn < nblocks) {
        nxt = locate(tn);
        nxt_vec = ws_vec_ok(*nxt.p, EPV);
        if (nxt_vec) ws_block_load<BF16, NV, VPR, RPS>(nxt, nx);
      }
      if (cur_vec)
        ws_block_vec<BF16, NV, VPR, RPS>(cur, v, red);
      else
        ws_block_slow<BF16>(cur, red);
#pragma unroll
      for (unsigned j = 0; j < NV; ++j) v[j] = nx[j];
      cur = nxt;
      cur_vec = nxt_vec;
    } else {
      if (cur_vec) {
        ws_block_load<BF16, NV, VPR, RPS>(cur, v);
        ws_block_vec<BF16, NV, VPR, RPS>(cur, v, red);
      } else {
        ws_block_slow<BF16>(cur, red);
      }
      if (tn < nblocks) {
        cur = locate(tn);
        cur_vec = ws_vec_ok(*cur.p, EPV);
      }
    }
  }
}

// A single view: blocks numbered row-block-major (t = by * gx + bx), a persistent grid.
template <bool BF16, bool PREFETCH>
__device__ __forceinline__ void ws_view_blocks(const Fp8Params& p) {
  const auto gx = static_cast<unsigned long long>((p.cols + 127) / 128);
  const auto gy = static_cast<unsigned long long>((p.rows + 127) / 128);
  ws_blocks<BF16, PREFETCH>(gx * gy, [&](unsigned long long t) {
    return WsBlockAt{&p, static_cast<unsigned>(t % gx), static_cast<unsigned>(t / gx)};
  });
}

// A whole bf16 tensor (no row or column offset, no permutation, whole 16-byte rows, aligned):
// the loop of ws_blocks with the addressing reduced to row * cols + col, which run 72 measured
// 10-20 % faster than the general view (q_proj 14.9 against 18.1 us on an H200).
__device__ __forceinline__ bool ws_plain_view(const Fp8Params& p) {
  return p.row0 == 0 && p.col0 == 0 && p.head_rows == 0 && p.src_cols == p.cols &&
         ws_vec_ok(p, 8);
}

__device__ __forceinline__ void ws_plain_blocks_bf16(const Fp8Params& p) {
  constexpr unsigned EPV = 8, VPR = 16, NV = 8, RPS = 16;
  __shared__ unsigned red[WS_THREADS / 32];
  const unsigned long long gx = static_cast<unsigned long long>((p.cols + 127) / 128);
  const unsigned long long nblocks = gx * static_cast<unsigned long long>((p.rows + 127) / 128);
  const long long rows = p.rows, cols = p.cols;
  const unsigned tr = threadIdx.x / VPR;
  const long long cv = (threadIdx.x % VPR) * EPV;
  const auto* src = static_cast<const unsigned char*>(p.src);
  const bool ue8m0 = p.mode == weightsync::kernels::kFp8Block128Ue8m0;
  const auto load = [&](unsigned long long t, uint4(&d)[NV]) {
    const long long r0 = static_cast<long long>(t / gx) * 128 + tr;
    const long long col = static_cast<long long>(t % gx) * 128 + cv;
#pragma unroll
    for (unsigned j = 0; j < NV; ++j) {
      const long long row = r0 + j * RPS;
      d[j] = row < rows && col < cols
                 ? __ldcs(reinterpret_cast<const uint4*>(src + (row * cols + col) * 2))
                 : make_uint4(0, 0, 0, 0);
    }
  };
  unsigned long long t = blockIdx.x;
  if (t >= nblocks) return;
  uint4 v[NV], nx[NV];
  load(t, v);
  for (; t < nblocks; t += gridDim.x) {
    const unsigned long long tn = t + gridDim.x;
    if (tn < nblocks) load(tn, nx);
    unsigned amax = 0;
#pragma unroll
    for (unsigned j = 0; j < NV; ++j) amax = max(amax, ws_vec_amax<true>(v[j]));
    amax = ws_block_max(amax, red);
    const unsigned sb = wd::fp8_scale_bits(amax, ue8m0);
    const float s = __uint_as_float(sb);
    const unsigned long long by = t / gx, bx = t % gx;
    if (threadIdx.x == 0) p.scales[by * p.scale_stride + bx] = s;
    const long long r0 = static_cast<long long>(by) * 128, col = static_cast<long long>(bx) * 128 + cv;
    if (wd::fp8_fast_scale(sb))
      ws_block_store<true, true, NV, RPS, 2>(p, v, r0, col, tr, s);
    else
      ws_block_store<true, false, NV, RPS, 2>(p, v, r0, col, tr, s);
#pragma unroll
    for (unsigned j = 0; j < NV; ++j) v[j] = nx[j];
  }
}

extern "C" __global__ void __launch_bounds__(WS_THREADS, 2)
    ws_fp8_block_bf16(const __grid_constant__ Fp8Params p) {
  if (ws_plain_view(p))
    ws_plain_blocks_bf16(p);
  else
    ws_view_blocks<true, true>(p);
}

extern "C" __global__ void __launch_bounds__(WS_THREADS)
    ws_fp8_block_f32(const __grid_constant__ Fp8Params p) {
  ws_view_blocks<false, false>(p);
}

// A batch of block-mode views of one source type (the load planner's pieces of a chunk: many
// small expert tensors in one launch): the batch's blocks one after another, a view found by
// binary search over the cumulative block counts.
template <bool BF16, bool PREFETCH>
__device__ __forceinline__ void ws_block_batch(const weightsync::kernels::Fp8Batch& b) {
  ws_blocks<BF16, PREFETCH>(b.total_blocks, [&](unsigned long long t) {
    unsigned lo = 0, hi = b.count - 1;
    while (lo < hi) {
      const unsigned mid = (lo + hi) / 2;
      if (b.block_end[mid] > t)
        hi = mid;
      else
        lo = mid + 1;
    }
    const Fp8Params& p = b.v[lo];
    const unsigned long long local = t - (lo ? b.block_end[lo - 1] : 0);
    const unsigned long long gx = static_cast<unsigned long long>(p.cols + 127) / 128;
    return WsBlockAt{&p, static_cast<unsigned>(local % gx), static_cast<unsigned>(local / gx)};
  });
}

extern "C" __global__ void __launch_bounds__(WS_THREADS, 2)
    ws_fp8_block_batch_bf16(const __grid_constant__ weightsync::kernels::Fp8Batch b) {
  ws_block_batch<true, true>(b);
}

extern "C" __global__ void __launch_bounds__(WS_THREADS)
    ws_fp8_block_batch_f32(const __grid_constant__ weightsync::kernels::Fp8Batch b) {
  ws_block_batch<false, false>(b);
}

// The amax bits of source elements [begin, end) (vectorized when `vec`: begin and end whole
// vectors), thread `first` of `stride`.
template <bool BF16>
__device__ __forceinline__ unsigned ws_range_amax(const Fp8Params& p, unsigned long long begin,
                                                  unsigned long long end, unsigned long long first,
                                                  unsigned long long stride, bool vec) {
  constexpr unsigned EPV = BF16 ? 8 : 4;
  const auto* src = static_cast<const unsigned char*>(p.src);
  unsigned amax = 0;
  if (vec) {
    for (unsigned long long v = begin / EPV + first; v < end / EPV; v += stride)
      amax = max(amax, ws_vec_amax<BF16>(*reinterpret_cast<const uint4*>(src + v * 16)));
  } else {
    for (unsigned long long e = begin + first; e < end; e += stride)
      amax = max(amax, wd::fp8_abs_bits(ws_load_bits(src, BF16, e)));
  }
  return amax;
}

// Converts source elements [begin, begin + n) into out[0, n) (vectorized when `vec`: begin and n
// whole vectors, out aligned), thread `first` of `stride`.
template <bool BF16, bool FAST>
__device__ __forceinline__ void ws_range_convert(const Fp8Params& p, unsigned long long begin,
                                                 unsigned long long n, unsigned char* out,
                                                 unsigned long long first,
                                                 unsigned long long stride, bool vec,
                                                 const WsDiv<FAST>& d) {
  constexpr unsigned EPV = BF16 ? 8 : 4;
  constexpr unsigned ES = BF16 ? 2 : 4;
  const auto* src = static_cast<const unsigned char*>(p.src) + begin * ES;
  if (vec) {
    for (unsigned long long v = first; v < n / EPV; v += stride)
      ws_vec_store<BF16, FAST>(__ldcs(reinterpret_cast<const uint4*>(src + v * 16)), d,
                               out + v * EPV);
  } else {
    for (unsigned long long e = first; e < n; e += stride)
      out[e] = static_cast<unsigned char>(
          d.cvt2(__uint_as_float(ws_load_bits(src, BF16, e)), 0.0f) & 0xffu);
  }
}

template <bool BF16, bool FAST>
__device__ __forceinline__ void ws_convert_with(const Fp8Params& p, unsigned long long begin,
                                                unsigned long long n, unsigned char* out,
                                                unsigned long long first, unsigned long long stride,
                                                bool vec, float s) {
  ws_range_convert<BF16, FAST>(p, begin, n, out, first, stride, vec,
                               WsDiv<FAST>{s, FAST ? __frcp_rn(s) : 0.0f});
}

// Converts with scale s on the path its bits choose.
template <bool BF16>
__device__ __forceinline__ void ws_convert(const Fp8Params& p, unsigned long long begin,
                                           unsigned long long n, unsigned char* out,
                                           unsigned long long first, unsigned long long stride,
                                           bool vec, float s) {
  if (wd::fp8_fast_scale(__float_as_uint(s)))
    ws_convert_with<BF16, true>(p, begin, n, out, first, stride, vec, s);
  else
    ws_convert_with<BF16, false>(p, begin, n, out, first, stride, vec, s);
}

template <bool BF16>
__device__ __forceinline__ void ws_rows(const Fp8Params& p) {
  constexpr unsigned EPV = BF16 ? 8 : 4;
  __shared__ unsigned red[WS_THREADS / 32];
  const bool vec_src = ws_src_vec_ok(p, EPV), vec = ws_vec_ok(p, EPV);
  const auto src_cols = static_cast<unsigned long long>(p.src_cols);
  auto* dst = static_cast<unsigned char*>(p.dst);
  for (long long d = blockIdx.x; d < p.rows; d += gridDim.x) {
    const unsigned long long b = static_cast<unsigned long long>(ws_src_row(p, d)) * src_cols;
    const unsigned amax = ws_block_max(
        ws_range_amax<BF16>(p, b, b + src_cols, threadIdx.x, WS_THREADS, vec_src), red);
    const float s = __uint_as_float(wd::fp8_scale_bits(amax, false));
    if (threadIdx.x == 0) p.scales[d] = s;
    ws_convert<BF16>(
        p, b + static_cast<unsigned long long>(p.col0), static_cast<unsigned long long>(p.cols),
        dst + static_cast<unsigned long long>(d) * p.cols, threadIdx.x, WS_THREADS, vec, s);
  }
}

extern "C" __global__ void __launch_bounds__(WS_THREADS)
    ws_fp8_rows(const __grid_constant__ Fp8Params p) {
  if (p.src_type == weightsync::kernels::kFp8SrcBfloat16)
    ws_rows<true>(p);
  else
    ws_rows<false>(p);
}

// Per-tensor pass 1: atomicMax of the whole source's amax bits into scales[0] (zeroed by the
// launcher).
template <bool BF16>
__device__ __forceinline__ void ws_tensor_amax(const Fp8Params& p) {
  __shared__ unsigned red[WS_THREADS / 32];
  const unsigned long long n = static_cast<unsigned long long>(p.src_rows) * p.src_cols;
  const bool vec =
      n % (BF16 ? 8 : 4) == 0 && (reinterpret_cast<unsigned long long>(p.src) & 15ull) == 0;
  const unsigned long long first =
      static_cast<unsigned long long>(blockIdx.x) * WS_THREADS + threadIdx.x;
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * WS_THREADS;
  const unsigned amax = ws_block_max(ws_range_amax<BF16>(p, 0, n, first, stride, vec), red);
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned*>(p.scales), amax);
}

extern "C" __global__ void __launch_bounds__(WS_THREADS)
    ws_fp8_tensor_amax(const __grid_constant__ Fp8Params p) {
  if (p.src_type == weightsync::kernels::kFp8SrcBfloat16)
    ws_tensor_amax<true>(p);
  else
    ws_tensor_amax<false>(p);
}

// Per-tensor pass 2: the amax bits in scales[0] become the scale.
extern "C" __global__ void ws_fp8_tensor_finalize(const __grid_constant__ Fp8Params p) {
  if (threadIdx.x == 0 && blockIdx.x == 0)
    p.scales[0] =
        __uint_as_float(wd::fp8_scale_bits(*reinterpret_cast<const unsigned*>(p.scales), false));
}

// Per-tensor pass 3: every element of the view with the scale in scales[0]; a contiguous view
// (a whole tensor) as one range, any other row by row.
template <bool BF16>
__device__ __forceinline__ void ws_tensor_convert(const Fp8Params& p) {
  constexpr unsigned EPV = BF16 ? 8 : 4;
  const float s = p.scales[0];
  auto* dst = static_cast<unsigned char*>(p.dst);
  if (p.row0 == 0 && p.col0 == 0 && p.head_rows == 0 && p.src_cols == p.cols) {
    const unsigned long long n = static_cast<unsigned long long>(p.rows) * p.cols;
    const bool vec = n % EPV == 0 && (reinterpret_cast<unsigned long long>(p.src) & 15ull) == 0 &&
                     (reinterpret_cast<unsigned long long>(p.dst) & (EPV - 1)) == 0;
    const unsigned long long first =
        static_cast<unsigned long long>(blockIdx.x) * WS_THREADS + threadIdx.x;
    const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * WS_THREADS;
    ws_convert<BF16>(p, 0, n, dst, first, stride, vec, s);
    return;
  }
  const bool vec = ws_vec_ok(p, EPV);
  for (long long d = blockIdx.x; d < p.rows; d += gridDim.x)
    ws_convert<BF16>(p,
                     static_cast<unsigned long long>(ws_src_row(p, d)) * p.src_cols +
                         static_cast<unsigned long long>(p.col0),
                     static_cast<unsigned long long>(p.cols),
                     dst + static_cast<unsigned long long>(d) * p.cols, threadIdx.x, WS_THREADS,
                     vec, s);
}

extern "C" __global__ void __launch_bounds__(WS_THREADS)
    ws_fp8_tensor_convert(const __grid_constant__ Fp8Params p) {
  if (p.src_type == weightsync::kernels::kFp8SrcBfloat16)
    ws_tensor_convert<true>(p);
  else
    ws_tensor_convert<false>(p);
}
