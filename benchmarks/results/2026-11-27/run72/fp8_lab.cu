// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Run 72's lab (not part of the library; run 70's, against the library's persistent kernel): the
// block-128 bf16 -> fp8 kernel of the library (included from kernels/fp8_quantize.cu, compiled
// here for sm_90, launched as the library does) against run 70's variant B, and a roofline kernel
// that moves the same bytes (reads 2 B, writes 1 B per element) with no reduction. Every variant's
// output (bytes and scales) is compared with the library kernel's.
//   nvcc -O3 -arch=sm_90 -std=c++17 fp8_lab.cu -o fp8_lab && ./fp8_lab
#include "../../../../kernels/fp8_quantize.cu"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

// B: persistent CTAs over the blocks, the next block's vectors loaded before this block's
// reduction and stores (loads always in flight).
template <unsigned MINB>
__global__ void __launch_bounds__(256, MINB)
    lab_persist(const __grid_constant__ Fp8Params p, unsigned gx, unsigned long long nblocks) {
  constexpr unsigned EPV = 8, VPR = 16, NV = 8, RPS = 16;
  __shared__ unsigned red[8];
  const unsigned tr = threadIdx.x / VPR;
  const long long cv = (threadIdx.x % VPR) * EPV;
  const auto* src = static_cast<const unsigned char*>(p.src);
  uint4 v[NV], nx[NV];
  auto load = [&](unsigned long long t, uint4(&d)[NV]) {
    const long long r0 = static_cast<long long>(t / gx) * 128, col = static_cast<long long>(t % gx) * 128 + cv;
#pragma unroll
    for (unsigned j = 0; j < NV; ++j) {
      const long long row = r0 + j * RPS + tr;
      d[j] = (row < p.rows && col < p.cols)
                 ? __ldcs(reinterpret_cast<const uint4*>(src + (row * p.src_cols + col) * 2))
                 : make_uint4(0, 0, 0, 0);
    }
  };
  unsigned long long t = blockIdx.x;
  if (t >= nblocks) return;
  load(t, v);
  for (; t < nblocks; t += gridDim.x) {
    const unsigned long long tn = t + gridDim.x;
    if (tn < nblocks) load(tn, nx);
    unsigned amax = 0;
#pragma unroll
    for (unsigned j = 0; j < NV; ++j) amax = max(amax, ws_vec_amax<true>(v[j]));
    amax = ws_block_max(amax, red);
    const unsigned sb = wd::fp8_scale_bits(amax, false);
    const float s = __uint_as_float(sb);
    const long long r0 = static_cast<long long>(t / gx) * 128, col = static_cast<long long>(t % gx) * 128 + cv;
    if (threadIdx.x == 0) p.scales[(t / gx) * p.scale_stride + t % gx] = s;
    if (wd::fp8_fast_scale(sb))
      ws_block_store<true, true, NV, RPS, 2>(p, v, r0, col, tr, s);
    else
      ws_block_store<true, false, NV, RPS, 2>(p, v, r0, col, tr, s);
#pragma unroll
    for (unsigned j = 0; j < NV; ++j) v[j] = nx[j];
  }
}

// C: a CTA of 512 threads takes two blocks side by side (128 rows x 256 columns): a warp reads
// 512 contiguous bytes of a row; the two blocks' amaxes reduced per half-warp.
template <unsigned MINB>
__global__ void __launch_bounds__(512, MINB) lab_wide(const __grid_constant__ Fp8Params p) {
  constexpr unsigned EPV = 8, NV = 8, RPS = 16;
  __shared__ unsigned red[32];
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, half = lane >> 4;
  const long long r0 = static_cast<long long>(blockIdx.y) * 128;
  const long long col = static_cast<long long>(blockIdx.x) * 256 + lane * EPV;
  const unsigned tr = warp;
  const auto* src = static_cast<const unsigned char*>(p.src);
  uint4 v[NV];
  unsigned amax = 0;
#pragma unroll
  for (unsigned j = 0; j < NV; ++j) {
    const long long row = r0 + j * RPS + tr;
    if (row < p.rows && col < p.cols) {
      v[j] = __ldcs(reinterpret_cast<const uint4*>(src + (row * p.src_cols + col) * 2));
      amax = max(amax, ws_vec_amax<true>(v[j]));
    }
  }
#pragma unroll
  for (unsigned o = 1; o < 16; o <<= 1) amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if ((lane & 15u) == 0) red[warp * 2 + half] = amax;
  __syncthreads();
  unsigned m = 0;
#pragma unroll
  for (unsigned w = 0; w < 16; ++w) m = max(m, red[w * 2 + half]);
  const unsigned sb = wd::fp8_scale_bits(m, false);
  const float s = __uint_as_float(sb);
  const unsigned bx = blockIdx.x * 2 + half;
  if ((threadIdx.x & 511u) == half * 16 && static_cast<long long>(bx) * 128 < p.cols)
    p.scales[static_cast<unsigned long long>(blockIdx.y) * p.scale_stride + bx] = s;
  if (wd::fp8_fast_scale(sb))
    ws_block_store<true, true, NV, RPS, 2>(p, v, r0, col, tr, s);
  else
    ws_block_store<true, false, NV, RPS, 2>(p, v, r0, col, tr, s);
}

