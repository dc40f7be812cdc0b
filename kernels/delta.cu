// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Source of the PTX embedded in weightsync/cuda/detail/delta_ptx.hpp, which the build writes
// (nvcc -ptx, cmake/WeightsyncPtx.cmake) and rewrites after any change to it, to
// include/weightsync/delta/format.hpp or to include/weightsync/kernels/delta_abi.hpp.
//
// The delta codec of include/weightsync/delta/codec.hpp on the GPU: the same blobs, byte for byte
// (padding zeros included), and the same checks before anything is applied. Buckets of every
// tensor of a batch are numbered one after another (global buckets); kernels take them
// grid-stride, one CTA (256 threads) per bucket unless said otherwise (encode, the payload
// checks and apply take a warp per bucket: at low densities a bucket has a few hundred changes,
// too little for a CTA, and a grid of a CTA per bucket is bound by latency).
//
// Encode (parameters DeltaEncodeParams):
// - ws_delta_index: the job of each global bucket.
// - ws_delta_count: compares src with ref bitwise (16-byte loads when both are 16-byte aligned,
//   else element by element) and writes the bucket's changed bits (the bitmask encoding's words,
//   kept in scratch so that encode reads src only where it changed, and ref never) and its count.
// - ws_delta_chunks: payload bytes per bucket (choose_kind), scanned inside chunks of 2048.
// - ws_delta_top (one CTA): scans the chunk sums; each job's blob size and scan base.
// - ws_delta_encode (a CTA per 256 buckets: a thread reads a bucket's metadata and writes its
//   directory entry, then a warp per sparse payload, the CTA per raw or bitmask one): the
//   header (extra CTAs after the buckets), each bucket's directory entry and payload; raw copied wide, bitmask values compacted element-wise (lane l
//   takes bit l of each word), sparse offsets ranked per lane's run of words, then the values
//   gathered through them.
// Apply (parameters DeltaApplyParams): the checks of check_delta_blob, then the writes; a blob
// with any error is not written at all.
// - ws_delta_vhead (thread per blob): the header; the blob's bucket count (0 when bad).
// - ws_delta_vbase (one CTA): global bucket and check-chunk bases of the blobs.
// - ws_delta_vchunks: payload bytes per check chunk of 256 directory entries (chunks never span
//   blobs), and the chunk's blob, so that the kernels below find a bucket's blob in one load.
// - ws_delta_vtop (one CTA): scans the chunk sums.
// - ws_delta_vcheck (a CTA per check chunk): a thread per entry (kind, count, offset == where the
//   previous payload ended, from one CTA-wide scan of the sizes; bounds), then a warp per payload
//   (bitmask popcount, sparse offsets ascending and < len) of the entries that passed; errors go
//   to DeltaApplyState::err with atomicMin, so the smallest key (the first error in the host's
//   check order) wins.
// - ws_delta_vdescribe (thread per bad blob): recomputes the details of that first error.
// - ws_delta_apply (a warp per check-chunk slot): writes the good blobs' payloads into their
//   tensors.
#include "../include/weightsync/delta/format.hpp"
#include "../include/weightsync/delta/low_byte.hpp"
#include "../include/weightsync/kernels/delta_abi.hpp"

namespace wk = weightsync::kernels;
namespace wdl = weightsync::delta;
using u64 = unsigned long long;

#define WS_THREADS 256
#define WS_SCAN_THREADS 1024
#define WS_FULL 0xffffffffu
static_assert(WS_THREADS == wk::kDeltaThreads, "threads per CTA");
static_assert(WS_SCAN_THREADS == wk::kDeltaScanThreads, "threads of the scan CTAs");
static_assert(wk::kDeltaEncodeChunk == 8 * WS_THREADS, "8 buckets per thread of ws_delta_chunks");
static_assert(wk::kDeltaCheckChunk == WS_THREADS, "1 entry per thread of ws_delta_vchunks");

// ---------------------------------------------------------------------------------------------
// CTA-wide helpers

template <class T>
__device__ __forceinline__ T ws_warp_incl(T v) {
  const unsigned lane = threadIdx.x & 31u;
#pragma unroll
  for (unsigned o = 1; o < 32; o <<= 1) {
    const T n = __shfl_up_sync(WS_FULL, v, o);
    if (lane >= o) v += n;
  }
  return v;
}

// Exclusive scan over a CTA of NT threads; `total` gets the sum. `red`: NT / 32 shared Ts.
template <int NT, class T>
__device__ __forceinline__ T ws_block_excl(T v, T* red, T& total) {
  constexpr unsigned NW = NT / 32;
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const T incl = ws_warp_incl(v);
  if (lane == 31) red[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    T x = lane < NW ? red[lane] : T(0);
    x = ws_warp_incl(x);
    if (lane < NW) red[lane] = x;
  }
  __syncthreads();
  const T before = warp ? red[warp - 1] : T(0);
  total = red[NW - 1];
  __syncthreads();  // red may be written again
  return before + incl - v;
}

template <int NT, class T>
__device__ __forceinline__ T ws_block_sum(T v, T* red) {
  T total;
  (void)ws_block_excl<NT>(v, red, total);
  return total;
}

// ---------------------------------------------------------------------------------------------
// Elements at any alignment

__device__ __forceinline__ u64 ws_load(const unsigned char* p, unsigned eb) {
  if ((reinterpret_cast<u64>(p) & (eb - 1)) == 0) {
    switch (eb) {
      case 1:
        return *p;
      case 2:
        return *reinterpret_cast<const unsigned short*>(p);
      case 4:
        return *reinterpret_cast<const unsigned*>(p);
      default:
        return *reinterpret_cast<const u64*>(p);
    }
  }
  u64 v = 0;
  for (unsigned k = 0; k < eb; ++k) v |= static_cast<u64>(p[k]) << (8 * k);
  return v;
}

__device__ __forceinline__ void ws_store(unsigned char* p, unsigned eb, u64 v) {
  if ((reinterpret_cast<u64>(p) & (eb - 1)) == 0) {
    switch (eb) {
      case 1:
        *p = static_cast<unsigned char>(v);
        return;
      case 2:
        *reinterpret_cast<unsigned short*>(p) = static_cast<unsigned short>(v);
        return;
      case 4:
        *reinterpret_cast<unsigned*>(p) = static_cast<unsigned>(v);
        return;
      default:
        *reinterpret_cast<u64*>(p) = v;
        return;
    }
  }
  for (unsigned k = 0; k < eb; ++k) p[k] = static_cast<unsigned char>(v >> (8 * k));
}

// ---------------------------------------------------------------------------------------------
// Warp-wide helpers (a warp per bucket: encode, the payload checks, apply)

__device__ __forceinline__ unsigned ws_lane() {
  return threadIdx.x & 31u;
}

// Exclusive scan over the warp; `total` gets the sum.
__device__ __forceinline__ unsigned ws_warp_excl(unsigned v, unsigned& total) {
  const unsigned incl = ws_warp_incl(v);
  total = __shfl_sync(WS_FULL, incl, 31);
  return incl - v;
}

// Word w of a bucket's bitmask with the bits at or past len cleared.
__device__ __forceinline__ unsigned ws_word(const unsigned* words, u64 w, u64 len) {
  unsigned word = words[w];
  if (w == (len - 1) / 32 && len % 32 != 0) word &= (1u << (len % 32)) - 1;
  return word;
}

// NT threads (thread t of them) copy n bytes from s to d and, when `pad`, zero up to align8(n):
// 16- or 8-byte units (4 in flight per thread) when both sides are aligned so, bytes otherwise
// (and the tail). NT = 32: a warp (t = lane); NT = kDeltaThreads: a CTA.
template <unsigned NT>
__device__ __forceinline__ void ws_copy(unsigned char* d, const unsigned char* s, u64 n, bool pad,
                                        unsigned t) {
  const u64 a = reinterpret_cast<u64>(d) | reinterpret_cast<u64>(s);
  u64 done = 0;
  if ((a & 15) == 0) {
    const u64 n16 = n / 16;
    const auto* sv = reinterpret_cast<const uint4*>(s);
    auto* dv = reinterpret_cast<uint4*>(d);
    u64 u = t;
    for (; u + 3 * NT < n16; u += 4 * NT) {
      const uint4 x0 = sv[u], x1 = sv[u + NT], x2 = sv[u + 2 * NT], x3 = sv[u + 3 * NT];
      dv[u] = x0, dv[u + NT] = x1, dv[u + 2 * NT] = x2, dv[u + 3 * NT] = x3;
    }
    for (; u < n16; u += NT) dv[u] = sv[u];
    done = n16 * 16;
  } else if ((a & 7) == 0) {
    const u64 n8 = n / 8;
    const auto* sv = reinterpret_cast<const uint2*>(s);
    auto* dv = reinterpret_cast<uint2*>(d);
    u64 u = t;
    for (; u + 3 * NT < n8; u += 4 * NT) {
      const uint2 x0 = sv[u], x1 = sv[u + NT], x2 = sv[u + 2 * NT], x3 = sv[u + 3 * NT];
      dv[u] = x0, dv[u + NT] = x1, dv[u + 2 * NT] = x2, dv[u + 3 * NT] = x3;
    }
    for (; u < n8; u += NT) dv[u] = sv[u];
    done = n8 * 8;
  }
  const u64 end = pad ? wdl::align8(n) : n;
  for (u64 k = done + t; k < end; k += NT) d[k] = k < n ? s[k] : 0;
}

// ---------------------------------------------------------------------------------------------
// Encode

extern "C" __global__ void __launch_bounds__(WS_THREADS)
    ws_delta_index(const __grid_constant__ wk::DeltaEncodeParams p) {
  for (unsigned j = blockIdx.x; j < p.n_jobs; j += gridDim.x) {
    const wk::DeltaEncodeJob J = p.jobs[j];
    for (u64 b = threadIdx.x; b < J.n_buckets; b += WS_THREADS) p.bucket_job[J.bucket_base + b] = j;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) p.totals[2] = 0;  // (ws_delta_count counts into it)
}

// The changed bits of one 16-byte vector of EB-byte elements (element k: bit k).
template <unsigned EB>
__device__ __forceinline__ unsigned ws_vec_bits(const uint4& a, const uint4& b) {
  if (EB == 1) {
    const auto e = [](unsigned w) {
      return (w & 1u) | ((w >> 7) & 2u) | ((w >> 14) & 4u) | ((w >> 21) & 8u);
    };
    return e(__vcmpne4(a.x, b.x)) | (e(__vcmpne4(a.y, b.y)) << 4) | (e(__vcmpne4(a.z, b.z)) << 8) |
           (e(__vcmpne4(a.w, b.w)) << 12);
  }
  if (EB == 2) {
    const auto e = [](unsigned w) { return (w & 1u) | ((w >> 15) & 2u); };
    return e(__vcmpne2(a.x, b.x)) | (e(__vcmpne2(a.y, b.y)) << 2) | (e(__vcmpne2(a.z, b.z)) << 4) |
           (e(__vcmpne2(a.w, b.w)) << 6);
  }
  if (EB == 4)
    return static_cast<unsigned>(a.x != b.x) | (static_cast<unsigned>(a.y != b.y) << 1) |
           (static_cast<unsigned>(a.z != b.z) << 2) | (static_cast<unsigned>(a.w != b.w) << 3);
  return static_cast<unsigned>(a.x != b.x || a.y != b.y) |
         (static_cast<unsigned>(a.z != b.z || a.w != b.w) << 1);
}

