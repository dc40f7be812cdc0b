// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Source of the PTX embedded in weightsync/cuda/detail/digest_ptx.hpp, which the build writes
// (nvcc -ptx, cmake/WeightsyncPtx.cmake) and rewrites after any change to it, to
// include/weightsync/detail/digest_bits.hpp or to include/weightsync/kernels/digest_abi.hpp.
// digest_abi.hpp is the ABI shared with the launcher
// (<weightsync/cuda/digest.hpp>) and the host reference (<weightsync/detail/digest.hpp>, which
// defines the digest).
//
// One launch digests up to kMaxDigestPieces pieces, each into the sum it names (and copies the
// pieces that name a copy_to there, from the registers it digests: one read). Blocks of
// kDigestBlockBytes are numbered across the pieces; a CTA takes blocks grid-stride (the launcher
// gives one CTA per block, so that CTAs are short and the communication kernels that share the
// GPU are scheduled between them), finds its piece by binary search over the cumulative block
// counts, and thread l runs lane l of the block: 16 granules of 16 bytes, 4 KiB apart, so that a
// warp's loads are 512 contiguous bytes. Every lane adds digest_fmix(state); a CTA adds its
// threads' sums with one atomicAdd per block (integer addition: the same bits in any order), the
// CTA of a piece's block 0 also the piece's length term.
#include "../include/weightsync/detail/digest_bits.hpp"
#include "../include/weightsync/kernels/digest_abi.hpp"

namespace wk = weightsync::kernels;
namespace wd = weightsync::detail;
using u64 = unsigned long long;

static_assert(wk::kDigestGranulesPerLane == 16, "the aligned path below loads 16 granules");

// A granule at an address that is not 16-byte aligned, `n` (1..16) of its bytes valid, the rest
// zero. A whole granule is read as aligned 8-byte words (each holds at least one byte of the
// granule, so it lies in the granule's allocation) and shifted into place; a short one byte by
// byte.
__device__ __forceinline__ void ws_granule(const unsigned char* p, unsigned n, u64& lo, u64& hi) {
  const u64 a = reinterpret_cast<u64>(p);
  if (n == 16) {
    const unsigned sh = static_cast<unsigned>(a & 7) * 8;
    const u64* w = reinterpret_cast<const u64*>(a & ~7ull);
    if (sh == 0) {
      lo = w[0];
      hi = w[1];
    } else {
      const u64 w0 = w[0], w1 = w[1], w2 = w[2];
      lo = (w0 >> sh) | (w1 << (64 - sh));
      hi = (w1 >> sh) | (w2 << (64 - sh));
    }
    return;
  }
  lo = 0;
  hi = 0;
  for (unsigned i = 0; i < n; ++i) {
    const u64 b = static_cast<u64>(p[i]);
    if (i < 8)
      lo |= b << (8 * i);
    else
      hi |= b << (8 * (i - 8));
  }
}

extern "C" __global__ void __launch_bounds__(wk::kDigestLanes)
    ws_digest(const __grid_constant__ wk::DigestParams prm) {
  constexpr u64 kLaneStride = wk::kDigestGranuleBytes * wk::kDigestLanes;  // 4 KiB
  __shared__ u64 warp_sum[wk::kDigestLanes / 32];
  for (u64 t = blockIdx.x; t < prm.total_blocks; t += gridDim.x) {
    unsigned lo = 0, hi = prm.count - 1;
    while (lo < hi) {
      const unsigned mid = (lo + hi) / 2;
      if (prm.p[mid].block_end > t)
        hi = mid;
      else
        lo = mid + 1;
    }
    const wk::DigestPiece& pc = prm.p[lo];
    const u64 b = t - (lo ? prm.p[lo - 1].block_end : 0);
    const u64 start = b * wk::kDigestBlockBytes;
    const u64 left =
        pc.bytes - start < wk::kDigestBlockBytes ? pc.bytes - start : wk::kDigestBlockBytes;
    const unsigned char* blk = pc.data + start;
    unsigned char* out = pc.copy_to ? pc.copy_to + start : nullptr;
    u64 s = wd::digest_lane_init(wd::digest_key(pc.ordinal, b), threadIdx.x);
    const unsigned char* mine = blk + threadIdx.x * wk::kDigestGranuleBytes;
    if (left == wk::kDigestBlockBytes &&
        ((reinterpret_cast<u64>(blk) | reinterpret_cast<u64>(out)) & 15) == 0) {
      // Every granule whole and aligned: all 16 loads in flight at once, then the rounds.
      uint4 v[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) v[i] = *reinterpret_cast<const uint4*>(mine + i * kLaneStride);
      if (out) {
        unsigned char* to = out + threadIdx.x * wk::kDigestGranuleBytes;
#pragma unroll
        for (int i = 0; i < 16; ++i) *reinterpret_cast<uint4*>(to + i * kLaneStride) = v[i];
      }
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        s = wd::digest_round(s, static_cast<u64>(v[i].x) | (static_cast<u64>(v[i].y) << 32));
        s = wd::digest_round(s, static_cast<u64>(v[i].z) | (static_cast<u64>(v[i].w) << 32));
      }
    } else {
      const bool aligned = (reinterpret_cast<u64>(blk) & 15) == 0;
      for (int i = 0; i < 16; ++i) {
        const u64 off = threadIdx.x * wk::kDigestGranuleBytes + i * kLaneStride;
        if (off >= left) break;
        const unsigned n = left - off < 16 ? static_cast<unsigned>(left - off) : 16u;
        u64 w0, w1;
        if (aligned && n == 16) {
          const uint4 x = *reinterpret_cast<const uint4*>(blk + off);
          w0 = static_cast<u64>(x.x) | (static_cast<u64>(x.y) << 32);
          w1 = static_cast<u64>(x.z) | (static_cast<u64>(x.w) << 32);
        } else {
          ws_granule(blk + off, n, w0, w1);
        }
        if (out) {
          if (n == 16 && (reinterpret_cast<u64>(out + off) & 15) == 0) {
            *reinterpret_cast<uint4*>(out + off) =
                make_uint4(static_cast<unsigned>(w0), static_cast<unsigned>(w0 >> 32),
                           static_cast<unsigned>(w1), static_cast<unsigned>(w1 >> 32));
          } else {
            for (unsigned j = 0; j < n; ++j)
              out[off + j] = static_cast<unsigned char>((j < 8 ? w0 >> (8 * j) : w1 >> (8 * (j - 8))));
          }
        }
        s = wd::digest_round(wd::digest_round(s, w0), w1);
      }
    }
    // The block's sum: warps by shuffles, then one atomicAdd (with the piece's length term, once:
    // by its block 0).
    u64 acc = wd::digest_fmix(s);
#pragma unroll
    for (int d = 16; d > 0; d /= 2) acc += __shfl_down_sync(0xffffffffu, acc, d);
    if ((threadIdx.x & 31) == 0) warp_sum[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
      u64 total = b == 0 ? wd::digest_length_term(pc.ordinal, pc.bytes) : 0;
      for (int w = 0; w < wk::kDigestLanes / 32; ++w) total += warp_sum[w];
      atomicAdd(prm.sums + pc.sum, total);
    }
    __syncthreads();  // warp_sum is read before the next block writes it
  }
}
