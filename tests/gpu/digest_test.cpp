// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The chunk digest kernel (cuda/digest.hpp) against the host reference (detail/digest.hpp): the
// same bits for pieces of every size and alignment, over several launches, and its speed.
#include <weightsync/cuda/check.hpp>
#include <weightsync/cuda/device_buffer.hpp>
#include <weightsync/cuda/device_policy.hpp>
#include <weightsync/cuda/event.hpp>
#include <weightsync/cuda/stream.hpp>
#include <weightsync/detail/digest.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "support/catch.hpp"

namespace {

using namespace weightsync;
using weightsync::detail::DigestSpan;
namespace wk = weightsync::kernels;

// The device digest of `spans` (offsets into `dev`, mirrored in `host`) against the host's.
void check_same(const std::vector<unsigned char>& host, const DeviceBuffer& dev,
                const std::vector<DigestSpan>& at, CudaPolicy& pol, CudaStream& s) {
  std::vector<DigestSpan> h = at, d = at;
  for (std::size_t i = 0; i < at.size(); ++i) {
    const auto off = reinterpret_cast<std::uintptr_t>(at[i].data);
    h[i].data = host.data() + off;
    d[i].data = dev.data() + off;
  }
  std::size_t nsums = 1;
  for (const auto& x : at) nsums = std::max<std::size_t>(nsums, x.sum + 1);
  DeviceBuffer sums(8 * nsums, 0);
  pol.digest(d.data(), d.size(), reinterpret_cast<std::uint64_t*>(sums.data()), nsums, s.get());
  std::vector<std::uint64_t> got(nsums), want(nsums);
  detail::check(cudaMemcpyAsync(got.data(), sums.data(), 8 * nsums, cudaMemcpyDeviceToHost, s.get()),
                "D2H");
  detail::check(cudaStreamSynchronize(s.get()), "sync");
  detail::digest_sums(h.data(), h.size(), want.data(), nsums);
  CHECK(got == want);
}

}  // namespace

