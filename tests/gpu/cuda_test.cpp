// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Single-GPU tests: RAII handles and the CUDA device policy.
#include <weightsync/cuda/device_buffer.hpp>
#include <weightsync/cuda/device_policy.hpp>
#include <weightsync/cuda/event.hpp>
#include <weightsync/cuda/stream.hpp>

#include <type_traits>
#include <vector>

#include "support/catch.hpp"
#include "support/gpu_model.hpp"

using namespace weightsync;

static_assert(!std::is_copy_constructible_v<CudaStream> && std::is_nothrow_move_constructible_v<CudaStream>);
static_assert(!std::is_copy_constructible_v<CudaEvent> && std::is_nothrow_move_constructible_v<CudaEvent>);
static_assert(!std::is_copy_constructible_v<DeviceBuffer> && std::is_nothrow_move_constructible_v<DeviceBuffer>);
static_assert(!std::is_constructible_v<CudaStreamRef, int>);
static_assert(!std::is_constructible_v<CudaStreamRef, std::nullptr_t>);

TEST_CASE("cuda handles: moved-from state, no leaks", "[gpu][cuda]") {
  std::size_t free0 = 0, free1 = 0, total = 0;
  {
    CudaStream warm;  // create the context before measuring
  }
  REQUIRE(cudaMemGetInfo(&free0, &total) == cudaSuccess);
  for (int i = 0; i < 50; ++i) {
    CudaStream s;
    CudaStream t(std::move(s));
    CHECK(s.get() == nullptr);
    CHECK(t.get() != nullptr);
    s = std::move(t);
    CudaEvent e;
    e.record(s.get());
    e.synchronize();
    CHECK(e.ready());
    DeviceBuffer b(std::size_t{64} << 20, 0);
    DeviceBuffer c = std::move(b);
    CHECK(b.data() == nullptr);
    CHECK(c.size() == (std::size_t{64} << 20));
  }
  REQUIRE(cudaMemGetInfo(&free1, &total) == cudaSuccess);
  CHECK(free1 == free0);
}

TEST_CASE("cuda policy: batched copies are bit-exact at any alignment", "[gpu][cuda]") {
  CudaPolicy pol(0);
  auto s = pol.make_stream();
  DeviceBuffer src(1 << 24, 0), dst(1 << 24, 0);
  ws_pattern::fill(src.data(), src.size(), 42, s.get());
  REQUIRE(cudaMemsetAsync(dst.data(), 0xCD, dst.size(), s.get()) == cudaSuccess);
  // Gather odd-sized, odd-offset pieces back to back, as packing does.
  std::vector<void*> d;
  std::vector<const void*> sp;
  std::vector<std::size_t> n;
  std::size_t off = 0;
  for (std::size_t i = 0; i < 300; ++i) {
    const std::size_t len = 1 + (i * 7919) % 40000;
    d.push_back(dst.data() + off);
    sp.push_back(src.data() + off);
    n.push_back(len);
    off += len;
  }
  pol.copy_batch(d.data(), sp.data(), n.data(), d.size(), s.get());
  unsigned long long* wrong = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&wrong), sizeof *wrong) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(wrong, 0, sizeof *wrong, s.get()) == cudaSuccess);
  ws_pattern::count_wrong(dst.data(), off, 42, wrong, s.get());
  unsigned long long host = 1;
  REQUIRE(cudaMemcpyAsync(&host, wrong, sizeof host, cudaMemcpyDeviceToHost, s.get()) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s.get()) == cudaSuccess);
  cudaFree(wrong);
  CHECK(host == 0);
}
