// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

// weightsync_bench --backend host: the same table for the host backend (host memory, TCP on
// 127.0.0.1, HostCommunicator), so that CPU-only users can measure, and so that the fixed cost of a
// sync (layouts tiny and tiny504) can be set against a raw HostCommunicator::broadcast of the same
// bytes over the same sockets. Needs no CUDA: it builds in a CPU-only configuration too.
//
// Each iteration: the consumers poison their parameters (0xCD), every rank meets at a barrier, the
// host clock times the sync on every rank, and the iteration's time is the maximum over ranks.
// Every received byte is checked against the producer's pattern (#wrong).

#include <weightsync/host/communicator.hpp>
#include <weightsync/layouts.hpp>
#include <weightsync/packed_broadcast.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

namespace host_bench {

namespace ws = weightsync;

struct Options {
  int rank = 0, np = 2, port = 0;
  std::vector<std::string> layouts;
  std::vector<std::string> modes;  // packed, zerocopy, unpacked, unpacked-zc
  std::vector<std::size_t> buffer_sizes;
  std::vector<int> num_buffers;
  int warmup = 3, iters = 10, timeout_s = 120;
  //! One timed sample per iteration: median/min/p99 etc. are computed by the caller's stats.
  std::function<void(const std::string& layout, const std::string& impl, std::size_t bytes,
                     std::size_t tensors, std::size_t chunks, std::size_t buffer, int nbuf,
                     std::vector<double> times_us, unsigned long long wrong, double raw_median_us)>
      emit;
  std::function<void(const std::string& layout, std::size_t tensors, std::size_t bytes)> table;
};

//! The pattern byte of tensor `t` at offset `i` (never 0xCD for the first byte of a tensor).
inline std::uint8_t pattern(std::size_t t, std::size_t i) {
  return static_cast<std::uint8_t>((i * 131 + t * 7919 + 17) % 251);
}

//! One rank of the host benchmark. Returns the number of rows with wrong bytes.
inline int run_rank(const Options& o) {
  using Clock = std::chrono::steady_clock;
  ws::RendezvousOptions r;
  r.address = "127.0.0.1";
  r.port = o.port;
  r.rank = o.rank;
  r.world_size = o.np;
  r.timeout = std::chrono::seconds(o.timeout_s);
  auto comm = ws::HostCommunicator::connect(r, std::chrono::seconds(o.timeout_s));
  const ws::HostStream hs{};
  const bool producer = o.rank == 0;
  // Every rank's `x`, through rank r's broadcast of it: the maximum.
  auto max_over_ranks = [&](double x) {
    double m = x;
    for (int k = 0; k < o.np; ++k) {
      double v = x;
      comm.broadcast(&v, sizeof v, k, hs);
      m = std::max(m, v);
    }
    return m;
  };
  auto sum_over_ranks = [&](double x) {
    double s = 0;
    for (int k = 0; k < o.np; ++k) {
      double v = x;
      comm.broadcast(&v, sizeof v, k, hs);
      s += v;
    }
    return s;
  };
  auto barrier = [&] {
    char b = 0;
    for (int k = 0; k < o.np; ++k) comm.broadcast(&b, 1, k, hs);
  };
  auto time_it = [&](const std::function<void()>& before, const std::function<void()>& body) {
    std::vector<double> t;
    for (int i = 0; i < o.warmup + o.iters; ++i) {
      before();
      barrier();
      const auto t0 = Clock::now();
      body();
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      const double m = max_over_ranks(us);
      if (i >= o.warmup) t.push_back(m);
    }
    return t;
  };
  auto median = [](std::vector<double> t) {
    std::sort(t.begin(), t.end());
    const std::size_t n = t.size();
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  };

  int failures = 0;
  for (const auto& layout : o.layouts) {
    const auto metas = ws::layouts::by_name(layout);
    std::vector<std::size_t> off(metas.size() + 1, 0);
    for (std::size_t i = 0; i < metas.size(); ++i) off[i + 1] = off[i] + metas[i].nbytes();
    const std::size_t bytes = off.back();
    std::vector<std::uint8_t> arena(bytes), expected(bytes);
    for (std::size_t t = 0; t < metas.size(); ++t)
      for (std::size_t i = off[t]; i < off[t + 1]; ++i) expected[i] = pattern(t, i - off[t]);
    if (producer) arena = expected;
    auto poison = [&] {
      if (!producer) std::memset(arena.data(), 0xCD, arena.size());
    };
    auto wrong_bytes = [&]() -> unsigned long long {
      if (producer) return 0;
      unsigned long long w = 0;
      for (std::size_t i = 0; i < bytes; ++i) w += arena[i] != expected[i];
      return w;
    };
    if (o.table) o.table(layout, metas.size(), bytes);

    // Raw: one HostCommunicator::broadcast of the same bytes, on the same sockets.
    unsigned long long wrong = 0;
    auto raw = time_it(poison, [&] { comm.broadcast(arena.data(), bytes, 0, hs); });
    wrong = static_cast<unsigned long long>(sum_over_ranks(double(wrong_bytes())));
    const double raw_median = median(raw);
    if (o.emit) o.emit(layout, "raw-host", bytes, metas.size(), 1, 0, 0, raw, wrong, raw_median);
    failures += wrong != 0;

    ws::workspace_for<ws::HostCommunicator> wsp{ws::HostPolicy{}};
    std::vector<ws::SourceTensorRef> items;
    for (std::size_t i = 0; i < metas.size(); ++i)
      items.push_back({&metas[i], arena.data() + off[i]});
    for (const auto& mode : o.modes)
      for (const std::size_t b : o.buffer_sizes)
        for (const int k : o.num_buffers) {
          const bool unpacked = mode.rfind("unpacked", 0) == 0;
          if (unpacked && (b != o.buffer_sizes.front() || k != o.num_buffers.front())) continue;
          ws::TransferOptions opt;
          opt.packed = !unpacked;
          opt.buffer_size_bytes = b;
          opt.num_buffers = k;
          opt.timeout = std::chrono::seconds(o.timeout_s);
          const bool zc = mode == "zerocopy" || mode == "unpacked-zc";
          auto index = [&](const ws::TensorMeta* m) {
            return static_cast<std::size_t>(m - metas.data());
          };
          if (zc && !producer)
            opt.destination = [&](const ws::TensorMeta& m) -> void* {
              return arena.data() + off[index(&m)];
            };
          ws::TransferStats st;
          auto times = time_it(poison, [&] {
            if (producer) {
              st = ws::packed_broadcast_producer(metas, items, comm, 0, opt, wsp);
              return;
            }
            st = ws::packed_broadcast_consumer(
                metas, comm, 0,
                [&](std::span<const ws::TensorView> batch, ws::HostStream) {
                  for (const auto& v : batch)  // what a server's load_weights does: copy it in
                    if (v.nbytes) std::memcpy(arena.data() + off[index(v.meta)], v.data, v.nbytes);
                },
                opt, wsp);
          });
          wrong = static_cast<unsigned long long>(sum_over_ranks(double(wrong_bytes())));
          if (o.emit)
            o.emit(layout, mode, bytes, metas.size(), st.chunks, unpacked ? 0 : b, unpacked ? 0 : k,
                   times, wrong, raw_median);
          failures += wrong != 0;
        }
  }
  return failures;
}

}  // namespace host_bench