TEST_CASE("digest kernel: the host reference's bits at every size and alignment", "[gpu][digest]") {
  CudaPolicy pol(0);
  CudaStream s(0);
  const std::size_t n = (std::size_t{8} << 20) + 4096;
  std::vector<unsigned char> host(n);
  std::mt19937 rng(42);
  for (auto& b : host) b = static_cast<unsigned char>(rng());
  DeviceBuffer dev(n, 0);
  detail::check(cudaMemcpy(dev.data(), host.data(), n, cudaMemcpyHostToDevice), "H2D");
  const auto at = [](std::size_t off, std::size_t bytes, std::uint64_t ord, unsigned sum = 0) {
    return DigestSpan{reinterpret_cast<const void*>(off), bytes, static_cast<std::uint32_t>(ord),
                      sum};
  };
  const std::size_t B = wk::kDigestBlockBytes;
  SECTION("one piece: sizes around granules and blocks, offsets 0..16") {
    for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{15}, std::size_t{16},
                              std::size_t{17}, std::size_t{4097}, B - 1, B, B + 1, 5 * B + 77,
                              std::size_t{3} << 20})
      for (std::size_t off : {0, 1, 2, 3, 4, 7, 8, 9, 12, 15, 16}) {
        CAPTURE(bytes, off);
        check_same(host, dev, {at(off, bytes, 3)}, pol, s);
      }
  }
  SECTION("a chunk of pieces back to back at odd offsets, as a packed slot holds them") {
    std::vector<DigestSpan> v;
    std::size_t off = 0;
    for (std::uint64_t i = 0; off < n - 70000 && i < 200; ++i) {
      const std::size_t bytes = i % 7 == 0 ? 0 : (rng() % 3 == 0 ? rng() % 70000 : rng() % 300);
      v.push_back(at(off, bytes, i));
      off += bytes;
    }
    check_same(host, dev, v, pol, s);
  }
  SECTION("more pieces than one launch takes") {
    std::vector<DigestSpan> v;
    for (std::uint64_t i = 0; i < 2 * wk::kMaxDigestPieces + 17; ++i)
      v.push_back(at((i * 1237) % (n - 5000), 1 + (i * 31) % 4000, i, static_cast<unsigned>(i % 5)));
    check_same(host, dev, v, pol, s);
  }
  SECTION("copy_to: the kernel copies what it digests, bit-exact at any alignment") {
    DeviceBuffer out(n, 0);
    detail::check(cudaMemset(out.data(), 0xCD, n), "memset");
    std::vector<DigestSpan> v, h;
    std::size_t from = 0, to = 3;
    for (std::uint32_t i = 0; i < 40; ++i) {
      const std::size_t bytes = i % 3 == 0 ? B + 17 * i : (i % 3 == 1 ? 4 * B : 1 + 97 * i);
      // every fourth destination 16-byte aligned (the fast path), the others wherever they fall
      const std::size_t dst = i % 4 == 0 ? (to + 15) / 16 * 16 : to;
      v.push_back(DigestSpan{dev.data() + from, bytes, i, i % 2, out.data() + dst});
      h.push_back(DigestSpan{host.data() + from, bytes, i, i % 2});
      to = dst + bytes + 5;
      from += bytes + (i % 5);
    }
    REQUIRE(to < n);
    REQUIRE(from < n);
    DeviceBuffer sums(16, 0);
    pol.digest(v.data(), v.size(), reinterpret_cast<std::uint64_t*>(sums.data()), 2, s.get());
    std::uint64_t got[2] = {0, 0}, want[2] = {0, 0};
    detail::check(cudaMemcpyAsync(got, sums.data(), 16, cudaMemcpyDeviceToHost, s.get()), "D2H");
    detail::check(cudaStreamSynchronize(s.get()), "sync");
    detail::digest_sums(h.data(), h.size(), want, 2);
    CHECK(got[0] == want[0]);
    CHECK(got[1] == want[1]);
    std::vector<unsigned char> copied(n);
    detail::check(cudaMemcpy(copied.data(), out.data(), n, cudaMemcpyDeviceToHost), "D2H");
    for (std::size_t i = 0; i < v.size(); ++i) {
      const auto dst = static_cast<std::size_t>(static_cast<std::byte*>(v[i].copy_to) - out.data());
      INFO("piece " << i);
      CHECK(std::equal(copied.begin() + static_cast<std::ptrdiff_t>(dst),
                       copied.begin() + static_cast<std::ptrdiff_t>(dst + v[i].bytes),
                       static_cast<const unsigned char*>(h[i].data)));
    }
  }
  SECTION("only empty pieces: 0, as on the host") { check_same(host, dev, {at(0, 0, 0), at(5, 0, 1)}, pol, s); }
}

TEST_CASE("digest kernel: speed over 1 GiB (CUDA events, median of 9)", "[gpu][digest]") {
  CudaPolicy pol(0);
  CudaStream s(0);
  const std::size_t n = std::size_t{1} << 30;
  DeviceBuffer dev(n, 0), copy(n, 0), sum(8, 0);
  detail::check(cudaMemset(dev.data(), 0x5a, n), "memset");
  const DigestSpan one{dev.data(), n, 0, 0};
  TimedEvent a(0), b(0);
  auto time = [&](auto&& f) {
    std::vector<double> us;
    for (int i = 0; i < 12; ++i) {
      a.record(s.get());
      f();
      b.record(s.get());
      detail::check(cudaStreamSynchronize(s.get()), "sync");
      if (i >= 3) us.push_back(TimedEvent::elapsed(a, b).count());
    }
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  };
  const double d = time([&] { pol.digest(&one, 1, reinterpret_cast<std::uint64_t*>(sum.data()), 1, s.get()); });
  const double c = time([&] {
    detail::check(cudaMemcpyAsync(copy.data(), dev.data(), n, cudaMemcpyDeviceToDevice, s.get()), "D2D");
  });
  std::printf("[ws-test] digest of 1 GiB: %.1f us = %.0f GB/s read; D2D copy of 1 GiB: %.1f us = "
              "%.0f GB/s read+write\n",
              d, n / d / 1e3, c, 2.0 * n / c / 1e3);
  CHECK(d > 0);
}
