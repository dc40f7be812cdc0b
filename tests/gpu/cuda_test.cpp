// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Single-GPU tests: RAII handles and the CUDA device policy.
#include <weightsync/cuda/device_buffer.hpp>
#include <weightsync/cuda/device_policy.hpp>
#include <weightsync/cuda/event.hpp>
#include <weightsync/cuda/stream.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
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

namespace {
//! Host function that holds its stream until `*go` is set (bounded: 10 s).
void CUDART_CB hold_until(void* go) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!static_cast<std::atomic<bool>*>(go)->load() && std::chrono::steady_clock::now() < until)
    std::this_thread::yield();
}
}  // namespace

TEST_CASE("cuda policy: batched copies through descriptor tables: reused, changed, on two streams, when every table is busy or none reserved",
          "[gpu][cuda]") {
  CudaPolicy pol(0);
  auto s = pol.make_stream();
  auto t = pol.make_stream();
  DeviceBuffer src(1 << 22, 0), dst(1 << 22, 0);
  ws_pattern::fill(src.data(), src.size(), 7, s.get());
  REQUIRE(cudaStreamSynchronize(s.get()) == cudaSuccess);  // (t reads src too)
  unsigned long long* wrong = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&wrong), sizeof *wrong) == cudaSuccess);
  // `count` pieces of 1..97 bytes at offsets spread by `stride` (a different set per stride),
  // each copied to the same offset: dst then matches src's pattern over every piece.
  struct Batch {
    std::vector<void*> d;
    std::vector<const void*> s;
    std::vector<std::size_t> n;
  };
  const auto batch = [&](std::size_t count, std::size_t stride) {
    Batch b;
    for (std::size_t i = 0; i < count; ++i) {
      const std::size_t off = i * stride;
      b.d.push_back(dst.data() + off);
      b.s.push_back(src.data() + off);
      b.n.push_back(1 + (i * 31) % 97);
    }
    REQUIRE(count * stride <= dst.size());
    return b;
  };
  const auto run = [&](const Batch& b, cudaStream_t on) {
    pol.copy_batch(b.d.data(), b.s.data(), b.n.data(), b.d.size(), on);
  };
  // Wrong bytes over the pieces of `b` (after everything enqueued on both streams).
  const auto wrong_in = [&](const Batch& b) {
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaMemsetAsync(wrong, 0, sizeof *wrong, s.get()) == cudaSuccess);
    for (std::size_t i = 0; i < b.d.size(); ++i)
      ws_pattern::count_diff(b.d[i], b.s[i], b.n[i], wrong, s.get());
    unsigned long long h = 1;
    REQUIRE(cudaMemcpyAsync(&h, wrong, sizeof h, cudaMemcpyDeviceToHost, s.get()) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s.get()) == cudaSuccess);
    return h;
  };
  // (On s, then waited for: the copies run on s and t.)
  const auto poison = [&] {
    REQUIRE(cudaMemsetAsync(dst.data(), 0xCD, dst.size(), s.get()) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s.get()) == cudaSuccess);
  };

  SECTION("a few pieces go by value: no table") {
    const Batch b = batch(16, 256);
    poison();
    run(b, s.get());
    CHECK(wrong_in(b) == 0);
    CHECK(pol.copy_table() == nullptr);
  }
  SECTION("without room reserved, many pieces go by value") {
    const Batch b = batch(504, 256);
    poison();
    run(b, s.get());
    CHECK(wrong_in(b) == 0);
    CHECK(pol.copy_table() == nullptr);
  }
  SECTION("the same pieces again reuse their table, also from another stream") {
    const Batch b = batch(504, 256);
    pol.reserve_copy_batches(504);
    for (int round = 0; round < 3; ++round) {
      poison();
      run(b, round == 2 ? t.get() : s.get());
      CHECK(wrong_in(b) == 0);
    }
    REQUIRE(pol.copy_table() != nullptr);
    CHECK(pol.copy_table()->counts().uploaded == 1);
    CHECK(pol.copy_table()->counts().reused == 2);
  }
  SECTION("changed pieces upload again; more than 960 go in one launch") {
    const Batch a = batch(40, 512), b = batch(2000, 1024), c = batch(40, 768);
    pol.reserve_copy_batches(2000);
    poison();
    run(a, s.get());
    run(b, t.get());
    run(c, s.get());
    CHECK(wrong_in(a) == 0);
    CHECK(wrong_in(b) == 0);
    CHECK(wrong_in(c) == 0);
    CHECK(pol.copy_table()->counts().uploaded == 3);
  }
  SECTION("a remembered batch runs again without its list, until its entry takes other pieces") {
    const Batch b = batch(504, 256);
    pol.reserve_copy_batches(504);
    weightsync::detail::CopyBatchMemo memo;
    pol.copy_batch(b.d.data(), b.s.data(), b.n.data(), b.d.size(), s.get(), &memo);
    REQUIRE(memo);
    CHECK(memo.count == 504);
    for (int round = 0; round < 2; ++round) {
      poison();
      CHECK(pol.copy_batch_again(memo, round == 1 ? t.get() : s.get()));
      CHECK(wrong_in(b) == 0);
    }
    CHECK(pol.copy_table()->counts().repeated == 2);
    // Four other batches take every entry, the remembered one among them: the memo is stale, and
    // a stale memo enqueues nothing.
    for (std::size_t k = 0; k < 4; ++k) {
      const Batch o = batch(100 + k, 512 + 64 * k);
      run(o, s.get());
      CHECK(wrong_in(o) == 0);
    }
    poison();
    CHECK_FALSE(pol.copy_batch_again(memo, s.get()));
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<unsigned char> host(dst.size());
    REQUIRE(cudaMemcpy(host.data(), dst.data(), host.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(std::all_of(host.begin(), host.end(), [](unsigned char c) { return c == 0xCD; }));
    CHECK(pol.copy_table()->counts().repeated == 2);
    // A batch by value (no table) leaves nothing to repeat.
    const Batch few = batch(16, 256);
    pol.copy_batch(few.d.data(), few.s.data(), few.n.data(), few.d.size(), s.get(), &memo);
    CHECK_FALSE(memo);
    CHECK_FALSE(pol.copy_batch_again(memo, s.get()));
  }
  SECTION("with every table still in use, a batch goes by value, and all land") {
    std::vector<Batch> bs;
    for (std::size_t k = 0; k < 6; ++k) bs.push_back(batch(100 + k, 256 + 64 * k));
    pol.reserve_copy_batches(105);
    poison();
    std::atomic<bool> go{false};
    REQUIRE(cudaLaunchHostFunc(s.get(), hold_until, &go) == cudaSuccess);
    for (const Batch& b : bs) run(b, s.get());  // held: no launch is done
    const auto counts = pol.copy_table()->counts();
    go = true;
    for (const Batch& b : bs) CHECK(wrong_in(b) == 0);
    CHECK(counts.uploaded == 4);
    CHECK(counts.full == 2);
  }
  cudaFree(wrong);
}