// R: the same traffic with no reduction (grid-stride 16-byte loads, 8-byte stores).
__global__ void __launch_bounds__(256) lab_roof(const uint4* s, uint2* d, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < n; i += gridDim.x * 256ull) {
    const uint4 v = __ldcs(s + i);
    d[i] = make_uint2(__byte_perm(v.x, v.y, 0x7531), __byte_perm(v.z, v.w, 0x7531));
  }
}

template <class F>
double time_us(F&& launch, cudaEvent_t e0, cudaEvent_t e1) {
  for (int w = 0; w < 3; ++w) launch();
  std::vector<float> ms;
  for (int t = 0; t < 7; ++t) {
    CK(cudaEventRecord(e0));
    for (int r = 0; r < 20; ++r) launch();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float x = 0;
    CK(cudaEventElapsedTime(&x, e0, e1));
    ms.push_back(x / 20);
  }
  std::sort(ms.begin(), ms.end());
  return ms[3] * 1e3;
}

int main() {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# fp8_lab on %s (%d SMs): bf16 -> fp8 block 128, GB/s of bf16 input, median of 7 x 20 launches\n",
              prop.name, prop.multiProcessorCount);
  struct Shape { const char* name; long long rows, cols; };
  const Shape shapes[] = {{"q_proj", 4096, 4096}, {"gate_proj", 12288, 4096},
                          {"down_proj", 4096, 12288}, {"embed", 151936, 4096}};
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  bool all_ok = true;
  for (const Shape& sh : shapes) {
    const unsigned long long n = sh.rows * sh.cols;
    const unsigned gx = static_cast<unsigned>((sh.cols + 127) / 128), gy = static_cast<unsigned>((sh.rows + 127) / 128);
    std::vector<unsigned short> h(n);
    unsigned long long x = 0x9e3779b97f4a7c15ull;
    for (auto& e : h) {
      x ^= x << 13; x ^= x >> 7; x ^= x << 17;
      e = static_cast<unsigned short>(0x3800 + (x & 0x0fff) + ((x >> 20) & 1) * 0x8000 - ((x >> 40) & 7) * 0x80);
    }
    void *src, *dref, *d;
    float *sref, *s;
    CK(cudaMalloc(&src, n * 2));
    CK(cudaMalloc(&dref, n));
    CK(cudaMalloc(&d, n));
    CK(cudaMalloc(&sref, gx * gy * 4));
    CK(cudaMalloc(&s, gx * gy * 4));
    CK(cudaMemcpy(src, h.data(), n * 2, cudaMemcpyHostToDevice));
    Fp8Params p{};
    p.src = src; p.dst = dref; p.scales = sref; p.rows = sh.rows; p.cols = sh.cols;
    p.src_type = weightsync::kernels::kFp8SrcBfloat16; p.mode = weightsync::kernels::kFp8Block128;
    p.src_rows = sh.rows; p.src_cols = sh.cols; p.scale_stride = gx;
    Fp8Params q = p;
    q.dst = d; q.scales = s;
    const double bytes = n * 2.0;
    auto report = [&](const char* what, double us, bool check) {
      bool ok = true;
      if (check) {
        CK(cudaDeviceSynchronize());
        std::vector<unsigned char> a(n), b(n);
        std::vector<float> sa(gx * gy), sb(gx * gy);
        CK(cudaMemcpy(a.data(), dref, n, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(b.data(), d, n, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(sa.data(), sref, gx * gy * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(sb.data(), s, gx * gy * 4, cudaMemcpyDeviceToHost));
        ok = a == b && std::memcmp(sa.data(), sb.data(), sa.size() * 4) == 0;
        all_ok = all_ok && ok;
        CK(cudaMemset(d, 0xab, n));
        CK(cudaMemset(s, 0xab, gx * gy * 4));
      }
      std::printf("  %-10s %-28s %9.1f us %8.1f GB/s %s\n", sh.name, what, us, bytes / us / 1e3,
                  check ? (ok ? "same bytes" : "MISMATCH") : "");
    };
    const unsigned lg = static_cast<unsigned>(std::min<unsigned long long>(1ull * gx * gy, 2ull * prop.multiProcessorCount));
    report("library ws_fp8_block_bf16 (sm_90)", time_us([&] { ws_fp8_block_bf16<<<lg, 256>>>(p); }, e0, e1), false);
    CK(cudaGetLastError());
    for (int k : {2}) {
      const unsigned long long nb = 1ull * gx * gy;
      char name[64];
      std::snprintf(name, sizeof name, "B persistent, 2/SM, grid x%d", k);
      const unsigned grid = static_cast<unsigned>(std::min<unsigned long long>(nb, 1ull * prop.multiProcessorCount * k));
      report(name, time_us([&] { lab_persist<2><<<grid, 256>>>(q, gx, nb); }, e0, e1), true);
      CK(cudaGetLastError());
    }
    report("R roofline (no reduction)", time_us([&] { lab_roof<<<prop.multiProcessorCount * 8, 256>>>(
        static_cast<const uint4*>(src), static_cast<uint2*>(d), n / 8); }, e0, e1), false);
    CK(cudaGetLastError());
    CK(cudaFree(src)); CK(cudaFree(dref)); CK(cudaFree(d)); CK(cudaFree(sref)); CK(cudaFree(s));
  }
  std::printf("# check: %s\n", all_ok ? "every variant wrote the library kernel's bytes and scales" : "MISMATCH");
  return all_ok ? 0 : 1;
}