// Word i of a 16-byte vector, and element k of EB bytes (selects, not an indexed array: the
// vector stays in registers).
__device__ __forceinline__ unsigned ws_pick(const uint4& a, unsigned i) {
  return i == 0 ? a.x : i == 1 ? a.y : i == 2 ? a.z : a.w;
}
__device__ __forceinline__ void ws_put(uint4& a, unsigned i, unsigned w) {
  if (i == 0)
    a.x = w;
  else if (i == 1)
    a.y = w;
  else if (i == 2)
    a.z = w;
  else
    a.w = w;
}
template <unsigned EB>
__device__ __forceinline__ u64 ws_vec_get(const uint4& a, unsigned k) {
  if (EB == 8) return u64{ws_pick(a, 2 * k)} | (u64{ws_pick(a, 2 * k + 1)} << 32);
  const unsigned w = ws_pick(a, k * EB / 4);
  if (EB == 4) return w;
  return (w >> (k * EB % 4 * 8)) & (EB == 2 ? 0xffffu : 0xffu);
}
template <unsigned EB>
__device__ __forceinline__ void ws_vec_set(uint4& a, unsigned k, u64 v) {
  if (EB == 8) {
    ws_put(a, 2 * k, static_cast<unsigned>(v));
    ws_put(a, 2 * k + 1, static_cast<unsigned>(v >> 32));
    return;
  }
  if (EB == 4) {
    ws_put(a, k, static_cast<unsigned>(v));
    return;
  }
  const unsigned i = k * EB / 4, sh = k * EB % 4 * 8, m = (EB == 2 ? 0xffffu : 0xffu) << sh;
  ws_put(a, i, (ws_pick(a, i) & ~m) | ((static_cast<unsigned>(v) << sh) & m));
}
template <unsigned EB>
__device__ __forceinline__ void ws_store_t(unsigned char* p, u64 v) {
  if (EB == 1)
    *p = static_cast<unsigned char>(v);
  else if (EB == 2)
    *reinterpret_cast<unsigned short*>(p) = static_cast<unsigned short>(v);
  else if (EB == 4)
    *reinterpret_cast<unsigned*>(p) = static_cast<unsigned>(v);
  else
    *reinterpret_cast<u64*>(p) = v;
}
template <unsigned EB>
__device__ __forceinline__ u64 ws_load_t(const unsigned char* p) {
  if (EB == 1) return *p;
  if (EB == 2) return *reinterpret_cast<const unsigned short*>(p);
  if (EB == 4) return *reinterpret_cast<const unsigned*>(p);
  return *reinterpret_cast<const u64*>(p);
}

// What ws_delta_count keeps of one bucket while it reads it: its changed bits (in shared memory
// until the end, when they go to the slot unless the list is kept there), the list (changed
// elements' offsets and values, ranks < cap, written straight into the slot), and whether the
// source is also written into the reference.
struct WsMeasure {
  unsigned* smask;       // shared, bucket_elems / 32 words
  unsigned short* offs;  // the slot
  unsigned char* vals;   // the slot + delta_list_values_at
  unsigned cap;
  bool update;
};

// The CTA's 16-byte vectors [0, nvec) of a bucket (whole mask words): 4 vectors of each side in
// flight per thread; vector v holds elements [v * E, v * E + E) and gives E bits, and the G lanes
// of a mask word OR theirs together. One CTA scan per 4 * kDeltaThreads vectors ranks the
// changes (the 4 per-thread counts packed in 16-bit fields of a u64: a field's CTA total is at
// most 256 * 16). Under update, a vector is written into the reference when its 32-byte sector
// (it and its neighbour lane's) changed: whole sectors, no read-modify-write. Returns the changed
// elements (every thread).
template <unsigned EB>
__device__ __forceinline__ unsigned ws_measure_vec(const uint4* s, uint4* r, u64 nvec,
                                                   const WsMeasure& m, u64* red) {
  constexpr unsigned E = 16 / EB, G = 32 / E;
  const unsigned lane = threadIdx.x & 31u;
  unsigned carry = 0;
  for (u64 v0 = 0; v0 < nvec; v0 += 4 * WS_THREADS) {
    uint4 a[4], b[4];
#pragma unroll
    for (unsigned u = 0; u < 4; ++u) {
      const u64 v = v0 + u * WS_THREADS + threadIdx.x;
      if (v < nvec) {
        a[u] = __ldcs(s + v);
        b[u] = __ldcs(r + v);
      } else {
        a[u] = b[u] = make_uint4(0, 0, 0, 0);
      }
    }
    unsigned bits[4];
    u64 packed = 0;
#pragma unroll
    for (unsigned u = 0; u < 4; ++u) {
      const u64 v = v0 + u * WS_THREADS + threadIdx.x;
      bits[u] = ws_vec_bits<EB>(a[u], b[u]);
      packed |= u64{static_cast<unsigned>(__popc(bits[u]))} << (16 * u);
      unsigned word = bits[u] << (E * (lane % G));
#pragma unroll
      for (unsigned o = 1; o < G; o <<= 1) word |= __shfl_xor_sync(WS_FULL, word, o);
      if (v < nvec && lane % G == 0) m.smask[v / G] = word;
      if (m.update) {
        const unsigned sector = bits[u] | __shfl_xor_sync(WS_FULL, bits[u], 1);
        if (v < nvec && sector != 0) r[v] = a[u];
      }
    }
    u64 total;
    const u64 ex = ws_block_excl<WS_THREADS>(packed, red, total);
    unsigned base = carry;
#pragma unroll
    for (unsigned u = 0; u < 4; ++u) {
      const u64 v = v0 + u * WS_THREADS + threadIdx.x;
      unsigned rk = base + static_cast<unsigned>((ex >> (16 * u)) & 0xffffu);
      if (bits[u] != 0 && rk < m.cap) {  // (most vectors have no change at low densities)
#pragma unroll
        for (unsigned k = 0; k < E; ++k)
          if ((bits[u] >> k) & 1u) {
            if (rk < m.cap) {  // (the slot is 4-byte aligned: ws_store checks)
              m.offs[rk] = static_cast<unsigned short>(v * E + k);
              ws_store(m.vals + u64{rk} * EB, EB, ws_vec_get<EB>(a[u], k));
            }
            ++rk;
          }
      }
      base += static_cast<unsigned>((total >> (16 * u)) & 0xffffu);
    }
    carry = base;
  }
  return carry;
}

// Words [w_begin, ceil(len / 32)) element by element (any alignment; the tail of a vector pass):
// rounds of a word per warp, one ballot each, ranked across the warps through `wred` (NW shared
// words). Returns carry plus the changes found (every thread).
__device__ __forceinline__ unsigned ws_measure_words(const unsigned char* s, unsigned char* r,
                                                     unsigned eb, u64 w_begin, u64 len,
                                                     const WsMeasure& m, unsigned carry,
                                                     unsigned* wred) {
  constexpr unsigned NW = WS_THREADS / 32;
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const u64 nw = (len + 31) / 32;
  for (u64 w0 = w_begin; w0 < nw; w0 += NW) {
    const u64 w = w0 + warp, i = w * 32 + lane;
    u64 x = 0;
    bool d = false;
    if (w < nw && i < len) {
      x = ws_load(s + i * eb, eb);
      d = x != ws_load(r + i * eb, eb);
    }
    const unsigned word = __ballot_sync(WS_FULL, d);
    if (lane == 0) {
      wred[warp] = static_cast<unsigned>(__popc(word));
      if (w < nw) m.smask[w] = word;
    }
    __syncthreads();
    unsigned before = 0, total = 0;
#pragma unroll
    for (unsigned k = 0; k < NW; ++k) {
      const unsigned c = wred[k];
      before += k < warp ? c : 0u;
      total += c;
    }
    __syncthreads();  // (wred is written again next round)
    if (d) {
      const unsigned rk = carry + before + static_cast<unsigned>(__popc(word & ((1u << lane) - 1)));
      if (rk < m.cap) {
        m.offs[rk] = static_cast<unsigned short>(i);
        ws_store(m.vals + u64{rk} * eb, eb, x);
      }
      if (m.update) ws_store(r + i * eb, eb, x);
    }
    carry += total;
  }
  return carry;
}

// ---------------------------------------------------------------------------------------------
// Low-byte references (<weightsync/delta/low_byte.hpp>): a warp per block of kLowByteBlock = 256
// 2-byte elements, 8 per lane.

static_assert(wdl::kLowByteBlock == 256, "a warp of 8 elements per lane per block");

