// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Run 70's lab (not part of the library).
// 1. The delta measure (ws_delta_count with the fused reference update) against variants: vectors
//    in flight per thread (U = 4 as the library, or 8: a whole bf16 bucket in one round), CTAs per
//    SM, a grid of one CTA per bucket or persistent, and the reference written in 32-, 64- or
//    128-byte granules. bf16, whole 16384-element buckets, 2^31 elements (4 GiB a side). Each
//    variant's counts, slots and updated reference are compared with the library kernel's.
// 2. Scatter floors for the apply on dense8b's 16.38 GB: the time to write (or xor) 2 bytes at
//    changed positions (hash-random, read from a bitmask of 1 bit per element), and to rewrite
//    every 32-byte sector holding a change (read + whole-sector write).
//   nvcc -O3 -arch=sm_90 -std=c++17 delta_lab.cu -o delta_lab && ./delta_lab
#include "../../../../kernels/delta.cu"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CK(x)                                                                               \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

template <unsigned U, unsigned GL, unsigned MINB>
__global__ void __launch_bounds__(WS_THREADS, MINB) lab_count(const __grid_constant__ wk::DeltaEncodeParams p) {
  constexpr unsigned E = 8, G = 4;
  __shared__ u64 red[WS_THREADS / 32];
  __shared__ unsigned smask[16384 / 32];
  const unsigned lane = threadIdx.x & 31u;
  const u64 wpb = p.bucket_elems / 32, nvec = p.bucket_elems / E;
  const unsigned cap = wk::delta_list_cap(p.bucket_elems, 2);
  const unsigned vals_at = wk::delta_list_values_at(p.bucket_elems, 2);
  const bool update = (p.flags & wk::kDeltaUpdateRef) != 0;
  for (u64 g = blockIdx.x; g < p.n_buckets; g += gridDim.x) {
    const wk::DeltaEncodeJob J = p.jobs[p.bucket_job[g]];
    const u64 begin = (g - J.bucket_base) * p.bucket_elems;
    const auto* s = reinterpret_cast<const uint4*>(static_cast<const unsigned char*>(J.src) + begin * 2);
    auto* r = reinterpret_cast<uint4*>(const_cast<unsigned char*>(static_cast<const unsigned char*>(J.ref)) + begin * 2);
    unsigned* slot = p.mask + g * wpb;
    auto* offs = reinterpret_cast<unsigned short*>(slot);
    auto* vals = reinterpret_cast<unsigned char*>(slot) + vals_at;
    unsigned carry = 0;
    for (u64 v0 = 0; v0 < nvec; v0 += U * WS_THREADS) {
      uint4 a[U], b[U];
#pragma unroll
      for (unsigned u = 0; u < U; ++u) {
        const u64 v = v0 + u * WS_THREADS + threadIdx.x;
        a[u] = __ldcs(s + v);
        b[u] = __ldcs(r + v);
      }
#pragma unroll
      for (unsigned q = 0; q < U; q += 4) {
        unsigned bits[4];
        u64 packed = 0;
#pragma unroll
        for (unsigned k = 0; k < 4; ++k) {
          const unsigned u = q + k;
          const u64 v = v0 + u * WS_THREADS + threadIdx.x;
          bits[k] = ws_vec_bits<2>(a[u], b[u]);
          packed |= u64{static_cast<unsigned>(__popc(bits[k]))} << (16 * k);
          unsigned word = bits[k] << (E * (lane % G));
#pragma unroll
          for (unsigned o = 1; o < G; o <<= 1) word |= __shfl_xor_sync(WS_FULL, word, o);
          if (lane % G == 0) smask[v / G] = word;
          if (update) {
            unsigned sector = bits[k];
#pragma unroll
            for (unsigned o = 1; o < GL; o <<= 1) sector |= __shfl_xor_sync(WS_FULL, sector, o);
            if (sector != 0) r[v] = a[u];
          }
        }
        u64 total;
        const u64 ex = ws_block_excl<WS_THREADS>(packed, red, total);
        unsigned base = carry;
#pragma unroll
        for (unsigned k = 0; k < 4; ++k) {
          const unsigned u = q + k;
          const u64 v = v0 + u * WS_THREADS + threadIdx.x;
          unsigned rk = base + static_cast<unsigned>((ex >> (16 * k)) & 0xffffu);
#pragma unroll
          for (unsigned e = 0; e < E; ++e)
            if ((bits[k] >> e) & 1u) {
              if (rk < cap) {
                offs[rk] = static_cast<unsigned short>(v * E + e);
                ws_store(vals + u64{rk} * 2, 2, ws_vec_get<2>(a[u], e));
              }
              ++rk;
            }
          base += static_cast<unsigned>((total >> (16 * k)) & 0xffffu);
        }
        carry = base;
      }
    }
    __syncthreads();
    const wdl::BucketKind kind = wdl::choose_kind(p.bucket_elems, carry, 2);
    if (kind == wdl::BucketKind::bitmask || (kind == wdl::BucketKind::sparse && carry > cap))
      for (u64 w = threadIdx.x; w < wpb; w += WS_THREADS) slot[w] = smask[w];
    if (threadIdx.x == 0) p.counts[g] = carry;
    __syncthreads();
  }
}

