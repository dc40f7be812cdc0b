// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Run 84 lab (#32): can a consumer enqueue its pull before the plan arrives, released by a word in
// shared host memory? Measures, in one process: (1) a copy-engine D2D copy against the library's
// batched copy kernel (kernels/batched_copy.cu, one piece) at small1b and dense8b sizes; (2) the
// latency from a host store into registered shm to the end of a stream blocked on it by
// cuStreamWaitValue32 (+ an empty kernel), against a kernel launched from the host at that moment.
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "../../../../kernels/batched_copy.cu"

#define CK(x)                                                                   \
  do {                                                                          \
    cudaError_t e_ = (x);                                                       \
    if (e_ != cudaSuccess) {                                                    \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)
#define CD(x)                                                       \
  do {                                                              \
    CUresult r_ = (x);                                              \
    if (r_ != CUDA_SUCCESS) {                                       \
      const char* s_ = nullptr;                                     \
      cuGetErrorString(r_, &s_);                                    \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_);    \
      std::exit(1);                                                 \
    }                                                               \
  } while (0)

__global__ void fill(unsigned* p, size_t n, unsigned v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = v ^ unsigned(i * 2654435761u);
}
__global__ void empty_kernel() {}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main() {
  CK(cudaSetDevice(0));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (size_t bytes : {size_t(87293952), size_t(1192099840), size_t(16381470720)}) {
    unsigned char *src, *dst;
    CK(cudaMalloc(&src, bytes));
    CK(cudaMalloc(&dst, bytes));
    fill<<<1024, 256, 0, s>>>(reinterpret_cast<unsigned*>(src), bytes / 4, 7);
    auto time = [&](auto&& op) {
      std::vector<double> t;
      for (int i = 0; i < 23; ++i) {
        CK(cudaMemsetAsync(dst, 0x5a, bytes, s));
        CK(cudaEventRecord(a, s));
        op();
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (i >= 3) t.push_back(ms * 1000.0);
      }
      return median(t);
    };
    const double ce = time([&] { CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s)); });
    wk::CopyBatchParams p{};
    p.count = 1;
    p.d[0] = {src, dst, bytes, (bytes + wk::kCopyTileBytes - 1) / wk::kCopyTileBytes};
    p.total_tiles = p.d[0].tile_end;
    std::printf("bytes %zu: copy engine %.1f us (%.1f GB/s)\n", bytes, ce, bytes / ce / 1e3);
    for (int per_sm : {1, 2, 4, 8}) {
      const unsigned grid = unsigned(std::min<unsigned long long>(p.total_tiles, prop.multiProcessorCount * per_sm));
      const double k = time([&] { ws_batched_copy<<<grid, wk::kCopyThreads, 0, s>>>(p); CK(cudaGetLastError()); });
      CK(cudaStreamSynchronize(s));
      std::printf("  kernel %d CTA/SM (grid %u): %.1f us (%.1f GB/s) = %.1f %% of the copy engine's time\n",
                  per_sm, grid, k, bytes / k / 1e3, 100.0 * ce / k);
    }
    // check the last kernel copy
    std::vector<unsigned> h(1 << 20), g(1 << 20);
    CK(cudaMemcpy(h.data(), src + bytes - 4 * h.size(), 4 * h.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(g.data(), dst + bytes - 4 * g.size(), 4 * g.size(), cudaMemcpyDeviceToHost));
    std::printf("  last 4 MiB equal: %s\n", h == g ? "yes" : "NO");
    CK(cudaFree(src));
    CK(cudaFree(dst));
  }
  // (2) release latency through registered shared memory.
  void* shm = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CK(cudaHostRegister(shm, 4096, cudaHostRegisterMapped));
  unsigned* word = static_cast<unsigned*>(shm);
  CUdeviceptr dword = 0;
  {
    void* d = nullptr;
    CK(cudaHostGetDevicePointer(&d, shm, 0));
    dword = reinterpret_cast<CUdeviceptr>(d);
  }
  int can = 0;
  CD(cuDeviceGetAttribute(&can, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, 0));
  std::printf("wait value NOR supported: %d\n", can);
  using C = std::chrono::steady_clock;
  std::vector<double> gate, launch;
  for (int i = 1; i <= 200; ++i) {
    const unsigned go = 2u * unsigned(i);
    CD(cuStreamWaitValue32(reinterpret_cast<CUstream>(s), dword, go, CU_STREAM_WAIT_VALUE_GEQ));
    empty_kernel<<<1, 32, 0, s>>>();
    CK(cudaEventRecord(b, s));
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    if (cudaEventQuery(b) != cudaErrorNotReady) std::printf("gate did not hold at %d\n", i);
    const auto t0 = C::now();
    std::atomic_ref<unsigned>(*word).store(go, std::memory_order_release);
    while (cudaEventQuery(b) == cudaErrorNotReady) {
    }
    gate.push_back(std::chrono::duration<double, std::micro>(C::now() - t0).count());
    const auto t1 = C::now();
    empty_kernel<<<1, 32, 0, s>>>();
    CK(cudaEventRecord(b, s));
    while (cudaEventQuery(b) == cudaErrorNotReady) {
    }
    launch.push_back(std::chrono::duration<double, std::micro>(C::now() - t1).count());
  }
  std::printf("host store -> gated empty kernel done: median %.1f us (p90 %.1f)\n", median(gate),
              [&] { auto v = gate; std::sort(v.begin(), v.end()); return v[v.size() * 9 / 10]; }());
  std::printf("host launch -> empty kernel done: median %.1f us\n", median(launch));
  CK(cudaHostUnregister(shm));
  munmap(shm, 4096);
  return 0;
}
