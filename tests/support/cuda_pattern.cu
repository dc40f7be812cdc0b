// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#include "cuda_pattern.hpp"

#include <stdexcept>
#include <string>

namespace ws_pattern {
namespace {

__host__ __device__ inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// Byte i of the pattern is byte (i % 8) of mix(seed ^ (i / 8) * K).
__host__ __device__ inline std::uint64_t word(std::uint64_t seed, std::uint64_t w) {
  return mix(seed * 0xd1b54a32d192ed03ull + w);
}
__host__ __device__ inline std::uint8_t byte_at(std::uint64_t seed, std::uint64_t i) {
  return static_cast<std::uint8_t>(word(seed, i / 8) >> (8 * (i % 8)));
}

// Bytes [head, head + 8 * words) are 8-byte aligned; the rest is done byte by byte.
__global__ void fill_kernel(std::uint8_t* p, std::size_t n, std::uint64_t seed, std::size_t head) {
  const std::size_t stride = std::size_t(blockDim.x) * gridDim.x;
  const std::size_t tid = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (std::size_t i = tid; i < head && i < n; i += stride) p[i] = byte_at(seed, i);
  const std::size_t words = (n - head) / 8;
  auto* w = reinterpret_cast<std::uint64_t*>(p + head);
  if (head % 8 == 0) {
    for (std::size_t k = tid; k < words; k += stride) w[k] = word(seed, head / 8 + k);
  } else {
    for (std::size_t k = tid; k < words * 8; k += stride) p[head + k] = byte_at(seed, head + k);
  }
  for (std::size_t i = head + words * 8 + tid; i < n; i += stride) p[i] = byte_at(seed, i);
}

__global__ void count_kernel(const std::uint8_t* p, std::size_t n, std::uint64_t seed,
                             std::size_t head, unsigned long long* wrong) {
  const std::size_t stride = std::size_t(blockDim.x) * gridDim.x;
  const std::size_t tid = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned long long bad = 0;
  for (std::size_t i = tid; i < head && i < n; i += stride) bad += p[i] != byte_at(seed, i);
  const std::size_t words = (n - head) / 8;
  if (head % 8 == 0) {
    const auto* w = reinterpret_cast<const std::uint64_t*>(p + head);
    for (std::size_t k = tid; k < words; k += stride) {
      const std::uint64_t d = w[k] ^ word(seed, head / 8 + k);
      if (d)
        for (int b = 0; b < 8; ++b) bad += ((d >> (8 * b)) & 0xff) != 0;
    }
  } else {
    for (std::size_t k = tid; k < words * 8; k += stride)
      bad += p[head + k] != byte_at(seed, head + k);
  }
  for (std::size_t i = head + words * 8 + tid; i < n; i += stride) bad += p[i] != byte_at(seed, i);
  if (bad) atomicAdd(wrong, bad);
}

__global__ void diff_kernel(const std::uint8_t* a, const std::uint8_t* b, std::size_t n,
                            unsigned long long* wrong) {
  const std::size_t stride = std::size_t(blockDim.x) * gridDim.x;
  unsigned long long bad = 0;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    bad += a[i] != b[i];
  if (bad) atomicAdd(wrong, bad);
}
// Element i (of eb bytes, eb-aligned) changes iff mix(seed ^ i * K) < threshold (all when
// `all`): its bits are XORed with a nonzero value of the element's width.
__global__ void perturb_kernel(std::uint8_t* p, std::size_t n, unsigned eb, std::uint64_t threshold,
                               bool all, std::uint64_t seed) {
  const std::size_t stride = std::size_t(blockDim.x) * gridDim.x;
  const std::uint64_t width = eb == 8 ? ~0ull : (1ull << (8 * eb)) - 1;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::uint64_t h = mix(seed ^ (i * 0xd1b54a32d192ed03ull));
    if (!all && h >= threshold) continue;
    std::uint64_t x = mix(h) & width;
    if (x == 0) x = 1;
    switch (eb) {
      case 1:
        p[i] ^= static_cast<std::uint8_t>(x);
        break;
      case 2:
        reinterpret_cast<std::uint16_t*>(p)[i] ^= static_cast<std::uint16_t>(x);
        break;
      case 4:
        reinterpret_cast<std::uint32_t*>(p)[i] ^= static_cast<std::uint32_t>(x);
        break;
      default:
        reinterpret_cast<std::uint64_t*>(p)[i] ^= x;
        break;
    }
  }
}

__global__ void nudge_kernel(std::uint16_t* p, std::size_t n, std::uint64_t threshold,
                             std::uint64_t seed) {
  const std::size_t stride = std::size_t(blockDim.x) * gridDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::uint64_t h = mix(seed ^ (i * 0xd1b54a32d192ed03ull));
    if (h >= threshold) continue;
    const int steps = 1 + static_cast<int>((h >> 8) & 3u);
    const int m = p[i] & 0x7fff;
    int r = (h >> 16) & 1u ? m + steps : m - steps;
    if (r < 0 || r > 0x7fff) r = (h >> 16) & 1u ? m - steps : m + steps;
    p[i] = static_cast<std::uint16_t>((p[i] & 0x8000) | r);
  }
}

