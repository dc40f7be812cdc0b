// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

// weightsync_bench --backend host: the same table for the host backend (host memory, TCP on
// 127.0.0.1, HostCommunicator), so that CPU-only users can measure, and so that the fixed cost of a
// sync (layouts tiny and tiny504) can be set against a raw HostCommunicator::broadcast of the same
// bytes over the same sockets. Needs no CUDA: it builds in a CPU-only configuration too.
//
// Each iteration: the consumers poison their parameters (0xCD), every rank meets at a barrier
// (Options::shm_barrier), the host clock times the sync on every rank, and the iteration's time is
// the maximum over ranks.
// Every received byte is checked against the producer's pattern (#wrong).

#include <weightsync/delta/receive.hpp>
#include <weightsync/delta/source.hpp>
#include <weightsync/host/communicator.hpp>
#include <weightsync/layouts.hpp>
#include <weightsync/packed_broadcast.hpp>
#include <weightsync/sealed_metadata.hpp>
#include <weightsync/vllm.hpp>

#include "shm_barrier.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
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
  std::vector<double> delta;  //!< densities of the delta rows (after the full rows)
  bool delta_always = false;  //!< DeltaMode::always instead of automatic
  //! A delta row's note: density, wire bytes, encode / apply / reference update (us, medians).
  std::function<void(double density, std::size_t wire, std::size_t bytes, double encode_us,
                     double apply_us, double commit_us, double sync_us, double full_us,
                     bool whole_round)>
      delta_note;
  //! One timed sample per iteration: median/min/p99 etc. are computed by the caller's stats.
  std::function<void(const std::string& layout, const std::string& impl, std::size_t bytes,
                     std::size_t tensors, std::size_t chunks, std::size_t buffer, int nbuf,
                     std::vector<double> times_us, unsigned long long wrong, double raw_median_us)>
      emit;
  std::function<void(const std::string& layout, std::size_t tensors, std::size_t bytes)> table;
  //! --paired: each mode row is timed in turn with a raw broadcast of its bytes (from a buffer of
  //! its own), one of each per iteration, alternating which goes first; after the row's emit,
  //! paired_note gets the raw times, the per-iteration extra (row - raw) and the raw's wrong bytes.
  bool sealed = true;  //!< the layout as a SealedMetadata (false: a span, compared every sync)
  //! The barrier before each timed iteration: a spin on a shared-memory counter, every rank
  //! leaving within about a microsecond (ranks on one host), or (false) one 1-byte broadcast from
  //! every rank over the sockets, which releases the ranks a loopback latency apart: whichever
  //! leaves first has that latency in its time, or misses the transfer's (a raw broadcast whose
  //! receiver left last took 2 us for 32 KiB, host135's first try).
  bool shm_barrier = true;
  bool paired = false;
  std::function<void(const std::string& layout, const std::string& impl, std::size_t bytes,
                     std::vector<double> raw_us, std::vector<double> extra_us,
                     unsigned long long raw_wrong)>
      paired_note;
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
  auto tcp_barrier = [&] {
    char b = 0;
    for (int k = 0; k < o.np; ++k) comm.broadcast(&b, 1, k, hs);
  };
  std::optional<ws_bench::ShmBarrier> shm;
  if (o.shm_barrier)
    shm.emplace("/ws_host_bench_" + std::to_string(o.port), o.np, o.rank,
                std::chrono::seconds(o.timeout_s), tcp_barrier);
  auto barrier = [&] {
    if (shm)
      shm->wait();
    else
      tcp_barrier();
  };
  // One iteration: `before` untimed, the barrier, then `body` on the host clock; the max over ranks.
  auto time_once = [&](const std::function<void()>& before, const std::function<void()>& body) {
    before();
    barrier();
    const auto t0 = Clock::now();
    body();
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    return max_over_ranks(us);
  };
  auto time_it = [&](const std::function<void()>& before, const std::function<void()>& body) {
    std::vector<double> t;
    for (int i = 0; i < o.warmup + o.iters; ++i) {
      const double m = time_once(before, body);
      if (i >= o.warmup) t.push_back(m);
    }
    return t;
  };
  // Options::paired: A and B in turn, A first in even iterations; returns {A's, B's} times.
  auto time_pair = [&](const std::function<void()>& before_a, const std::function<void()>& a,
                       const std::function<void()>& before_b, const std::function<void()>& b) {
    std::vector<double> t[2];
    for (int i = 0; i < o.warmup + o.iters; ++i) {
      double m[2];
      for (int j = 0; j < 2; ++j) {
        const int which = i % 2 == 0 ? j : 1 - j;
        m[which] = which == 0 ? time_once(before_a, a) : time_once(before_b, b);
      }
      if (i < o.warmup) continue;
      t[0].push_back(m[0]);
      t[1].push_back(m[1]);
    }
    return std::pair{std::move(t[0]), std::move(t[1])};
  };
  auto median = [](std::vector<double> t) {
    std::sort(t.begin(), t.end());
    const std::size_t n = t.size();
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  };

  int failures = 0;
  for (const auto& layout : o.layouts) {
    const ws::SealedMetadata sealed(ws::layouts::by_name(layout));
    const std::span<const ws::TensorMeta> metas = sealed.metas();
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
    double full_median = raw_median;  // the packed row's, for the delta rows
    if (o.emit) o.emit(layout, "raw-host", bytes, metas.size(), 1, 0, 0, raw, wrong, raw_median);
    failures += wrong != 0;

    // Options::paired: the raw broadcast's own buffer, checked like the arena.
    std::vector<std::uint8_t> raw_buf(o.paired ? bytes : 0);
    if (o.paired && producer) raw_buf = expected;
    auto poison_raw = [&] {
      if (!producer) std::memset(raw_buf.data(), 0xCD, raw_buf.size());
    };
    auto raw_wrong = [&]() -> unsigned long long {
      unsigned long long w = 0;
      if (!producer)
        for (std::size_t i = 0; i < raw_buf.size(); ++i) w += raw_buf[i] != expected[i];
      return static_cast<unsigned long long>(sum_over_ranks(double(w)));
    };

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
          const std::function<void()> sync = [&] {
            if (producer) {
              st = o.sealed ? ws::packed_broadcast_producer(sealed, items, comm, 0, opt, wsp)
                            : ws::packed_broadcast_producer(metas, items, comm, 0, opt, wsp);
              return;
            }
            auto load = [&](std::span<const ws::TensorView> batch, ws::HostStream) {
              for (const auto& v : batch)  // what a server's load_weights does: copy it in
                if (v.nbytes) std::memcpy(arena.data() + off[index(v.meta)], v.data, v.nbytes);
            };
            st = o.sealed ? ws::packed_broadcast_consumer(sealed, comm, 0, load, opt, wsp)
                          : ws::packed_broadcast_consumer(metas, comm, 0, load, opt, wsp);
          };
          std::vector<double> times, raw_times;
          if (o.paired)
            std::tie(times, raw_times) = time_pair(
                poison, sync, poison_raw, [&] { comm.broadcast(raw_buf.data(), bytes, 0, hs); });
          else
            times = time_it(poison, sync);
          wrong = static_cast<unsigned long long>(sum_over_ranks(double(wrong_bytes())));
          if (mode == "packed" && b == o.buffer_sizes.front() && k == o.num_buffers.front())
            full_median = median(times);
          if (o.emit)
            o.emit(layout, mode, bytes, metas.size(), st.chunks, unpacked ? 0 : b, unpacked ? 0 : k,
                   times, wrong, raw_median);
          if (o.paired) {
            const unsigned long long rw = raw_wrong();
            std::vector<double> extra(times.size());
            for (std::size_t i = 0; i < times.size(); ++i) extra[i] = times[i] - raw_times[i];
            if (o.paired_note) o.paired_note(layout, mode, bytes, raw_times, extra, rw);
            failures += rw != 0;
          }
          failures += wrong != 0;
        }

    // Delta rows: every rank holds v0 (the pattern); the trainer's step flips one bit in a
    // `density` share of the 2-byte elements (positions from a hash: deterministic); DeltaSource
    // encodes against its reference (seeded with v0 before each iteration, untimed) and the
    // consumer's UpdateReceiver applies the blobs in place. vs_raw: against the packed full row.
    struct Source {
      const std::span<const ws::TensorMeta>* m;
      std::vector<std::uint8_t>* a;
      const std::vector<std::size_t>* off;
      std::vector<ws::TensorMeta> metas() const { return {m->begin(), m->end()}; }
      std::vector<ws::SourceTensorRef> iterate() const {
        std::vector<ws::SourceTensorRef> v;
        for (std::size_t i = 0; i < m->size(); ++i) v.push_back({&(*m)[i], a->data() + (*off)[i]});
        return v;
      }
    };
    auto step = [&](std::vector<std::uint8_t>& a, double density, std::uint64_t seed) {
      const auto threshold = static_cast<std::uint64_t>(density * 18446744073709551615.0);
      for (std::size_t e = 0; e + 1 < a.size(); e += 2) {
        std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + e;  // splitmix64
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        x ^= x >> 31;
        if (x < threshold) a[e + (x >> 40) % 2] ^= static_cast<std::uint8_t>(1u << ((x >> 48) % 8));
      }
    };
    Source src{&metas, &arena, &off};
    // DeltaMode::automatic, told the link's speed as the full packed row measured it.
    ws::DeltaOptions dopt;
    if (o.delta_always) dopt.mode = ws::DeltaMode::always;
    if (full_median > 0) dopt.link_bytes_per_s = double(bytes) / (full_median * 1e-6);
    ws::DeltaSource<Source> d(src, dopt);
    auto plain = ws::NcclUpdateInfo::from_metas({metas.begin(), metas.end()});
    plain.packed = true;
    plain.packed_buffer_size_bytes = static_cast<std::int64_t>(o.buffer_sizes.front());
    plain.packed_num_buffers = o.num_buffers.front();
    for (std::size_t di = 0; di < o.delta.size(); ++di) {
      const double density = o.delta[di];
      const std::uint64_t seed = 7000 + 1000 * di;
      std::vector<std::uint8_t> want = expected;
      step(want, density, seed);
      auto reset = [&] {
        arena = expected;
        if (producer) {
          d.seed("v0");
          arena = want;
        }
      };
      std::vector<std::int64_t> payload(metas.size() + 1, 0);  // + whether the round is whole
      if (producer) {
        reset();
        const auto first = d.prepare("v1", plain);
        std::copy(first.delta->payload_bytes.begin(), first.delta->payload_bytes.end(),
                  payload.begin());
        payload.back() = first.delta->base_version.empty() ? 1 : 0;
        d.invalidate();
      }
      comm.broadcast(payload.data(), payload.size() * sizeof(std::int64_t), 0, hs);
      const bool whole_round = payload.back() != 0;
      payload.pop_back();
      auto info = plain;
      info.delta =
          ws::DeltaUpdate{whole_round ? "" : "v0", ws::delta::kDefaultBucketElems, payload, {}};
      const auto wire = ws::detail::update_wire(info, "v0");
      std::size_t wire_bytes = 0;
      for (const auto& m : wire.metas) wire_bytes += m.nbytes();
      std::vector<double> enc, app;
      unsigned long long bad = 0;
      ws::TransferOptions opt;
      opt.buffer_size_bytes = o.buffer_sizes.front();
      opt.num_buffers = o.num_buffers.front();
      opt.timeout = std::chrono::seconds(o.timeout_s);
      ws::TransferStats st;
      int iteration = 0;
      auto times = time_it(
          [&] {
            if (iteration++ > 0 && !producer) bad += arena != want;
            reset();
          },
          [&] {
            if (producer) {
              (void)d.prepare("v1", plain);
              enc.push_back(std::chrono::duration<double, std::micro>(d.stats().encode).count());
              const auto wm = d.metas();
              auto items2 = d.iterate();
              st = ws::packed_broadcast_producer(wm, items2, comm, 0, opt, wsp);
              return;
            }
            ws::detail::UpdateReceiver rx(
                wire, nullptr,
                [&](const ws::TensorMeta& m) -> void* {
                  for (std::size_t i = 0; i < metas.size(); ++i)
                    if (metas[i].name == m.name) return arena.data() + off[i];
                  return nullptr;
                },
                false);
            auto o2 = opt;
            o2.destination = rx.destination();
            auto load = rx.load();
            st = ws::packed_broadcast_consumer(
                rx.metas(), comm, 0,
                [&](std::span<const ws::TensorView> batch, ws::HostStream) { load(batch, nullptr); },
                o2, wsp);
            app.push_back(std::chrono::duration<double, std::micro>(st.load).count());
          });
      if (!producer) bad += arena != want;
      double commit_us = 0;
      if (producer) {
        const auto t0 = Clock::now();
        d.commit();
        commit_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      }
      wrong = static_cast<unsigned long long>(sum_over_ranks(double(bad)));
      const double e = max_over_ranks(enc.empty() ? 0.0 : median(enc));
      const double ap = max_over_ranks(app.empty() ? 0.0 : median(app));
      const double c = max_over_ranks(commit_us);
      char impl[32];
      std::snprintf(impl, sizeof impl, "delta-%.4g", density);
      if (o.emit)
        o.emit(layout, impl, wire_bytes, wire.metas.size(), st.chunks, o.buffer_sizes.front(),
               o.num_buffers.front(), times, wrong, full_median);
      if (o.delta_note)
        o.delta_note(density, wire_bytes, bytes, e, ap, c, median(times), full_median, whole_round);
      failures += wrong != 0;
    }
  }
  return failures;
}

}  // namespace host_bench
