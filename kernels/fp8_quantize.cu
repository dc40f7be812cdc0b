// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Source of the PTX embedded in include/weightsync/cuda/detail/fp8_quantize_ptx.hpp. Regenerate
// with `bash kernels/embed_ptx.sh nvcc include/weightsync/cuda/detail/fp8_quantize_ptx.hpp
// kernels/fp8_quantize.cu kFp8QuantizePtx compute_89` after any change to it, to
// include/weightsync/detail/fp8_bits.hpp or to include/weightsync/kernels/fp8_abi.hpp (a CTest
// checks that they agree). compute_89: cvt.rn.satfinite.e4m3x2.f32 needs sm_89 or later.
//
// bfloat16 / float32 -> float8_e4m3fn after the reference in include/weightsync/fp8/quantize.hpp:
// scale = fp8_scale_bits(amax) (the host's own code), q = x / scale (IEEE division, __fdiv_rn;
// for UE8M0 scales, a power of two, x * (1 / scale), which is the same value), NaN -> 0x7f,
// clamp to +-448, then the hardware's round-to-nearest-even conversion.
//
// Kernels (256 threads each, parameters weightsync::kernels::Fp8Params):
// - ws_fp8_block_bf16 / ws_fp8_block_f32: one CTA per 128x128 block (grid x: column blocks,
//   y: row blocks). When rows are whole 16-byte vectors (cols % 8 for bf16, % 4 for fp32) and the
//   pointers aligned, each thread loads its 8 (bf16) or 16 (fp32) vectors once into registers,
//   the CTA reduces the amax, and the registers are converted: the input is read once. Otherwise
//   (odd shapes) elements are loaded one at a time, twice.
// - ws_fp8_rows: per-channel, one CTA per row (grid-stride), two passes over the row (the second
//   hits L2).
// - ws_fp8_tensor_amax, ws_fp8_tensor_finalize, ws_fp8_tensor_convert: per-tensor; the amax bits
//   are reduced with atomicMax into scales[0] (zeroed by the launcher), turned into the scale in
//   place, then every element is converted.
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

// x / scale as the reference computes it (see the file comment).
struct WsDivider {
  float s, inv;
  bool pow2;
  __device__ __forceinline__ float operator()(float x) const {
    return pow2 ? x * inv : __fdiv_rn(x, s);
  }
};

__device__ __forceinline__ WsDivider ws_divider(unsigned amax_bits, bool ue8m0) {
  const float s = __uint_as_float(wd::fp8_scale_bits(amax_bits, ue8m0));
  return WsDivider{s, 1.0f / s, ue8m0};
}

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
template <bool BF16>
__device__ __forceinline__ void ws_vec_store(const uint4& v, const WsDivider& d,
                                             unsigned char* out) {
  if (BF16) {
    const auto lo = [](unsigned w) { return __uint_as_float(w << 16); };
    const auto hi = [](unsigned w) { return __uint_as_float(w & 0xffff0000u); };
    const unsigned a = ws_cvt2(d(lo(v.x)), d(hi(v.x))) | (ws_cvt2(d(lo(v.y)), d(hi(v.y))) << 16);
    const unsigned b = ws_cvt2(d(lo(v.z)), d(hi(v.z))) | (ws_cvt2(d(lo(v.w)), d(hi(v.w))) << 16);
    *reinterpret_cast<uint2*>(out) = make_uint2(a, b);
  } else {
    const unsigned a = ws_cvt2(d(__uint_as_float(v.x)), d(__uint_as_float(v.y))) |
                       (ws_cvt2(d(__uint_as_float(v.z)), d(__uint_as_float(v.w))) << 16);
    *reinterpret_cast<unsigned*>(out) = a;
  }
}

__device__ __forceinline__ bool ws_vec_ok(const Fp8Params& p, unsigned epv) {
  return p.cols % epv == 0 && (reinterpret_cast<unsigned long long>(p.src) & 15ull) == 0 &&
         (reinterpret_cast<unsigned long long>(p.dst) & (epv - 1)) == 0;
}