__device__ __forceinline__ u64 ws_warp_sum64(u64 v) {
#pragma unroll
  for (unsigned o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(WS_FULL, v, o);
  return v;
}

// Lane's 8 elements [e, e + 8) of `s` (2-byte elements; those at or past n are left 0) and of the
// low bytes `lo`: one 16-byte and one 8-byte load when aligned and whole, else element by element.
__device__ __forceinline__ void ws_low_byte_load(const unsigned char* s, const unsigned char* lo,
                                                 u64 e, u64 n, unsigned short (&v)[8],
                                                 unsigned char (&l)[8]) {
  if (e + 8 <= n && ((reinterpret_cast<u64>(s + e * 2) & 15) | (reinterpret_cast<u64>(lo + e) & 7)) == 0) {
    const uint4 a = __ldcs(reinterpret_cast<const uint4*>(s + e * 2));
    const u64 b = *reinterpret_cast<const u64*>(lo + e);
#pragma unroll
    for (unsigned j = 0; j < 8; ++j) {
      v[j] = static_cast<unsigned short>(ws_vec_get<2>(a, j));
      l[j] = static_cast<unsigned char>(b >> (8 * j));
    }
    return;
  }
#pragma unroll
  for (unsigned j = 0; j < 8; ++j) {
    v[j] = e + j < n ? *reinterpret_cast<const unsigned short*>(s + (e + j) * 2) : 0;
    l[j] = e + j < n ? lo[e + j] : 0;
  }
}

// A low-byte job's bucket [begin, begin + len) of its numel elements (begin a multiple of 256):
// as low_byte_changes_host, the elements whose low byte differs and every element of a block whose
// hash check fails (counted in *failed), as bits in m.smask; the low bytes and hashes updated in
// the same pass. The warps take blocks independently (no CTA barrier per block); the list, when
// the bucket needs one, is built from the bits afterwards (ws_low_byte_list). Returns the
// bucket's changes (every thread).
__device__ __forceinline__ unsigned ws_measure_low_byte(const unsigned char* src,
                                                        unsigned char* ref, u64 numel, u64 begin,
                                                        u64 len, const WsMeasure& m, u64* failed,
                                                        unsigned* wred) {
  constexpr unsigned NW = WS_THREADS / 32;
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  unsigned char* lo = ref;
  u64* hashes = reinterpret_cast<u64*>(ref + wdl::align8(numel));
  const u64 nblk = (len + 255) / 256, end = begin + len;
  unsigned mine = 0;  // this lane's changes
  for (u64 k = warp; k < nblk; k += NW) {
    const u64 e = begin + k * 256 + lane * 8;  // the lane's first element in the tensor
    unsigned short v[8];
    unsigned char l[8];
    ws_low_byte_load(src, lo, e, end, v, l);
    u64 stored = lane == 0 ? hashes[begin / 256 + k] : 0;
    unsigned bits = 0, valid = 0;
    u64 now = 0, rebuilt = 0;
#pragma unroll
    for (unsigned j = 0; j < 8; ++j) {
      if (e + j >= end) continue;
      valid |= 1u << j;
      const unsigned kk = lane * 8 + j;
      const u64 t = wdl::low_byte_term(kk, v[j]);
      now += t;
      if (static_cast<unsigned char>(v[j]) != l[j]) {
        bits |= 1u << j;
        rebuilt += wdl::low_byte_term(kk, wdl::low_byte_nearest(v[j], l[j]));
      } else {
        rebuilt += t;
      }
    }
    now = ws_warp_sum64(now);
    rebuilt = ws_warp_sum64(rebuilt);
    const bool any = __any_sync(WS_FULL, bits != 0);
    stored = __shfl_sync(WS_FULL, stored, 0);
    if (bits != 0)  // the reference's new low bytes
#pragma unroll
      for (unsigned j = 0; j < 8; ++j)
        if ((bits >> j) & 1u) lo[e + j] = static_cast<unsigned char>(v[j]);
    if ((any ? rebuilt : now) != stored) {  // a change the low bytes did not show: all of it
      bits = valid;
      if (lane == 0) atomicAdd(failed, 1ull);
    }
    if (lane == 0 && now != stored) hashes[begin / 256 + k] = now;
    mine += static_cast<unsigned>(__popc(bits));
    // the mask: 4 lanes make a word
    unsigned word = bits << (8 * (lane % 4));
    word |= __shfl_xor_sync(WS_FULL, word, 1);
    word |= __shfl_xor_sync(WS_FULL, word, 2);
    if (lane % 4 == 0 && k * 256 + lane * 8 < len) m.smask[k * 8 + lane / 4] = word;
  }
  unsigned wtotal;
  (void)ws_warp_excl(mine, wtotal);
  if (lane == 0) wred[warp] = wtotal;
  __syncthreads();  // (also: smask complete)
  unsigned total = 0;
#pragma unroll
  for (unsigned w = 0; w < NW; ++w) total += wred[w];
  return total;
}

// The list of a sparse bucket of at most m.cap changes from its bits in m.smask (element order,
// one CTA scan per 256 words): offsets, and the values read from `s` (the bucket's first element).
__device__ __forceinline__ void ws_low_byte_list(const unsigned char* s, u64 len, const WsMeasure& m,
                                                 u64* red) {
  const u64 nwords = (len + 31) / 32;
  u64 carry = 0;
  for (u64 w0 = 0; w0 < nwords; w0 += WS_THREADS) {
    const u64 w = w0 + threadIdx.x;
    unsigned word = w < nwords ? m.smask[w] : 0u;
    u64 total;
    u64 rk = carry + ws_block_excl<WS_THREADS>(u64{static_cast<unsigned>(__popc(word))}, red, total);
    while (word != 0) {
      const unsigned j = static_cast<unsigned>(__ffs(word)) - 1;
      word &= word - 1;
      const u64 i = w * 32 + j;
      if (rk < m.cap) {
        m.offs[rk] = static_cast<unsigned short>(i);
        ws_store(m.vals + rk * 2, 2, *reinterpret_cast<const unsigned short*>(s + i * 2));
      }
      ++rk;
    }
    carry += total;
  }
}

// A warp per block: the low bytes and hash of every block of `src` into the low-byte reference.
extern "C" __global__ void __launch_bounds__(WS_THREADS)
    ws_delta_lowbyte_seed(const __grid_constant__ wk::DeltaLowByteSeedParams p) {
  const unsigned lane = threadIdx.x & 31u;
  const auto* s = static_cast<const unsigned char*>(p.src);
  auto* lo = static_cast<unsigned char*>(p.ref);
  u64* hashes = reinterpret_cast<u64*>(lo + wdl::align8(p.numel));
  const u64 nblk = (p.numel + 255) / 256;
  const u64 warps = u64{gridDim.x} * (WS_THREADS / 32);
  for (u64 k = u64{blockIdx.x} * (WS_THREADS / 32) + (threadIdx.x >> 5); k < nblk; k += warps) {
    const u64 e = k * 256 + lane * 8;
    unsigned short v[8];
    unsigned char l[8];
    ws_low_byte_load(s, lo, e, p.numel, v, l);
    u64 h = 0;
#pragma unroll
    for (unsigned j = 0; j < 8; ++j)
      if (e + j < p.numel) {
        lo[e + j] = static_cast<unsigned char>(v[j]);
        h += wdl::low_byte_term(lane * 8 + j, v[j]);
      }
    h = ws_warp_sum64(h);
    if (lane == 0) hashes[k] = h;
  }
}

// A bucket's end of the count: in its slot the changed bits when encode reads them (a bitmask
// bucket, a sparse one whose list did not fit; an unchanged or raw bucket needs neither), and its
// count.
__device__ __forceinline__ void ws_count_finish(const wk::DeltaEncodeParams& p, u64 g, u64 len,
                                                unsigned eb, unsigned count, const WsMeasure& m,
                                                unsigned* slot) {
  __syncthreads();  // smask complete; the list's stores ordered before the mask's below
  const wdl::BucketKind kind = wdl::choose_kind(len, count, eb);
  if (kind == wdl::BucketKind::bitmask || (kind == wdl::BucketKind::sparse && count > m.cap))
    for (u64 w = threadIdx.x; w < (len + 31) / 32; w += WS_THREADS) slot[w] = m.smask[w];
  if (threadIdx.x == 0) p.counts[g] = count;
  __syncthreads();  // smask is the next bucket's
}

// A CTA per bucket: its count, and in its slot either the list (a sparse bucket of at most cap
// changes) or its changed bits; under kDeltaUpdateRef the reference becomes the source. Buckets
// of low-byte jobs are ws_delta_count_lowbyte's.
extern "C" __global__ void __launch_bounds__(WS_THREADS, 4)
    ws_delta_count(const __grid_constant__ wk::DeltaEncodeParams p) {
  __shared__ u64 red[WS_THREADS / 32];
  __shared__ unsigned wred[WS_THREADS / 32];
  __shared__ unsigned smask[wdl::kMaxBucketElems / 32];
  const u64 wpb = p.bucket_elems / 32;
  for (u64 g = blockIdx.x; g < p.n_buckets; g += gridDim.x) {
    const wk::DeltaEncodeJob J = p.jobs[p.bucket_job[g]];
    if (J.low_byte) continue;
    const u64 b = g - J.bucket_base, begin = b * p.bucket_elems;
    const u64 len = wdl::bucket_len(J.numel, p.bucket_elems, b);
    const unsigned eb = J.elem_bytes;
    const auto* s = static_cast<const unsigned char*>(J.src) + begin * eb;
    // (the reference is written only under kDeltaUpdateRef, which the launcher sets for writable
    // references)
    auto* r = const_cast<unsigned char*>(static_cast<const unsigned char*>(J.ref)) + begin * eb;
    unsigned* slot = p.mask + g * wpb;
    WsMeasure m{smask, reinterpret_cast<unsigned short*>(slot),
                reinterpret_cast<unsigned char*>(slot) + wk::delta_list_values_at(p.bucket_elems, eb),
                wk::delta_list_cap(p.bucket_elems, eb), (p.flags & wk::kDeltaUpdateRef) != 0};
    unsigned count = 0;
    u64 done = 0;  // words
    if (((reinterpret_cast<u64>(s) | reinterpret_cast<u64>(r)) & 15) == 0) {
      done = len / 32;  // whole words are whole 16-byte vectors (32 * eb bytes)
      const u64 nvec = done * 2 * eb;
      const auto* sv = reinterpret_cast<const uint4*>(s);
      auto* rv = reinterpret_cast<uint4*>(r);
      switch (eb) {
        case 1:
          count = ws_measure_vec<1>(sv, rv, nvec, m, red);
          break;
        case 2:
          count = ws_measure_vec<2>(sv, rv, nvec, m, red);
          break;
        case 4:
          count = ws_measure_vec<4>(sv, rv, nvec, m, red);
          break;
        default:
          count = ws_measure_vec<8>(sv, rv, nvec, m, red);
          break;
      }
    }
    count = ws_measure_words(s, r, eb, done, len, m, count, wred);
    ws_count_finish(p, g, len, eb, count, m, slot);
  }
}

// ws_delta_count for the buckets of low-byte jobs (launched only when the batch has one): 2-byte
// elements, buckets of whole kLowByteBlock blocks (the launcher checks); the reference (low
// bytes and block hashes) is always updated, as low_byte_changes_host updates it.
extern "C" __global__ void __launch_bounds__(WS_THREADS, 4)
    ws_delta_count_lowbyte(const __grid_constant__ wk::DeltaEncodeParams p) {
  __shared__ u64 red[WS_THREADS / 32];
  __shared__ unsigned wred[WS_THREADS / 32];
  __shared__ unsigned smask[wdl::kMaxBucketElems / 32];
  const u64 wpb = p.bucket_elems / 32;
  for (u64 g = blockIdx.x; g < p.n_buckets; g += gridDim.x) {
    const wk::DeltaEncodeJob J = p.jobs[p.bucket_job[g]];
    if (!J.low_byte) continue;
    const u64 b = g - J.bucket_base, begin = b * p.bucket_elems;
    const u64 len = wdl::bucket_len(J.numel, p.bucket_elems, b);
    unsigned* slot = p.mask + g * wpb;
    WsMeasure m{smask, reinterpret_cast<unsigned short*>(slot),
                reinterpret_cast<unsigned char*>(slot) + wk::delta_list_values_at(p.bucket_elems, 2),
                wk::delta_list_cap(p.bucket_elems, 2), true};
    const unsigned count = ws_measure_low_byte(
        static_cast<const unsigned char*>(J.src),
        const_cast<unsigned char*>(static_cast<const unsigned char*>(J.ref)), J.numel, begin, len,
        m, reinterpret_cast<u64*>(p.totals + 2), wred);
    if (wdl::choose_kind(len, count, 2) == wdl::BucketKind::sparse && count <= m.cap)
      ws_low_byte_list(static_cast<const unsigned char*>(J.src) + begin * 2, len, m, red);
    ws_count_finish(p, g, len, 2, count, m, slot);
  }
}

// ---------------------------------------------------------------------------------------------
// A CTA per bitmask bucket (encode and apply): every thread takes 16-byte vectors, so a bucket
// costs a few round trips, not one per word.

// An element's value in registers.
template <unsigned EB>
struct WsElem {
  using type = unsigned;
};
template <>
struct WsElem<8> {
  using type = u64;
};

// The E = 16 / EB bits of vector v of a bucket's mask words.
template <unsigned E>
__device__ __forceinline__ unsigned ws_vbits(const unsigned* words, u64 v) {
  return (words[v * E / 32] >> (v * E % 32)) & ((1u << E) - 1u);
}

// Encode: the values of the set bits of vectors [0, nvec) of `s` (whole words), in order, into
// `values`: 4 vectors per thread per pass, read only when they have a set bit, ranked by one
// CTA scan per pass.
template <unsigned EB>
__device__ __forceinline__ void ws_bitmask_encode_cta(const unsigned* words, const uint4* s,
                                                      u64 nvec, unsigned char* values, u64* red) {
  constexpr unsigned E = 16 / EB;
  unsigned carry = 0;
  for (u64 v0 = 0; v0 < nvec; v0 += 4 * WS_THREADS) {
    unsigned bits[4];
    uint4 a[4];
    u64 packed = 0;
#pragma unroll
    for (unsigned u = 0; u < 4; ++u) {
      const u64 v = v0 + u * WS_THREADS + threadIdx.x;
      bits[u] = v < nvec ? ws_vbits<E>(words, v) : 0u;
    }
#pragma unroll
    for (unsigned u = 0; u < 4; ++u) {
      const u64 v = v0 + u * WS_THREADS + threadIdx.x;
      a[u] = bits[u] != 0 ? __ldcs(s + v) : make_uint4(0, 0, 0, 0);
      packed |= u64{static_cast<unsigned>(__popc(bits[u]))} << (16 * u);
    }
    u64 total;
    const u64 ex = ws_block_excl<WS_THREADS>(packed, red, total);
    unsigned base = carry;
#pragma unroll
    for (unsigned u = 0; u < 4; ++u) {
      unsigned rk = base + static_cast<unsigned>((ex >> (16 * u)) & 0xffffu);
#pragma unroll
      for (unsigned k = 0; k < E; ++k)
        if ((bits[u] >> k) & 1u) ws_store_t<EB>(values + u64{rk++} * EB, ws_vec_get<EB>(a[u], k));
      base += static_cast<unsigned>((total >> (16 * u)) & 0xffffu);
    }
    carry = base;
  }
}

// Apply: the set bits of vectors [0, nvec) of `d` (whole words) take the next values, in order.
// A vector is read, merged and written whole when its 32-byte sector (it and its neighbour
// lane's) has a change: whole-sector writes, no read-modify-write in the memory system.
template <unsigned EB>
__device__ __forceinline__ void ws_bitmask_apply_cta(const unsigned* words,
                                                     const unsigned char* values, uint4* d,
                                                     u64 nvec, u64* red) {
  constexpr unsigned E = 16 / EB;
  unsigned carry = 0;
  for (u64 v0 = 0; v0 < nvec; v0 += 4 * WS_THREADS) {
    unsigned bits[4], sector[4];
    uint4 a[4];
    u64 packed = 0;
#pragma unroll
    for (unsigned u = 0; u < 4; ++u) {
      const u64 v = v0 + u * WS_THREADS + threadIdx.x;
      bits[u] = v < nvec ? ws_vbits<E>(words, v) : 0u;
    }
#pragma unroll
    for (unsigned u = 0; u < 4; ++u) {
      const u64 v = v0 + u * WS_THREADS + threadIdx.x;
      // (nvec is even: a vector and its neighbour are both inside or both past the end)
      sector[u] = bits[u] | __shfl_xor_sync(WS_FULL, bits[u], 1);
      a[u] = sector[u] != 0 ? d[v] : make_uint4(0, 0, 0, 0);
      packed |= u64{static_cast<unsigned>(__popc(bits[u]))} << (16 * u);
    }
    u64 total;
    const u64 ex = ws_block_excl<WS_THREADS>(packed, red, total);
    unsigned base = carry;
#pragma unroll
    for (unsigned u = 0; u < 4; ++u) {
      const u64 v = v0 + u * WS_THREADS + threadIdx.x;
      const unsigned rk = base + static_cast<unsigned>((ex >> (16 * u)) & 0xffffu);
      typename WsElem<EB>::type x[E];
#pragma unroll
      for (unsigned k = 0; k < E; ++k)
        x[k] = (bits[u] >> k) & 1u
                   ? static_cast<typename WsElem<EB>::type>(ws_load_t<EB>(
                         values +
                         u64{rk + static_cast<unsigned>(__popc(bits[u] & ((1u << k) - 1u)))} * EB))
                   : 0;
#pragma unroll
      for (unsigned k = 0; k < E; ++k)
        if ((bits[u] >> k) & 1u) ws_vec_set<EB>(a[u], k, x[k]);
      if (sector[u] != 0) d[v] = a[u];
      base += static_cast<unsigned>((total >> (16 * u)) & 0xffffu);
    }
    carry = base;
  }
}

// Any alignment (the rare path): fn(i, rank) for every set bit i < len of the W words, in rounds
// of a word per warp, ranked across the warps through `wred`.
template <class F>
__device__ __forceinline__ void ws_bits_cta(const unsigned* words, u64 W, u64 len, unsigned* wred,
                                            F&& fn) {
  constexpr unsigned NW = WS_THREADS / 32;
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  unsigned carry = 0;
  for (u64 w0 = 0; w0 < W; w0 += NW) {
    const u64 w = w0 + warp;
    const unsigned word = w < W ? ws_word(words, w, len) : 0u;
    if (lane == 0) wred[warp] = static_cast<unsigned>(__popc(word));
    __syncthreads();
    unsigned before = 0, total = 0;
#pragma unroll
    for (unsigned k = 0; k < NW; ++k) {
      const unsigned c = wred[k];
      before += k < warp ? c : 0u;
      total += c;
    }
    __syncthreads();
    if ((word >> lane) & 1u)
      fn(w * 32 + lane, carry + before + static_cast<unsigned>(__popc(word & ((1u << lane) - 1u))));
    carry += total;
  }
}

// Payload bytes of global bucket g (its changed count in `count`).
__device__ __forceinline__ u64 ws_enc_size(const wk::DeltaEncodeParams& p, u64 g, unsigned& count) {
  const wk::DeltaEncodeJob J = p.jobs[p.bucket_job[g]];
  const u64 len = wdl::bucket_len(J.numel, p.bucket_elems, g - J.bucket_base);
  count = p.counts[g];
  return wdl::payload_bytes(wdl::choose_kind(len, count, J.elem_bytes), len, count, J.elem_bytes);
}

extern "C" __global__ void __launch_bounds__(WS_THREADS)
    ws_delta_chunks(const __grid_constant__ wk::DeltaEncodeParams p) {
  __shared__ u64 red[WS_THREADS / 32];
  constexpr unsigned C = wk::kDeltaEncodeChunk, K = C / WS_THREADS;
  const u64 nc = (p.n_buckets + C - 1) / C;
  for (u64 c = blockIdx.x; c < nc; c += gridDim.x) {
    const u64 g0 = c * C + threadIdx.x * K;
    u64 size[K], sum = 0, changed = 0;
#pragma unroll
    for (unsigned k = 0; k < K; ++k) {
      unsigned count = 0;
      size[k] = g0 + k < p.n_buckets ? ws_enc_size(p, g0 + k, count) : 0;
      sum += size[k];
      changed += count;
    }
    u64 total;
    u64 at = ws_block_excl<WS_THREADS>(sum, red, total);
#pragma unroll
    for (unsigned k = 0; k < K; ++k) {
      if (g0 + k < p.n_buckets) p.local[g0 + k] = static_cast<unsigned>(at);  // < 2^30
      at += size[k];
    }
    changed = ws_block_sum<WS_THREADS>(changed, red);
    if (threadIdx.x == 0) {
      p.chunk_base[c] = total;
      p.chunk_changed[c] = changed;
    }
  }
}

extern "C" __global__ void __launch_bounds__(WS_SCAN_THREADS)
    ws_delta_top(const __grid_constant__ wk::DeltaEncodeParams p) {
  __shared__ u64 red[WS_SCAN_THREADS / 32];
  constexpr unsigned C = wk::kDeltaEncodeChunk;
  const u64 nc = (p.n_buckets + C - 1) / C;
  u64 carry = 0, changed = 0;
  for (u64 c0 = 0; c0 < nc; c0 += WS_SCAN_THREADS) {
    const u64 c = c0 + threadIdx.x;
    const u64 v = c < nc ? p.chunk_base[c] : 0;
    changed += c < nc ? p.chunk_changed[c] : 0;
    u64 total;
    const u64 ex = ws_block_excl<WS_SCAN_THREADS>(v, red, total);
    if (c < nc) p.chunk_base[c] = carry + ex;
    carry += total;
  }
  changed = ws_block_sum<WS_SCAN_THREADS>(changed, red);  // (its barriers publish chunk_base)
  if (threadIdx.x == 0) {
    p.chunk_base[nc] = carry;
    p.totals[0] = changed;
    p.totals[1] = carry;
  }
  // the batch-wide exclusive scan of payload bytes at global bucket x
  const auto scan_at = [&](u64 x) {
    return x < p.n_buckets ? p.chunk_base[x / C] + p.local[x] : carry;
  };
  for (unsigned j = threadIdx.x; j < p.n_jobs; j += WS_SCAN_THREADS) {
    const wk::DeltaEncodeJob J = p.jobs[j];
    const u64 s0 = scan_at(J.bucket_base), s1 = scan_at(J.bucket_base + J.n_buckets);
    p.results[j] = wk::DeltaEncodeResult{wdl::blob_prefix_bytes(J.n_buckets) + s1 - s0, s0};
  }
}

// The sparse payload of a bucket (count set bits in `words`, which measure left clean past len):
// lane l ranks the set bits of its own run of words (a warp scan of the runs' popcounts) and
// writes their offsets; then the warp reads the offsets back and gathers the values, 256 in
// flight (8 per lane), so a bucket costs a few round trips however its changes fall.
__device__ __forceinline__ void ws_encode_sparse(const unsigned* words, u64 W, u64 len,
                                                 unsigned count, const unsigned char* s,
                                                 unsigned eb, unsigned char* pl) {
  constexpr unsigned U = 8;
  const unsigned lane = ws_lane();
  auto* offs = reinterpret_cast<unsigned short*>(pl);
  const u64 K = (W + 31) / 32;  // words per lane
  const u64 w0 = min(W, lane * K), w1 = min(W, w0 + K);
  const bool vec = K % 4 == 0 && W % 4 == 0 && len % 32 == 0 &&
                   (reinterpret_cast<u64>(words) & 15) == 0;
  unsigned n = 0;
  if (vec) {  // (then w0, w1 are multiples of 4)
#pragma unroll 4
    for (u64 w = w0; w < w1; w += 4) {
      const uint4 q = *reinterpret_cast<const uint4*>(words + w);
      n += static_cast<unsigned>(__popc(q.x) + __popc(q.y) + __popc(q.z) + __popc(q.w));
    }
  } else {
#pragma unroll 4
    for (u64 w = w0; w < w1; ++w) n += static_cast<unsigned>(__popc(ws_word(words, w, len)));
  }
  unsigned total;
  unsigned r = ws_warp_excl(n, total);
  for (u64 w = w0; w < w1; ++w) {
    unsigned word = ws_word(words, w, len);
    while (word != 0) {
      const unsigned bit = static_cast<unsigned>(__ffs(word)) - 1;
      word &= word - 1;
      offs[r++] = static_cast<unsigned short>(w * 32 + bit);
    }
  }
  const u64 n2 = u64{count} * 2, nv = u64{count} * eb;
  unsigned char* values = pl + wdl::align8(n2);
  if (lane < wdl::align8(n2) - n2) pl[n2 + lane] = 0;
  if (lane < wdl::align8(nv) - nv) values[nv + lane] = 0;
  __syncwarp();  // (orders the offsets' stores before the other lanes' loads)
  for (u64 v0 = 0; v0 < count; v0 += 32 * U) {
    unsigned o[U];
    u64 x[U];
#pragma unroll
    for (unsigned u = 0; u < U; ++u) {
      const u64 v = v0 + u * 32 + lane;
      o[u] = v < count ? offs[v] : 0u;
    }
#pragma unroll
    for (unsigned u = 0; u < U; ++u) {
      const u64 v = v0 + u * 32 + lane;
      x[u] = v < count ? ws_load(s + u64{o[u]} * eb, eb) : 0;
    }
#pragma unroll
    for (unsigned u = 0; u < U; ++u) {
      const u64 v = v0 + u * 32 + lane;
      if (v < count) ws_store(values + v * eb, eb, x[u]);
    }
  }
}

// What ws_delta_encode needs of global bucket g, read by one lane (the loads of a warp's 32
// buckets in flight together: at low densities encode is bound by these round trips, not bytes).
struct WsEncBucket {
  unsigned char* out;      // the job's blob (nullptr: not encoded, or no bucket)
  const unsigned char* s;  // the bucket's first source element
  u64 b, len, off;         // bucket in its job, elements, payload offset in the blob
  unsigned count, eb;
  wdl::BucketKind kind;
};

__device__ __forceinline__ WsEncBucket ws_enc_bucket(const wk::DeltaEncodeParams& p, u64 g) {
  constexpr unsigned C = wk::kDeltaEncodeChunk;
  WsEncBucket x{};
  if (g >= p.n_buckets) return x;
  const unsigned j = p.bucket_job[g];
  const unsigned count = p.counts[g];
  const u64 at = p.chunk_base[g / C] + p.local[g];
  x.out = static_cast<unsigned char*>(p.outs[j]);
  if (x.out == nullptr) return x;  // not encoded (the caller sends it whole)
  const wk::DeltaEncodeJob J = p.jobs[j];
  x.eb = J.elem_bytes;
  x.b = g - J.bucket_base;
  x.len = wdl::bucket_len(J.numel, p.bucket_elems, x.b);
  x.s = static_cast<const unsigned char*>(J.src) + x.b * p.bucket_elems * x.eb;
  x.count = count;
  x.kind = wdl::choose_kind(x.len, count, x.eb);
  x.off = wdl::blob_prefix_bytes(J.n_buckets) + at - p.results[j].scan_base;
  return x;
}

// A sparse bucket's payload, by its warp: the list measure kept, copied, or the offsets ranked
// from the changed bits and the values gathered through them.
__device__ __forceinline__ void ws_encode_sparse_bucket(const wk::DeltaEncodeParams& p, u64 g,
                                                        const WsEncBucket& x) {
  const unsigned lane = ws_lane();
  unsigned char* pl = x.out + x.off;
  const auto* slot = reinterpret_cast<const unsigned char*>(p.mask + g * (p.bucket_elems / 32));
  if (x.count <= wk::delta_list_cap(p.bucket_elems, x.eb)) {  // the list: two copies
    const u64 n2 = u64{x.count} * 2;
    ws_copy<32>(pl, slot, n2, true, lane);
    ws_copy<32>(pl + wdl::align8(n2), slot + wk::delta_list_values_at(p.bucket_elems, x.eb),
                u64{x.count} * x.eb, true, lane);
  } else {
    ws_encode_sparse(reinterpret_cast<const unsigned*>(slot), (x.len + 31) / 32, x.len, x.count,
                     x.s, x.eb, pl);
  }
}

// A raw or bitmask bucket, by the whole CTA.
__device__ __forceinline__ void ws_encode_cta(const wk::DeltaEncodeParams& p, u64 g, u64* red,
                                              unsigned* wred) {
  constexpr unsigned C = wk::kDeltaEncodeChunk;
  const unsigned j = p.bucket_job[g];
  auto* out = static_cast<unsigned char*>(p.outs[j]);
  const wk::DeltaEncodeJob J = p.jobs[j];
  const unsigned eb = J.elem_bytes;
  const u64 b = g - J.bucket_base, begin = b * p.bucket_elems;
  const u64 len = wdl::bucket_len(J.numel, p.bucket_elems, b);
  const unsigned count = p.counts[g];
  const u64 off = wdl::blob_prefix_bytes(J.n_buckets) + p.chunk_base[g / C] + p.local[g] -
                  p.results[j].scan_base;
  unsigned char* pl = out + off;
  const auto* s = static_cast<const unsigned char*>(J.src) + begin * eb;
  if (wdl::choose_kind(len, count, eb) == wdl::BucketKind::raw) {
    ws_copy<WS_THREADS>(pl, s, len * eb, true, threadIdx.x);
    return;
  }
  // bitmask: the words (padded to 8 bytes), then the values (padded)
  const unsigned* words = p.mask + g * (p.bucket_elems / 32);
  const u64 W = (len + 31) / 32;
  auto* ow = reinterpret_cast<unsigned*>(pl);
  if (threadIdx.x == 0 && W % 2 != 0) ow[W] = 0u;
  for (u64 w = threadIdx.x; w < W; w += WS_THREADS) ow[w] = ws_word(words, w, len);
  unsigned char* values = pl + wdl::align8(W * 4);
  const u64 nv = u64{count} * eb;
  if (threadIdx.x < wdl::align8(nv) - nv) values[nv + threadIdx.x] = 0;
  if ((reinterpret_cast<u64>(s) & 15) == 0 && len % 32 == 0) {
    const auto* sv = reinterpret_cast<const uint4*>(s);
    const u64 nvec = len * eb / 16;
    switch (eb) {
      case 1:
        ws_bitmask_encode_cta<1>(words, sv, nvec, values, red);
        break;
      case 2:
        ws_bitmask_encode_cta<2>(words, sv, nvec, values, red);
        break;
      case 4:
        ws_bitmask_encode_cta<4>(words, sv, nvec, values, red);
        break;
      default:
        ws_bitmask_encode_cta<8>(words, sv, nvec, values, red);
        break;
    }
  } else {
    ws_bits_cta(words, W, len, wred,
                [&](u64 i, unsigned r) { ws_store(values + u64{r} * eb, eb, ws_load(s + i * eb, eb)); });
  }
}

// The lists of up to 4 of the warp's sparse buckets (`lists`: lanes whose bucket's list measure
// kept has both sections within 512 bytes) copied into their payloads, every load issued before
// the first store: 8-byte units (the slot's sections and the payload's are 8-byte aligned), lane
// l taking units l and l + 32 of each section, the tail unit's bytes past the section zeroed (the
// blob's padding). Returns the lanes left.
__device__ __forceinline__ unsigned ws_copy_lists(const wk::DeltaEncodeParams& p,
                                                  const WsEncBucket& x, u64 g, unsigned lists) {
  constexpr unsigned Q = 4;
  const unsigned lane = ws_lane();
  uint2 v[Q][2][2];
  uint2* d[Q][2];
  unsigned units[Q][2];
#pragma unroll
  for (unsigned q = 0; q < Q; ++q) {
    const unsigned k = lists != 0 ? static_cast<unsigned>(__ffs(lists)) - 1 : 0u;
    const bool any = lists != 0;
    lists &= lists - 1;
    unsigned char* out = reinterpret_cast<unsigned char*>(
        __shfl_sync(WS_FULL, reinterpret_cast<u64>(x.out), k));
    const u64 off = __shfl_sync(WS_FULL, x.off, k);
    const unsigned count = __shfl_sync(WS_FULL, x.count, k);
    const unsigned eb = __shfl_sync(WS_FULL, x.eb, k);
    const u64 gk = g - lane + k;
    const auto* slot = reinterpret_cast<const unsigned char*>(p.mask + gk * (p.bucket_elems / 32));
    const u64 n[2] = {u64{count} * 2, u64{count} * eb};
    const unsigned char* from[2] = {slot, slot + wk::delta_list_values_at(p.bucket_elems, eb)};
    unsigned char* to[2] = {out + off, out + off + wdl::align8(n[0])};
#pragma unroll
    for (unsigned a = 0; a < 2; ++a) {
      units[q][a] = any ? static_cast<unsigned>(wdl::align8(n[a]) / 8) : 0u;
      d[q][a] = reinterpret_cast<uint2*>(to[a]);
#pragma unroll
      for (unsigned r = 0; r < 2; ++r) {
        const unsigned u = r * 32 + lane;
        uint2 w = make_uint2(0, 0);
        if (u < units[q][a]) {
          w = __ldg(reinterpret_cast<const uint2*>(from[a]) + u);
          const u64 tail = n[a] - u64{u} * 8;  // bytes of the section in this unit
          if (tail < 8) {
            const u64 keep = (u64{1} << (8 * tail)) - 1;
            w.x &= static_cast<unsigned>(keep);
            w.y &= static_cast<unsigned>(keep >> 32);
          }
        }
        v[q][a][r] = w;
      }
    }
  }
#pragma unroll
  for (unsigned q = 0; q < Q; ++q)
#pragma unroll
    for (unsigned a = 0; a < 2; ++a)
#pragma unroll
      for (unsigned r = 0; r < 2; ++r)
        if (r * 32 + lane < units[q][a]) d[q][a][r * 32 + lane] = v[q][a][r];
  return lists;
}

// A CTA per kDeltaThreads buckets: thread t reads bucket t's metadata and writes its directory
// entry (the warp's 32 buckets' loads in flight together, the entries' stores coalesced); each
// warp then writes its sparse buckets' payloads one after another; then the CTA's raw and
// bitmask buckets by the whole CTA, one after another; then CTAs of headers (a thread per job).
extern "C" __global__ void __launch_bounds__(WS_THREADS, 4)
    ws_delta_encode(const __grid_constant__ wk::DeltaEncodeParams p) {
  constexpr unsigned NW = WS_THREADS / 32;
  __shared__ u64 red[NW];
  __shared__ unsigned wred[NW];
  __shared__ unsigned coop[WS_THREADS];
  __shared__ unsigned ncoop;
  const u64 bctas = (p.n_buckets + WS_THREADS - 1) / WS_THREADS;
  const u64 items = bctas + (p.n_jobs + WS_THREADS - 1) / WS_THREADS;
  for (u64 it = blockIdx.x; it < items; it += gridDim.x) {
    if (it >= bctas) {  // the headers, a thread per job (the same branch for the whole CTA)
      const u64 j = (it - bctas) * WS_THREADS + threadIdx.x;
      if (j < p.n_jobs && p.outs[j] != nullptr) {  // (a null out: the job is not encoded)
        const wk::DeltaEncodeJob J = p.jobs[j];
        wdl::BlobHeader h{};
        h.magic = wdl::kBlobMagic;
        h.elem_bytes = static_cast<unsigned char>(J.elem_bytes);
        h.bucket_elems = p.bucket_elems;
        h.n_buckets = J.n_buckets;
        h.numel = J.numel;
        h.blob_bytes = p.results[j].blob_bytes;
        *static_cast<wdl::BlobHeader*>(p.outs[j]) = h;
      }
      continue;
    }
    if (threadIdx.x == 0) ncoop = 0;
    __syncthreads();
    const u64 g = it * WS_THREADS + threadIdx.x;
    const WsEncBucket x = ws_enc_bucket(p, g);
    if (x.out != nullptr) {
      wdl::BucketEntry e{};
      e.offset = x.kind == wdl::BucketKind::unchanged ? 0 : x.off;
      e.count = x.kind == wdl::BucketKind::raw ? static_cast<unsigned>(x.len) : x.count;
      e.kind = static_cast<unsigned char>(x.kind);
      *reinterpret_cast<wdl::BucketEntry*>(x.out + sizeof(wdl::BlobHeader) +
                                           x.b * sizeof(wdl::BucketEntry)) = e;
      if (x.kind == wdl::BucketKind::raw || x.kind == wdl::BucketKind::bitmask)
        coop[atomicAdd(&ncoop, 1u)] = threadIdx.x;
    }
    const bool sp = x.out != nullptr && x.kind == wdl::BucketKind::sparse;
    // (both sections of the list within 512 bytes: offsets 2 bytes, values eb bytes each)
    const bool short_list = sp && x.count <= wk::delta_list_cap(p.bucket_elems, x.eb) &&
                            x.count <= 512u / (x.eb > 2 ? x.eb : 2u);
    unsigned lists = __ballot_sync(WS_FULL, short_list);
    while (lists != 0) lists = ws_copy_lists(p, x, g, lists);
    unsigned sparse = __ballot_sync(WS_FULL, sp && !short_list);
    while (sparse != 0) {
      const unsigned k = static_cast<unsigned>(__ffs(sparse)) - 1;
      sparse &= sparse - 1;
      WsEncBucket y;
      y.out = reinterpret_cast<unsigned char*>(
          __shfl_sync(WS_FULL, reinterpret_cast<u64>(x.out), k));
      y.s = reinterpret_cast<const unsigned char*>(
          __shfl_sync(WS_FULL, reinterpret_cast<u64>(x.s), k));
      y.b = __shfl_sync(WS_FULL, x.b, k);
      y.len = __shfl_sync(WS_FULL, x.len, k);
      y.off = __shfl_sync(WS_FULL, x.off, k);
      y.count = __shfl_sync(WS_FULL, x.count, k);
      y.eb = __shfl_sync(WS_FULL, x.eb, k);
      y.kind = wdl::BucketKind::sparse;
      ws_encode_sparse_bucket(p, g - ws_lane() + k, y);
    }
    __syncthreads();  // (ncoop and coop complete)
    const unsigned nc = ncoop;
    for (unsigned c = 0; c < nc; ++c) ws_encode_cta(p, it * WS_THREADS + coop[c], red, wred);
    __syncthreads();  // (ncoop is reset next item)
  }
}

// ---------------------------------------------------------------------------------------------
// Apply

// The largest i < n whose first check chunk is <= c: the blob of check chunk c (blobs without
// buckets share the next one's base and are never the largest).
__device__ __forceinline__ unsigned ws_find(const wk::DeltaApplyState* st, unsigned n, u64 c) {
  unsigned lo = 0, hi = n;
  while (hi - lo > 1) {
    const unsigned mid = (lo + hi) / 2;
    if (st[mid].chunk_base <= c)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

__device__ __forceinline__ const wdl::BucketEntry* ws_dir(const wk::DeltaApplyJob& J) {
  return reinterpret_cast<const wdl::BucketEntry*>(static_cast<const unsigned char*>(J.blob) +
                                                   sizeof(wdl::BlobHeader));
}

// Payload bytes of a directory entry whose kind and count are sane, else 0 (ws_entry_code says
// why it is not).
__device__ __forceinline__ u64 ws_entry_size(const wdl::BucketEntry& e, u64 len, unsigned eb) {
  if (e.kind == 0 || e.kind > 3 || e.count == 0 || e.count > len || (e.kind == 1 && e.count != len))
    return 0;
  return wdl::payload_bytes(static_cast<wdl::BucketKind>(e.kind), len, e.count, eb);
}

// check_delta_blob's checks of one entry, in its order (0: fine); `at`: where the payloads
// before it end.
__device__ __forceinline__ unsigned ws_entry_code(const wdl::BucketEntry& e, u64 len, unsigned eb,
                                                  u64 at, u64 blob_bytes) {
  if (e.kind > 3) return wk::kDeltaErrKind;
  if (e.kind == 0) return e.count != 0 || e.offset != 0 ? wk::kDeltaErrUnchanged : 0;
  if (e.count == 0 || e.count > len || (e.kind == 1 && e.count != len)) return wk::kDeltaErrCount;
  if (e.offset != at) return wk::kDeltaErrOffset;
  // (at > blob_bytes only after an earlier bad entry, which wins; but never read past the end)
  if (at > blob_bytes || ws_entry_size(e, len, eb) > blob_bytes - at) return wk::kDeltaErrPastEnd;
  return 0;
}

__device__ __forceinline__ void ws_fail(wk::DeltaApplyState* st, u64 position, unsigned code) {
  atomicMin(reinterpret_cast<u64*>(&st->err), (position << 8) | code);
}

extern "C" __global__ void __launch_bounds__(WS_THREADS)
    ws_delta_vhead(const __grid_constant__ wk::DeltaApplyParams p) {
  for (u64 i = u64{blockIdx.x} * WS_THREADS + threadIdx.x; i < p.n_jobs;
       i += u64{gridDim.x} * WS_THREADS) {
    const wk::DeltaApplyJob J = p.jobs[i];
    wk::DeltaApplyState st{};
    st.err = wk::kDeltaNoError;
    unsigned code = 0;
    u64 a = 0, b = 0;
    if (J.blob_bytes < sizeof(wdl::BlobHeader)) {
      code = wk::kDeltaErrShort;
      a = J.blob_bytes;
    } else {
      const wdl::BlobHeader h = *static_cast<const wdl::BlobHeader*>(J.blob);
      if (h.magic != wdl::kBlobMagic) {
        code = wk::kDeltaErrMagic;
      } else if (h.elem_bytes != J.elem_bytes) {
        code = wk::kDeltaErrElemBytes, a = h.elem_bytes, b = J.elem_bytes;
      } else if (h.numel != J.numel) {
        code = wk::kDeltaErrNumel, a = h.numel, b = J.numel;
      } else if (h.bucket_elems == 0 || h.bucket_elems > wdl::kMaxBucketElems ||
                 h.bucket_elems % 32 != 0) {
        code = wk::kDeltaErrBucketElems, a = h.bucket_elems;
      } else if (h.n_buckets != wdl::bucket_count(J.numel, h.bucket_elems)) {
        code = wk::kDeltaErrNBuckets, a = h.n_buckets,
        b = wdl::bucket_count(J.numel, h.bucket_elems);
      } else if (h.blob_bytes != J.blob_bytes) {
        code = wk::kDeltaErrBlobBytes, a = h.blob_bytes, b = J.blob_bytes;
      } else if (wdl::blob_prefix_bytes(h.n_buckets) > J.blob_bytes) {
        code = wk::kDeltaErrDirectory;
      } else {
        st.n_buckets = h.n_buckets;
        st.bucket_elems = h.bucket_elems;
        if (h.n_buckets == 0 && J.blob_bytes != wdl::blob_prefix_bytes(0)) {
          st.err = (u64{1} << 8) | wk::kDeltaErrTrailing;  // position n_buckets + 1
          st.trail_at = wdl::blob_prefix_bytes(0);
        }
      }
    }
    if (code != 0) {
      st.err = code;  // position 0
      st.a = a;
      st.b = b;
    }
    p.state[i] = st;
  }
}

extern "C" __global__ void __launch_bounds__(WS_SCAN_THREADS)
    ws_delta_vbase(const __grid_constant__ wk::DeltaApplyParams p) {
  __shared__ u64 red[WS_SCAN_THREADS / 32];
  constexpr unsigned CC = wk::kDeltaCheckChunk;
  u64 buckets = 0, chunks = 0;
  for (u64 i0 = 0; i0 < p.n_jobs; i0 += WS_SCAN_THREADS) {
    const u64 i = i0 + threadIdx.x;
    const u64 nb = i < p.n_jobs ? p.state[i].n_buckets : 0;
    u64 tb, tc;
    const u64 eb = ws_block_excl<WS_SCAN_THREADS>(nb, red, tb);
    const u64 ec = ws_block_excl<WS_SCAN_THREADS>((nb + CC - 1) / CC, red, tc);
    if (i < p.n_jobs) {
      p.state[i].bucket_base = buckets + eb;
      p.state[i].chunk_base = chunks + ec;
    }
    buckets += tb;
    chunks += tc;
  }
  if (threadIdx.x == 0) {
    p.totals[0] = buckets;
    p.totals[1] = chunks;
  }
}

extern "C" __global__ void __launch_bounds__(WS_THREADS)
    ws_delta_vchunks(const __grid_constant__ wk::DeltaApplyParams p) {
  __shared__ u64 red[WS_THREADS / 32];
  constexpr unsigned CC = wk::kDeltaCheckChunk;
  const u64 nc = p.totals[1];
  for (u64 c = blockIdx.x; c < nc; c += gridDim.x) {
    const unsigned i = ws_find(p.state, p.n_jobs, c);
    const wk::DeltaApplyState st = p.state[i];
    const wk::DeltaApplyJob J = p.jobs[i];
    const u64 b = (c - st.chunk_base) * CC + threadIdx.x;
    u64 size = 0;
    if (b < st.n_buckets)
      size =
          ws_entry_size(ws_dir(J)[b], wdl::bucket_len(J.numel, st.bucket_elems, b), J.elem_bytes);
    size = ws_block_sum<WS_THREADS>(size, red);
    if (threadIdx.x == 0) {
      p.chunk_sums[c] = size;
      p.chunk_blob[c] = i;
    }
  }
}

extern "C" __global__ void __launch_bounds__(WS_SCAN_THREADS)
    ws_delta_vtop(const __grid_constant__ wk::DeltaApplyParams p) {
  __shared__ u64 red[WS_SCAN_THREADS / 32];
  const u64 nc = p.totals[1];
  u64 carry = 0;
  for (u64 c0 = 0; c0 < nc; c0 += WS_SCAN_THREADS) {
    const u64 c = c0 + threadIdx.x;
    u64 total;
    const u64 v = c < nc ? p.chunk_sums[c] : 0;
    const u64 ex = ws_block_excl<WS_SCAN_THREADS>(v, red, total);
    if (c < nc) p.chunk_sums[c] = carry + ex;
    carry += total;
  }
}

// Bitmask payload check: the set bits of the bucket's W words (the warp reads W * 4 bytes).
__device__ __forceinline__ unsigned ws_ones_warp(const unsigned* words, u64 W, u64 len) {
  unsigned ones = 0;
#pragma unroll 4
  for (u64 w = ws_lane(); w < W; w += 32) ones += static_cast<unsigned>(__popc(ws_word(words, w, len)));
#pragma unroll
  for (unsigned o = 16; o > 0; o >>= 1) ones += __shfl_xor_sync(WS_FULL, ones, o);
  return ones;
}

// Sparse payload check: offsets[0, count) ascending and < len (the warp reads count * 2 bytes).
__device__ __forceinline__ bool ws_sparse_ok_warp(const unsigned short* offs, unsigned count,
                                                  u64 len) {
  constexpr unsigned U = 8;
  const unsigned lane = ws_lane();
  unsigned last = 0;  // the offset before this pass's first (v > 0 only)
  bool bad = false;
  for (u64 v0 = 0; v0 < count; v0 += 32 * U) {
    unsigned o[U];
#pragma unroll
    for (unsigned u = 0; u < U; ++u) {
      const u64 v = v0 + u * 32 + lane;
      o[u] = v < count ? offs[v] : 0u;
    }
#pragma unroll
    for (unsigned u = 0; u < U; ++u) {
      const u64 v = v0 + u * 32 + lane;
      unsigned prev = __shfl_up_sync(WS_FULL, o[u], 1);
      if (lane == 0) prev = last;
      last = __shfl_sync(WS_FULL, o[u], 31);
      if (v < count && (o[u] >= len || (v > 0 && o[u] <= prev))) bad = true;
    }
  }
  return !__any_sync(WS_FULL, bad);
}

// A CTA per check chunk: a thread per directory entry finds where its payload must start (one
// CTA-wide scan of the entries' sizes on top of the chunk scan) and checks the entry; then a warp
// per bitmask / sparse bucket checks its payload (only for entries that passed, so only inside
// the blob). The chunk's first error goes to the blob's key with one atomicMin.
extern "C" __global__ void __launch_bounds__(WS_THREADS)
    ws_delta_vcheck(const __grid_constant__ wk::DeltaApplyParams p) {
  __shared__ u64 red[WS_THREADS / 32];
  __shared__ u64 s_off[wk::kDeltaCheckChunk];
  __shared__ unsigned s_count[wk::kDeltaCheckChunk];
  __shared__ unsigned char s_kind[wk::kDeltaCheckChunk];  // 0: no payload check
  __shared__ u64 s_key;
  constexpr unsigned CC = wk::kDeltaCheckChunk, NW = WS_THREADS / 32;
  const u64 nc = p.totals[1];
  const unsigned lane = ws_lane(), warp = threadIdx.x >> 5;
  for (u64 c = blockIdx.x; c < nc; c += gridDim.x) {
    if (threadIdx.x == 0) s_key = wk::kDeltaNoError;  // (read last by thread 0 itself)
    const unsigned i = p.chunk_blob[c];
    wk::DeltaApplyState* stp = p.state + i;
    const u64 chunk_base = stp->chunk_base;  // (err is being updated: not read here)
    const u64 n_buckets = stp->n_buckets;
    const unsigned bucket_elems = stp->bucket_elems;
    const wk::DeltaApplyJob J = p.jobs[i];
    const unsigned eb = J.elem_bytes;
    const u64 b0 = (c - chunk_base) * CC, b = b0 + threadIdx.x;
    const bool has = b < n_buckets;
    wdl::BucketEntry e{};
    u64 len = 0, size = 0;
    if (has) {
      e = ws_dir(J)[b];
      len = wdl::bucket_len(J.numel, bucket_elems, b);
      size = ws_entry_size(e, len, eb);
    }
    u64 sum;
    const u64 at = wdl::blob_prefix_bytes(n_buckets) + p.chunk_sums[c] - p.chunk_sums[chunk_base] +
                   ws_block_excl<WS_THREADS>(size, red, sum);  // (its barriers order s_key)
    const unsigned code = has ? ws_entry_code(e, len, eb, at, J.blob_bytes) : 0;
    if (code != 0) {
      atomicMin(&s_key, ((b + 1) << 8) | code);
    } else if (has && b + 1 == n_buckets && at + size != J.blob_bytes) {
      stp->trail_at = at + size;  // (the last payload must end the blob)
      atomicMin(&s_key, ((n_buckets + 1) << 8) | wk::kDeltaErrTrailing);
    }
    const bool check = has && code == 0 &&
                       (e.kind == static_cast<unsigned char>(wdl::BucketKind::bitmask) ||
                        e.kind == static_cast<unsigned char>(wdl::BucketKind::sparse));
    s_kind[threadIdx.x] = check ? e.kind : 0;
    s_off[threadIdx.x] = e.offset;
    s_count[threadIdx.x] = e.count;
    __syncthreads();
    for (unsigned k = warp; k < CC; k += NW) {
      const unsigned char kind = s_kind[k];
      if (kind == 0) continue;
      const u64 bk = b0 + k, lk = wdl::bucket_len(J.numel, bucket_elems, bk);
      const auto* pl = static_cast<const unsigned char*>(J.blob) + s_off[k];
      const unsigned count = s_count[k];
      if (kind == static_cast<unsigned char>(wdl::BucketKind::bitmask)) {
        if (ws_ones_warp(reinterpret_cast<const unsigned*>(pl), (lk + 31) / 32, lk) != count &&
            lane == 0)
          atomicMin(&s_key, ((bk + 1) << 8) | wk::kDeltaErrBitmask);
      } else if (!ws_sparse_ok_warp(reinterpret_cast<const unsigned short*>(pl), count, lk) &&
                 lane == 0) {
        atomicMin(&s_key, ((bk + 1) << 8) | wk::kDeltaErrSparse);
      }
    }
    __syncthreads();
    if (threadIdx.x == 0 && s_key != wk::kDeltaNoError)
      atomicMin(reinterpret_cast<u64*>(&stp->err), s_key);
  }
}

// The details of each bad blob's first error (its key is final now); one thread per blob, the
// error path only.
extern "C" __global__ void __launch_bounds__(WS_THREADS)
    ws_delta_vdescribe(const __grid_constant__ wk::DeltaApplyParams p) {
  constexpr unsigned CC = wk::kDeltaCheckChunk;
  for (u64 i = u64{blockIdx.x} * WS_THREADS + threadIdx.x; i < p.n_jobs;
       i += u64{gridDim.x} * WS_THREADS) {
    wk::DeltaApplyState& st = p.state[i];
    const u64 key = st.err, position = key >> 8;
    if (key == wk::kDeltaNoError || position == 0) continue;  // fine, or the header's (done)
    const wk::DeltaApplyJob J = p.jobs[i];
    const unsigned eb = J.elem_bytes;
    if (position == u64{st.n_buckets} + 1) {
      st.a = J.blob_bytes - st.trail_at;
      continue;
    }
    const u64 b = position - 1;
    const wdl::BucketEntry* dir = ws_dir(J);
    const wdl::BucketEntry e = dir[b];
    const u64 len = wdl::bucket_len(J.numel, st.bucket_elems, b);
    const auto* pl = static_cast<const unsigned char*>(J.blob) + e.offset;
    switch (static_cast<unsigned>(key & 0xff)) {
      case wk::kDeltaErrKind:
        st.a = e.kind;
        break;
      case wk::kDeltaErrCount:
        st.a = e.count, st.b = len;
        break;
      case wk::kDeltaErrOffset: {
        const u64 k = b / CC;
        u64 at = wdl::blob_prefix_bytes(st.n_buckets) + p.chunk_sums[st.chunk_base + k] -
                 p.chunk_sums[st.chunk_base];
        for (u64 h = k * CC; h < b; ++h)
          at += ws_entry_size(dir[h], wdl::bucket_len(J.numel, st.bucket_elems, h), eb);
        st.a = e.offset, st.b = at;
        break;
      }
      case wk::kDeltaErrBitmask: {
        const auto* words = reinterpret_cast<const unsigned*>(pl);
        u64 ones = 0;
        for (u64 w = 0; w < (len + 31) / 32; ++w) {
          unsigned word = words[w];
          if (w == (len - 1) / 32 && len % 32 != 0) word &= (1u << (len % 32)) - 1;
          ones += static_cast<u64>(__popc(word));
        }
        st.a = ones, st.b = e.count;
        break;
      }
      case wk::kDeltaErrSparse: {
        const auto* offs = reinterpret_cast<const unsigned short*>(pl);
        long long last = -1;
        for (u64 v = 0; v < e.count; ++v) {
          if (offs[v] <= last || offs[v] >= len) {
            st.a = offs[v], st.b = len;
            break;
          }
          last = offs[v];
        }
        break;
      }
      default:
        break;
    }
  }
}

// Where check-chunk slot v of an apply batch points: its blob, bucket, entry and destination
// (false: past the blob's last bucket, a bad blob, or an unchanged bucket).
struct WsSlot {
  wdl::BucketEntry e;
  const unsigned char* pl;
  unsigned char* d;
  const wk::DeltaGather* g;  // through a load plan's gather (d unused), or null
  u64 begin;                 // the bucket's first element in its tensor
  u64 len;
  unsigned eb;
};
__device__ __forceinline__ bool ws_slot(const wk::DeltaApplyParams& p, u64 v, WsSlot& x) {
  constexpr unsigned CC = wk::kDeltaCheckChunk;
  const unsigned i = p.chunk_blob[v / CC];
  const wk::DeltaApplyState st = p.state[i];
  const u64 b = (v / CC - st.chunk_base) * CC + v % CC;
  if (b >= st.n_buckets || st.err != wk::kDeltaNoError) return false;  // a bad blob writes nothing
  const wk::DeltaApplyJob J = p.jobs[i];
  x.e = ws_dir(J)[b];
  if (x.e.kind == static_cast<unsigned char>(wdl::BucketKind::unchanged)) return false;
  x.eb = J.elem_bytes;
  x.len = wdl::bucket_len(J.numel, st.bucket_elems, b);
  x.pl = static_cast<const unsigned char*>(J.blob) + x.e.offset;
  x.begin = b * st.bucket_elems;
  x.g = J.gather != 0 ? p.gathers + (J.gather - 1) : nullptr;
  x.d = x.g != nullptr ? nullptr : static_cast<unsigned char*>(J.dst) + x.begin * x.eb;
  return true;
}

// Element e of a gathered tensor (value v, eb bytes) into its place, cast (see DeltaGather).
__device__ __forceinline__ void ws_store_gather(const wk::DeltaGather& G, unsigned eb, u64 e,
                                                u64 v) {
  namespace wd = weightsync::detail;
  const u64 cols = static_cast<u64>(G.src_cols);
  const long long r = static_cast<long long>(e / cols), c = static_cast<long long>(e % cols);
  if (c < G.col0 || c >= G.col0 + G.cols) return;
  long long s = r;
  if (G.head_rows != 0) {
    const long long H = G.head_rows, q = r % H;
    s = r / H * H + q % 2 * (H / 2) + q / 2;
  }
  const long long d = s - G.row0;
  if (d < 0 || d >= G.rows) return;
  unsigned db = eb;
  if (G.src_kind != G.dst_kind) {
    const auto h = static_cast<std::uint16_t>(v);
    const std::uint32_t f = G.src_kind == wk::kDeltaCastF32   ? static_cast<std::uint32_t>(v)
                            : G.src_kind == wk::kDeltaCastF16 ? wd::fp16_bits_to_f32(h)
                                                              : wd::bf16_bits_to_f32(h);
    v = G.dst_kind == wk::kDeltaCastF32   ? f
        : G.dst_kind == wk::kDeltaCastF16 ? wd::f32_bits_to_fp16(f)
                                          : wd::f32_bits_to_bf16(f);
    db = G.dst_kind == wk::kDeltaCastF32 ? 4u : 2u;
  }
  ws_store(static_cast<unsigned char*>(G.dst) + static_cast<u64>(d * G.cols + c - G.col0) * db, db,
           v);
}

// Sparse, kDeltaApplySectors: the warp takes 32 changes at a time (ascending offsets); the first
// lane of each run of changes in one 32-byte sector of the destination reads the sector, merges
// the run's values (shuffled from their lanes) and writes it whole. A sector that is not wholly
// inside the bucket's bytes (an unaligned destination, the tensor's end) takes its elements one
// by one. Two groups may both write a sector (its run split between them): one after the other,
// the second reading what the first wrote.
__device__ __forceinline__ void ws_sparse_sectors_warp(const unsigned short* offs,
                                                       const unsigned char* values, unsigned count,
                                                       unsigned char* d, u64 len, unsigned eb) {
  const unsigned lane = ws_lane();
  const bool aligned = (reinterpret_cast<u64>(d) & 31) == 0;
  const u64 whole = aligned ? len * eb / 32 : 0;  // sectors wholly inside the bucket
  for (u64 k0 = 0; k0 < count; k0 += 32) {
    const u64 k = k0 + lane;
    const bool valid = k < count;
    const unsigned o = valid ? offs[k] : 0u;
    const u64 x = valid ? ws_load(values + k * eb, eb) : 0;
    const u64 byte = u64{o} * eb, sec = byte / 32;
    const bool full = valid && sec < whole;
    if (valid && !full) ws_store(d + byte, eb, x);
    const u64 prev = __shfl_up_sync(WS_FULL, sec, 1);
    const bool lead = full && (lane == 0 || prev != sec);
    const unsigned leads = __ballot_sync(WS_FULL, lead);
    const unsigned fulls = __ballot_sync(WS_FULL, full);
    // run length of a leader: up to the next leader or the first lane that is not `full`
    const unsigned after = leads & ~((2u << lane) - 1u);            // later leaders
    const unsigned notfull = ~fulls & ~((2u << lane) - 1u);        // later lanes not full
    const unsigned stop = after | notfull;
    const unsigned end = stop != 0 ? static_cast<unsigned>(__ffs(stop)) - 1 : 32u;
    unsigned run = lead ? end - lane : 0u;
    unsigned most = run;
#pragma unroll
    for (unsigned s = 16; s > 0; s >>= 1) most = max(most, __shfl_xor_sync(WS_FULL, most, s));
    uint4 lo = make_uint4(0, 0, 0, 0), hi = lo;
    unsigned char* sp = d + sec * 32;
    if (lead) {
      lo = *reinterpret_cast<const uint4*>(sp);
      hi = *reinterpret_cast<const uint4*>(sp + 16);
    }
    for (unsigned r = 0; r < most; ++r) {  // (warp-uniform)
      const u64 xr = __shfl_sync(WS_FULL, x, (lane + r) & 31u);
      const u64 br = __shfl_sync(WS_FULL, byte, (lane + r) & 31u);
      if (r < run) {
        const unsigned at = static_cast<unsigned>(br % 32);  // byte in the sector
        // (eb divides 32 and `at`: the element sits in one half)
        uint4 h = at < 16 ? lo : hi;
        const unsigned a16 = at % 16;
        switch (eb) {
          case 1:
            ws_vec_set<1>(h, a16, xr);
            break;
          case 2:
            ws_vec_set<2>(h, a16 / 2, xr);
            break;
          case 4:
            ws_vec_set<4>(h, a16 / 4, xr);
            break;
          default:
            ws_vec_set<8>(h, a16 / 8, xr);
            break;
        }
        if (at < 16)
          lo = h;
        else
          hi = h;
      }
    }
    if (lead) {
      *reinterpret_cast<uint4*>(sp) = lo;
      *reinterpret_cast<uint4*>(sp + 16) = hi;
    }
    __syncwarp();  // (a sector split between two groups: the next group reads this write)
  }
}

// Sparse (default): 256 values in flight per warp, each stored where it goes (the memory system
// merges the partial sectors).
__device__ __forceinline__ void ws_sparse_scatter_warp(const unsigned short* offs,
                                                       const unsigned char* values, unsigned count,
                                                       unsigned char* d, unsigned eb) {
  constexpr unsigned U = 8;
  const unsigned lane = ws_lane();
  for (u64 v0 = 0; v0 < count; v0 += 32 * U) {
    unsigned o[U];
    u64 x[U];
#pragma unroll
    for (unsigned u = 0; u < U; ++u) {
      const u64 k = v0 + u * 32 + lane;
      o[u] = k < count ? offs[k] : 0u;
      x[u] = k < count ? ws_load(values + k * eb, eb) : 0;
    }
#pragma unroll
    for (unsigned u = 0; u < U; ++u) {
      const u64 k = v0 + u * 32 + lane;
      if (k < count) ws_store(d + u64{o[u]} * eb, eb, x[u]);
    }
  }
}

// A raw or bitmask bucket, by the whole CTA.
__device__ __forceinline__ void ws_apply_cta(const WsSlot& x, u64* red, unsigned* wred) {
  const unsigned eb = x.eb;
  if (x.g != nullptr) {  // through a gather: element by element
    if (x.e.kind == static_cast<unsigned char>(wdl::BucketKind::raw)) {
      for (u64 i = threadIdx.x; i < x.len; i += WS_THREADS)
        ws_store_gather(*x.g, eb, x.begin + i, ws_load(x.pl + i * eb, eb));
    } else {
      const u64 W = (x.len + 31) / 32;
      const unsigned char* values = x.pl + wdl::align8(W * 4);
      ws_bits_cta(reinterpret_cast<const unsigned*>(x.pl), W, x.len, wred, [&](u64 i, unsigned r) {
        ws_store_gather(*x.g, eb, x.begin + i, ws_load(values + u64{r} * eb, eb));
      });
    }
    return;
  }
  if (x.e.kind == static_cast<unsigned char>(wdl::BucketKind::raw)) {
    ws_copy<WS_THREADS>(x.d, x.pl, x.len * eb, false, threadIdx.x);
    return;
  }
  const auto* words = reinterpret_cast<const unsigned*>(x.pl);
  const u64 W = (x.len + 31) / 32;
  const unsigned char* values = x.pl + wdl::align8(W * 4);
  if ((reinterpret_cast<u64>(x.d) & 15) == 0 && x.len % 32 == 0) {
    auto* dv = reinterpret_cast<uint4*>(x.d);
    const u64 nvec = x.len * eb / 16;
    switch (eb) {
      case 1:
        ws_bitmask_apply_cta<1>(words, values, dv, nvec, red);
        break;
      case 2:
        ws_bitmask_apply_cta<2>(words, values, dv, nvec, red);
        break;
      case 4:
        ws_bitmask_apply_cta<4>(words, values, dv, nvec, red);
        break;
      default:
        ws_bitmask_apply_cta<8>(words, values, dv, nvec, red);
        break;
    }
  } else {
    ws_bits_cta(words, W, x.len, wred, [&](u64 i, unsigned r) {
      ws_store(x.d + i * eb, eb, ws_load(values + u64{r} * eb, eb));
    });
  }
}

// kDeltaThreads / 32 check-chunk slots per CTA (all of one chunk), a warp each: sparse buckets
// by their warp; then the CTA's raw and bitmask buckets by the whole CTA, one after another.
extern "C" __global__ void __launch_bounds__(WS_THREADS)
    ws_delta_apply(const __grid_constant__ wk::DeltaApplyParams p) {
  constexpr unsigned CC = wk::kDeltaCheckChunk, NW = WS_THREADS / 32;
  static_assert(CC % NW == 0, "a CTA's slots are of one chunk");
  __shared__ u64 red[NW];
  __shared__ unsigned wred[NW];
  __shared__ unsigned char coop[NW];
  const u64 slots = p.totals[1] * CC;
  const unsigned warp = threadIdx.x >> 5;
  const bool sectors = (p.flags & wk::kDeltaApplySectors) != 0;
  for (u64 v0 = u64{blockIdx.x} * NW; v0 < slots; v0 += u64{gridDim.x} * NW) {
    WsSlot x;
    bool mine = false;
    if (ws_slot(p, v0 + warp, x)) {
      if (x.e.kind == static_cast<unsigned char>(wdl::BucketKind::sparse)) {
        const auto* offs = reinterpret_cast<const unsigned short*>(x.pl);
        const unsigned char* values = x.pl + wdl::align8(u64{x.e.count} * 2);
        if (x.g != nullptr) {
          for (u64 k = ws_lane(); k < x.e.count; k += 32)
            ws_store_gather(*x.g, x.eb, x.begin + offs[k], ws_load(values + k * x.eb, x.eb));
        } else if (sectors)
          ws_sparse_sectors_warp(offs, values, x.e.count, x.d, x.len, x.eb);
        else
          ws_sparse_scatter_warp(offs, values, x.e.count, x.d, x.eb);
      } else {
        mine = true;
      }
    }
    if (ws_lane() == 0) coop[warp] = mine ? 1 : 0;
    __syncthreads();
    for (unsigned k = 0; k < NW; ++k)
      if (coop[k] != 0 && ws_slot(p, v0 + k, x)) ws_apply_cta(x, red, wred);
    __syncthreads();  // (coop is written again)
  }
}

// ---------------------------------------------------------------------------------------------
// vLLM's sparse pairs (SparsePairsParams)

extern "C" __global__ void __launch_bounds__(WS_THREADS)
    ws_sparse_check(const __grid_constant__ wk::SparsePairsParams p) {
  for (u64 k = u64{blockIdx.x} * WS_THREADS + threadIdx.x; k < p.n; k += u64{gridDim.x} * WS_THREADS) {
    const long long i = p.idx[k];
    if (i < 0 || static_cast<u64>(i) >= p.numel) atomicMin(reinterpret_cast<u64*>(p.state), k);
    if (k > 0 && i <= p.idx[k - 1]) atomicMin(reinterpret_cast<u64*>(p.state + 1), k);
  }
}

extern "C" __global__ void __launch_bounds__(WS_THREADS)
    ws_sparse_scatter(const __grid_constant__ wk::SparsePairsParams p) {
  if (p.state[0] != wk::kDeltaNoError) return;  // a bad index: nothing is written
  const unsigned eb = p.elem_bytes;
  const auto* v = static_cast<const unsigned char*>(p.values);
  auto* d = static_cast<unsigned char*>(p.dst);
  if (p.state[1] != wk::kDeltaNoError) {  // not strictly ascending: in order, on one thread
    if (blockIdx.x == 0 && threadIdx.x == 0)
      for (u64 k = 0; k < p.n; ++k)
        ws_store(d + static_cast<u64>(p.idx[k]) * eb, eb, ws_load(v + k * eb, eb));
    return;
  }
  for (u64 k = u64{blockIdx.x} * WS_THREADS + threadIdx.x; k < p.n; k += u64{gridDim.x} * WS_THREADS)
    ws_store(d + static_cast<u64>(p.idx[k]) * eb, eb, ws_load(v + k * eb, eb));
}