__device__ __forceinline__ unsigned long long lab_mix(unsigned long long x) {
  x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull; x ^= x >> 27; x *= 0x94d049bb133111ebull; return x ^ (x >> 31);
}
// Floor 1/2: a thread per 8 elements; 2-byte stores (XOR false) or read-xor-writes (XOR true) of
// the changed ones (the bench's step generator's positions).
template <bool XOR>
__global__ void lab_scatter(unsigned short* d, unsigned long long n, unsigned long long thr, unsigned long long seed) {
  for (unsigned long long i = (blockIdx.x * 256ull + threadIdx.x) * 8; i < n; i += gridDim.x * 256ull * 8)
#pragma unroll
    for (unsigned k = 0; k < 8; ++k) {
      const unsigned long long e = i + k;
      const unsigned long long h = lab_mix(seed ^ (e * 0xd1b54a32d192ed03ull));
      if (e < n && h < thr) {
        if (XOR) d[e] ^= 1; else d[e] = static_cast<unsigned short>(h >> 48) | 1;
      }
    }
}
// The floors read the changed positions from a bitmask (1 bit per element, 1/16 of the bytes: the
// real apply reads 4 B per change instead), built untimed from the same hash.
__global__ void lab_mkmask(unsigned* mask, unsigned long long n, unsigned long long thr, unsigned long long seed) {
  for (unsigned long long w = blockIdx.x * 256ull + threadIdx.x; w < n / 32; w += gridDim.x * 256ull) {
    unsigned m = 0;
    for (unsigned k = 0; k < 32; ++k) m |= unsigned(lab_mix(seed ^ ((w * 32 + k) * 0xd1b54a32d192ed03ull)) < thr) << k;
    mask[w] = m;
  }
}
// Floor 1/2: a thread per mask word; 2-byte stores (XOR false) or read-xor-writes of its changes.
template <bool XOR>
__global__ void lab_scatter_mask(const unsigned* mask, unsigned short* d, unsigned long long nw) {
  for (unsigned long long w = blockIdx.x * 256ull + threadIdx.x; w < nw; w += gridDim.x * 256ull) {
    unsigned m = __ldcs(mask + w);
    while (m) {
      const unsigned b = __ffs(m) - 1;
      m &= m - 1;
      if (XOR) d[w * 32 + b] ^= 1; else d[w * 32 + b] = static_cast<unsigned short>(w + b) | 1;
    }
  }
}
// Floor 3: a lane per 16-byte vector; a 32-byte sector holding a change is read and written whole.
__global__ void lab_sectors_mask(const unsigned char* mask, uint4* d, unsigned long long nvec) {
  for (unsigned long long v = blockIdx.x * 256ull + threadIdx.x; v < nvec; v += gridDim.x * 256ull) {
    unsigned any = __ldcs(mask + v);
    any |= __shfl_xor_sync(WS_FULL, any, 1);
    if (any) { uint4 x = d[v]; x.x ^= 1; d[v] = x; }
  }
}
__global__ void lab_diff(const uint4* a, const uint4* b, unsigned long long n, unsigned long long* bad) {
  for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < n; i += gridDim.x * 256ull) {
    const uint4 x = a[i], y = b[i];
    if (x.x != y.x || x.y != y.y || x.z != y.z || x.w != y.w) atomicAdd(bad, 1ull);
  }
}