template <bool BF16>
__device__ __forceinline__ void ws_block(const Fp8Params& p) {
  constexpr unsigned EPV = BF16 ? 8 : 4;           // elements per 16-byte vector
  constexpr unsigned ES = BF16 ? 2 : 4;            // element size
  constexpr unsigned VPR = 128 / EPV;              // vectors per block row
  constexpr unsigned NV = 128 * VPR / WS_THREADS;  // vectors per thread
  __shared__ unsigned red[WS_THREADS / 32];
  const long long r0 = static_cast<long long>(blockIdx.y) * 128;
  const long long c0 = static_cast<long long>(blockIdx.x) * 128;
  const bool ue8m0 = p.mode == weightsync::kernels::kFp8Block128Ue8m0;
  const auto* src = static_cast<const unsigned char*>(p.src);
  auto* dst = static_cast<unsigned char*>(p.dst);
  float* scale_out =
      p.scales + static_cast<unsigned long long>(blockIdx.y) * gridDim.x + blockIdx.x;
  if (ws_vec_ok(p, EPV)) {
    uint4 v[NV];
    unsigned amax = 0;
#pragma unroll
    for (unsigned j = 0; j < NV; ++j) {
      const unsigned idx = j * WS_THREADS + threadIdx.x;
      const long long row = r0 + idx / VPR, col = c0 + (idx % VPR) * EPV;
      if (row < p.rows && col < p.cols) {
        v[j] = __ldcs(reinterpret_cast<const uint4*>(src + (row * p.cols + col) * ES));
        amax = max(amax, ws_vec_amax<BF16>(v[j]));
      }
    }
    amax = ws_block_max(amax, red);
    const WsDivider d = ws_divider(amax, ue8m0);
    if (threadIdx.x == 0) *scale_out = d.s;
#pragma unroll
    for (unsigned j = 0; j < NV; ++j) {
      const unsigned idx = j * WS_THREADS + threadIdx.x;
      const long long row = r0 + idx / VPR, col = c0 + (idx % VPR) * EPV;
      if (row < p.rows && col < p.cols) ws_vec_store<BF16>(v[j], d, dst + row * p.cols + col);
    }
    return;
  }
  // Odd shapes or alignment: one element at a time, read twice.
  unsigned amax = 0;
  for (unsigned e = threadIdx.x; e < 128u * 128u; e += WS_THREADS) {
    const long long row = r0 + e / 128, col = c0 + e % 128;
    if (row < p.rows && col < p.cols)
      amax = max(amax, wd::fp8_abs_bits(ws_load_bits(src, BF16, row * p.cols + col)));
  }
  amax = ws_block_max(amax, red);
  const WsDivider d = ws_divider(amax, ue8m0);
  if (threadIdx.x == 0) *scale_out = d.s;
  for (unsigned e = threadIdx.x; e < 128u * 128u; e += WS_THREADS) {
    const long long row = r0 + e / 128, col = c0 + e % 128;
    if (row < p.rows && col < p.cols) {
      const float x = __uint_as_float(ws_load_bits(src, BF16, row * p.cols + col));
      dst[row * p.cols + col] = static_cast<unsigned char>(ws_cvt2(d(x), 0.0f) & 0xffu);
    }
  }
}

extern "C" __global__ void __launch_bounds__(WS_THREADS)
    ws_fp8_block_bf16(const __grid_constant__ Fp8Params p) {
  ws_block<true>(p);
}

extern "C" __global__ void __launch_bounds__(WS_THREADS)
    ws_fp8_block_f32(const __grid_constant__ Fp8Params p) {
  ws_block<false>(p);
}

// Elements [begin, end) of a row-major source: the amax bits (vectorized when `vec`).
template <bool BF16>
__device__ __forceinline__ unsigned ws_range_amax(const Fp8Params& p, unsigned long long begin,
                                                  unsigned long long end, unsigned long long first,
                                                  unsigned long long stride, bool vec) {
  constexpr unsigned EPV = BF16 ? 8 : 4;
  constexpr unsigned ES = BF16 ? 2 : 4;
  const auto* src = static_cast<const unsigned char*>(p.src);
  unsigned amax = 0;
  if (vec) {
    for (unsigned long long v = begin / EPV + first; v < end / EPV; v += stride)
      amax = max(amax, ws_vec_amax<BF16>(*reinterpret_cast<const uint4*>(src + v * 16)));
  } else {
    for (unsigned long long e = begin + first; e < end; e += stride)
      amax = max(amax, wd::fp8_abs_bits(ws_load_bits(src, BF16, e)));
  }
  (void)ES;
  return amax;
}