__global__ void flip_kernel(std::uint8_t* p, std::uint8_t bits) { *p ^= bits; }

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

std::size_t head_of(const void* p, std::size_t n) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  // Pattern offsets are relative to p, so only a p that is 8-aligned gets the word path.
  return a % 8 == 0 ? 0 : n;
}

unsigned blocks_for(std::size_t n) {
  const std::size_t b = (n / 8 + 255) / 256;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 8192 ? 8192 : b));
}

}  // namespace

void fill(void* p, std::size_t n, std::uint64_t seed, cudaStream_t stream) {
  if (n == 0) return;
  fill_kernel<<<blocks_for(n), 256, 0, stream>>>(static_cast<std::uint8_t*>(p), n, seed,
                                                 head_of(p, n));
  check(cudaGetLastError(), "fill_kernel");
}

void count_wrong(const void* p, std::size_t n, std::uint64_t seed, unsigned long long* wrong,
                 cudaStream_t stream) {
  if (n == 0) return;
  count_kernel<<<blocks_for(n), 256, 0, stream>>>(static_cast<const std::uint8_t*>(p), n, seed,
                                                  head_of(p, n), wrong);
  check(cudaGetLastError(), "count_kernel");
}

void count_diff(const void* a, const void* b, std::size_t n, unsigned long long* wrong,
                cudaStream_t stream) {
  if (n == 0) return;
  diff_kernel<<<blocks_for(n), 256, 0, stream>>>(static_cast<const std::uint8_t*>(a),
                                                 static_cast<const std::uint8_t*>(b), n, wrong);
  check(cudaGetLastError(), "diff_kernel");
}
std::uint8_t expected_byte(std::uint64_t seed, std::size_t i) {
  return byte_at(seed, i);
}

__global__ void finite_kernel(std::uint8_t* p, std::size_t n, unsigned eb) {
  const std::size_t stride = std::size_t(blockDim.x) * gridDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if (eb == 2)
      reinterpret_cast<std::uint16_t*>(p)[i] &= 0xBFFFu;
    else
      reinterpret_cast<std::uint32_t*>(p)[i] &= 0xBFFFFFFFu;
  }
}

void finite(void* p, std::size_t n, unsigned elem_bytes, cudaStream_t stream) {
  if (elem_bytes != 2 && elem_bytes != 4)
    throw std::invalid_argument("finite: elem_bytes must be 2 or 4");
  if (reinterpret_cast<std::uintptr_t>(p) % elem_bytes != 0)
    throw std::invalid_argument("finite: p must be aligned to elem_bytes");
  if (n == 0) return;
  const std::size_t b = (n + 255) / 256;
  finite_kernel<<<static_cast<unsigned>(b > 8192 ? 8192 : b), 256, 0, stream>>>(
      static_cast<std::uint8_t*>(p), n, elem_bytes);
  check(cudaGetLastError(), "finite_kernel");
}

void perturb(void* p, std::size_t n, unsigned elem_bytes, double fraction, std::uint64_t seed,
             cudaStream_t stream) {
  if (elem_bytes != 1 && elem_bytes != 2 && elem_bytes != 4 && elem_bytes != 8)
    throw std::invalid_argument("perturb: elem_bytes must be 1, 2, 4 or 8");
  if (reinterpret_cast<std::uintptr_t>(p) % elem_bytes != 0)
    throw std::invalid_argument("perturb: p must be aligned to elem_bytes");
  if (n == 0 || fraction <= 0) return;
  const bool all = fraction >= 1;
  const auto threshold = all ? 0ull : static_cast<std::uint64_t>(fraction * 18446744073709551616.0);
  const std::size_t b = (n + 255) / 256;
  perturb_kernel<<<static_cast<unsigned>(b > 8192 ? 8192 : b), 256, 0, stream>>>(
      static_cast<std::uint8_t*>(p), n, elem_bytes, threshold, all, seed);
  check(cudaGetLastError(), "perturb_kernel");
}

void nudge(void* p, std::size_t n, double fraction, std::uint64_t seed, cudaStream_t stream) {
  if (reinterpret_cast<std::uintptr_t>(p) % 2 != 0)
    throw std::invalid_argument("nudge: p must be 2-byte aligned");
  if (n == 0 || fraction <= 0) return;
  const auto threshold = fraction >= 1 ? ~0ull : static_cast<std::uint64_t>(fraction * 18446744073709551616.0);
  const std::size_t b = (n + 255) / 256;
  nudge_kernel<<<static_cast<unsigned>(b > 8192 ? 8192 : b), 256, 0, stream>>>(
      static_cast<std::uint16_t*>(p), n, threshold, seed);
  check(cudaGetLastError(), "nudge_kernel");
}

void flip(void* p, std::uint8_t bits, cudaStream_t stream) {
  flip_kernel<<<1, 1, 0, stream>>>(static_cast<std::uint8_t*>(p), bits);
  check(cudaGetLastError(), "flip_kernel");
}

}  // namespace ws_pattern