int main(int argc, char** argv) {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  const unsigned long long numel = 1ull << 31, bucket = 16384, nb = numel / bucket;
  std::printf("# delta_lab on %s (%d SMs): measure of 2^31 bf16 (4.29 GB a side), bucket 16384, median of 5\n", prop.name, sms);
  void *src, *ref, *pristine, *ref_lib;
  unsigned *bucket_job, *counts, *mask, *counts_lib, *mask_lib;
  CK(cudaMalloc(&src, numel * 2));
  CK(cudaMalloc(&ref, numel * 2));
  CK(cudaMalloc(&pristine, numel * 2));
  CK(cudaMalloc(&ref_lib, 16));
  CK(cudaMalloc(&bucket_job, nb * 4));
  CK(cudaMalloc(&counts, nb * 4));
  CK(cudaMalloc(&counts_lib, nb * 4));
  CK(cudaMalloc(&mask, nb * bucket / 8));
  CK(cudaMalloc(&mask_lib, nb * bucket / 8));
  unsigned long long* bad;
  CK(cudaMalloc(&bad, 8));
  CK(cudaMemset(bucket_job, 0, nb * 4));
  wk::DeltaEncodeJob* jobs;
  CK(cudaMalloc(&jobs, sizeof(wk::DeltaEncodeJob)));
  const wk::DeltaEncodeJob J{src, ref, numel, 0, static_cast<std::uint32_t>(nb), 2};
  CK(cudaMemcpy(jobs, &J, sizeof J, cudaMemcpyHostToDevice));
  // pristine: hash-filled bf16
  lab_scatter<false><<<sms * 8, 256>>>(static_cast<unsigned short*>(pristine), numel, ~0ull, 7);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  bool all_ok = true;
  for (double d : {0.001, 0.01, 0.03}) {
    CK(cudaMemcpy(src, pristine, numel * 2, cudaMemcpyDeviceToDevice));
    lab_scatter<true><<<sms * 8, 256>>>(static_cast<unsigned short*>(src), numel,
                                        static_cast<unsigned long long>(d * 18446744073709551616.0), 99);
    CK(cudaDeviceSynchronize());
    wk::DeltaEncodeParams p{};
    p.jobs = jobs; p.bucket_job = bucket_job; p.n_buckets = nb; p.n_jobs = 1; p.bucket_elems = bucket;
    auto run = [&](const char* name, bool update, auto&& launch, bool lib) {
      p.flags = update ? wk::kDeltaUpdateRef : 0u;
      p.counts = lib ? counts_lib : counts;
      p.mask = lib ? mask_lib : mask;
      std::vector<float> ms;
      for (int t = 0; t < 6; ++t) {
        CK(cudaMemcpy(ref, pristine, numel * 2, cudaMemcpyDeviceToDevice));
        if (t == 5) CK(cudaMemset(p.mask, 0, nb * bucket / 8));
        CK(cudaEventRecord(e0));
        launch();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaGetLastError());
        float x = 0;
        CK(cudaEventElapsedTime(&x, e0, e1));
        if (t > 0) ms.push_back(x);
      }
      std::sort(ms.begin(), ms.end());
      std::string check = "";
      if (update) {  // the reference must now be the source
        CK(cudaMemset(bad, 0, 8));
        lab_diff<<<sms * 8, 256>>>(static_cast<const uint4*>(src), static_cast<const uint4*>(ref), numel / 8, bad);
        unsigned long long nbad = 0;
        CK(cudaMemcpy(&nbad, bad, 8, cudaMemcpyDeviceToHost));
        check += nbad ? " ref WRONG" : " ref=src";
        all_ok = all_ok && nbad == 0;
      }
      if (!lib) {
        std::vector<unsigned> a(nb), b(nb), ma(nb * bucket / 32), mb(nb * bucket / 32);
        CK(cudaMemcpy(a.data(), counts_lib, nb * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(b.data(), counts, nb * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(ma.data(), mask_lib, nb * bucket / 8, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(mb.data(), mask, nb * bucket / 8, cudaMemcpyDeviceToHost));
        const bool same = a == b && ma == mb;
        check += same ? " counts+slots same" : " counts/slots DIFFER";
        all_ok = all_ok && same;
      }
      const double us = ms[ms.size() / 2] * 1e3;
      std::printf("  %6.3f %-44s %9.1f us %8.1f GB/s of source%s\n", d, name, us, numel * 2.0 / us / 1e3, check.c_str());
    };
    run("library ws_delta_count, no update", false, [&] { ws_delta_count<<<nb, WS_THREADS>>>(p); }, true);
    run("library ws_delta_count, update (32 B)", true, [&] { ws_delta_count<<<nb, WS_THREADS>>>(p); }, true);
    run("U4 32B 3/SM grid=buckets", true, [&] { lab_count<4, 2, 3><<<nb, WS_THREADS>>>(p); }, false);
    run("U4 64B 3/SM grid=buckets", true, [&] { lab_count<4, 4, 3><<<nb, WS_THREADS>>>(p); }, false);
    run("U4 128B 3/SM grid=buckets", true, [&] { lab_count<4, 8, 3><<<nb, WS_THREADS>>>(p); }, false);
    run("U4 32B 4/SM grid=buckets", true, [&] { lab_count<4, 2, 4><<<nb, WS_THREADS>>>(p); }, false);
    run("U4 32B 3/SM persistent", true, [&] { lab_count<4, 2, 3><<<sms * 3, WS_THREADS>>>(p); }, false);
    run("U8 32B 2/SM grid=buckets", true, [&] { lab_count<8, 2, 2><<<nb, WS_THREADS>>>(p); }, false);
    run("U8 64B 2/SM grid=buckets", true, [&] { lab_count<8, 4, 2><<<nb, WS_THREADS>>>(p); }, false);
    run("U8 32B 3/SM grid=buckets", true, [&] { lab_count<8, 2, 3><<<nb, WS_THREADS>>>(p); }, false);
    run("U8 32B 2/SM persistent", true, [&] { lab_count<8, 2, 2><<<sms * 2, WS_THREADS>>>(p); }, false);
    run("U8 32B 2/SM no update", false, [&] { lab_count<8, 2, 2><<<nb, WS_THREADS>>>(p); }, false);
  }
  CK(cudaFree(src)); CK(cudaFree(ref)); CK(cudaFree(pristine));
  // Floors of the apply on dense8b's bytes
  const unsigned long long n8 = 16381470720ull / 2;
  void* big;
  CK(cudaMalloc(&big, n8 * 2));
  CK(cudaMemset(big, 0, n8 * 2));
  unsigned* fmask;
  CK(cudaMalloc(&fmask, n8 / 8));
  std::printf("# apply floors on 16.38 GB (dense8b's bytes), median of 5; blob at 4 B per change\n");
  for (double d : {0.001, 0.01, 0.03, 0.1}) {
    const auto thr = static_cast<unsigned long long>(d * 18446744073709551616.0);
    auto t = [&](auto&& launch) {
      std::vector<float> ms;
      for (int k = 0; k < 6; ++k) {
        CK(cudaEventRecord(e0));
        launch();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaGetLastError());
        float x = 0;
        CK(cudaEventElapsedTime(&x, e0, e1));
        if (k) ms.push_back(x);
      }
      std::sort(ms.begin(), ms.end());
      return ms[2] * 1e3;
    };
    const double blob = n8 * d * 4;
    lab_mkmask<<<sms * 16, 256>>>(fmask, n8, thr, 5);
    const double a = t([&] { lab_scatter_mask<false><<<sms * 16, 256>>>(fmask, static_cast<unsigned short*>(big), n8 / 32); });
    const double b = t([&] { lab_scatter_mask<true><<<sms * 16, 256>>>(fmask, static_cast<unsigned short*>(big), n8 / 32); });
    const double c = t([&] { lab_sectors_mask<<<sms * 16, 256>>>(reinterpret_cast<const unsigned char*>(fmask), static_cast<uint4*>(big), n8 / 8); });
    std::printf("  %6.3f stores %9.1f us (%6.1f GB/s of blob)  xor %9.1f us (%6.1f)  sectors %9.1f us (%6.1f)\n",
                d, a, blob / a / 1e3, b, blob / b / 1e3, c, blob / c / 1e3);
  }
  std::printf("# check: %s\n", all_ok ? "every variant matched the library kernel" : "MISMATCH");
  return all_ok ? 0 : 1;
}