template <bool BF16>
__device__ __forceinline__ void ws_range_convert(const Fp8Params& p, unsigned long long begin,
                                                 unsigned long long end, unsigned long long first,
                                                 unsigned long long stride, bool vec,
                                                 const WsDivider& d) {
  constexpr unsigned EPV = BF16 ? 8 : 4;
  const auto* src = static_cast<const unsigned char*>(p.src);
  auto* dst = static_cast<unsigned char*>(p.dst);
  if (vec) {
    for (unsigned long long v = begin / EPV + first; v < end / EPV; v += stride)
      ws_vec_store<BF16>(__ldcs(reinterpret_cast<const uint4*>(src + v * 16)), d, dst + v * EPV);
  } else {
    for (unsigned long long e = begin + first; e < end; e += stride)
      dst[e] = static_cast<unsigned char>(
          ws_cvt2(d(__uint_as_float(ws_load_bits(src, BF16, e))), 0.0f) & 0xffu);
  }
}

template <bool BF16>
__device__ __forceinline__ void ws_rows(const Fp8Params& p) {
  __shared__ unsigned red[WS_THREADS / 32];
  const bool vec = ws_vec_ok(p, BF16 ? 8 : 4);
  const auto cols = static_cast<unsigned long long>(p.cols);
  for (long long r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const unsigned long long b = r * cols, e = b + cols;
    const unsigned amax =
        ws_block_max(ws_range_amax<BF16>(p, b, e, threadIdx.x, WS_THREADS, vec), red);
    const WsDivider d = ws_divider(amax, false);
    if (threadIdx.x == 0) p.scales[r] = d.s;
    ws_range_convert<BF16>(p, b, e, threadIdx.x, WS_THREADS, vec, d);
  }
}

extern "C" __global__ void __launch_bounds__(WS_THREADS)
    ws_fp8_rows(const __grid_constant__ Fp8Params p) {
  if (p.src_type == weightsync::kernels::kFp8SrcBfloat16)
    ws_rows<true>(p);
  else
    ws_rows<false>(p);
}

// Per-tensor pass 1: atomicMax of the amax bits into scales[0] (zeroed by the launcher).
template <bool BF16>
__device__ __forceinline__ void ws_tensor_amax(const Fp8Params& p) {
  __shared__ unsigned red[WS_THREADS / 32];
  const unsigned long long n = static_cast<unsigned long long>(p.rows) * p.cols;
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

// Per-tensor pass 3: every element with the scale in scales[0].
template <bool BF16>
__device__ __forceinline__ void ws_tensor_convert(const Fp8Params& p) {
  const unsigned long long n = static_cast<unsigned long long>(p.rows) * p.cols;
  const bool vec = n % (BF16 ? 8 : 4) == 0 &&
                   (reinterpret_cast<unsigned long long>(p.src) & 15ull) == 0 &&
                   (reinterpret_cast<unsigned long long>(p.dst) & ((BF16 ? 8 : 4) - 1)) == 0;
  const float s = p.scales[0];
  const WsDivider d{s, 1.0f / s, false};
  const unsigned long long first =
      static_cast<unsigned long long>(blockIdx.x) * WS_THREADS + threadIdx.x;
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * WS_THREADS;
  ws_range_convert<BF16>(p, 0, n, first, stride, vec, d);
}

extern "C" __global__ void __launch_bounds__(WS_THREADS)
    ws_fp8_tensor_convert(const __grid_constant__ Fp8Params p) {
  if (p.src_type == weightsync::kernels::kFp8SrcBfloat16)
    ws_tensor_convert<true>(p);
  else
    ws_tensor_convert<false>(p);
}
