// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Progress callbacks and per-phase times of both engines (trainer and worker), over the host
// backend across real processes.
#include <weightsync/engine.hpp>
#include <weightsync/pipeline/detail/run.hpp>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/catch.hpp"
#include "support/engine_options.hpp"
#include "support/host_world.hpp"
#include "support/outcomes.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_progress_test {

using namespace weightsync;
using namespace std::chrono_literals;

namespace {

//! [progress line]
// A progress line on a terminal: "\r  12.0 MiB / 64.0 MiB  chunk 3/16  850.2 MB/s".
inline void print_progress(const weightsync::TransferProgress& p) {
  std::fprintf(stderr, "\r%8.1f MiB / %.1f MiB  chunk %zu/%zu  %.1f MB/s%s",
               static_cast<double>(p.bytes_done) / (1 << 20),
               static_cast<double>(p.bytes_total) / (1 << 20), p.chunk, p.chunks,
               p.bytes_per_second() / 1e6, p.done() ? "\n" : "");
}
// ... engine_options.progress = print_progress;
//! [progress line]

struct Model {
  std::vector<TensorMeta> m;
  std::vector<std::vector<std::byte>> data;
  Model() {
    for (int i = 0; i < 12; ++i) m.push_back({"t" + std::to_string(i), DType::float32, {64, 16}});
    for (const auto& t : m) data.emplace_back(t.nbytes(), std::byte{1});
  }
  std::vector<TensorMeta> metas() const { return m; }
  std::vector<SourceTensorRef> iterate() {
    std::vector<SourceTensorRef> v;
    for (std::size_t i = 0; i < m.size(); ++i) v.push_back({&m[i], data[i].data()});
    return v;
  }
};

// 12 tensors of 4 KiB, chunks of more than 8 KiB: 4 chunks of 3 tensors.
NcclInitInfo init_info(int port) {
  NcclInitInfo i = ws_test::loopback_init_info(port, 2);
  i.packed = true;
  i.packed_buffer_size_bytes = 8192;
  return i;
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// The calls a transfer made: 0 first, then one per chunk, monotonic, the last one done().
void check_calls(const std::vector<TransferProgress>& calls, const TransferStats& st,
                 const char* side) {
  const std::string s = side;
  require(st.chunks == 4, s + ": expected 4 chunks, got " + std::to_string(st.chunks));
  require(calls.size() == st.chunks + 1, s + ": " + std::to_string(calls.size()) +
                                             " progress calls for " + std::to_string(st.chunks) +
                                             " chunks");
  require(calls.front().bytes_done == 0 && calls.front().chunk == 0, s + ": first call not 0");
  for (std::size_t i = 1; i < calls.size(); ++i) {
    require(calls[i].bytes_done > calls[i - 1].bytes_done, s + ": bytes_done not increasing");
    require(calls[i].chunk == i, s + ": chunk index");
    require(calls[i].chunks == st.chunks && calls[i].bytes_total == st.bytes, s + ": totals");
    require(calls[i].elapsed >= calls[i - 1].elapsed, s + ": elapsed went back");
  }
  require(calls.back().done() && calls.back().bytes_done == st.bytes, s + ": last call not done");
  for (std::size_t i = 0; i + 1 < calls.size(); ++i) require(!calls[i].done(), s + ": early done");
  require(calls.back().bytes_per_second() > 0, s + ": no rate");
  // Phase times: each measured, and they add up to no more than the whole call.
  require(st.handshake.count() > 0 && st.data.count() > 0 && st.total.count() > 0,
          s + ": a phase time is zero");
  require(st.handshake + st.data + st.finish <= st.total + 1ms, s + ": phases exceed the total");
  require(st.data_bytes_per_second() > 0, s + ": no data rate");
}

}  // namespace

TEST_CASE("progress: both engines report bytes, chunks and rate, and stats carry per-phase times",
          "[unit][engine][progress]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  EngineOptions base;
  base.backend = "host";
  base.timeout = 15s;
  procs.spawn([=] {
    std::vector<TransferProgress> calls;
    EngineOptions o = base;
    o.progress = [&](const TransferProgress& p) { calls.push_back(p); };
    TrainerEngine t(ws_test::options_for<TrainerEngine>(o));
    t.trainer_init(init_info(port));
    for (int round = 0; round < 2; ++round) {
      calls.clear();
      Model src;
      const auto st = t.send_weights(src);
      check_calls(calls, st, "trainer");
    }
  });
  procs.spawn([=] {
    std::vector<TransferProgress> calls;
    std::size_t loaded = 0;
    EngineOptions o = base;
    o.progress = [&](const TransferProgress& p) {
      // A consumer's chunk counts once load_weights returned for it.
      require(p.chunk == 0 || loaded == p.chunk * 3, "progress before load_weights");
      calls.push_back(p);
    };
    WeightTransferEngine e(ws_test::options_for<WeightTransferEngine>(o));
    e.init_transfer_engine(init_info(port));
    for (int round = 0; round < 2; ++round) {
      calls.clear();
      loaded = 0;
      e.start_weight_update();
      const auto st = e.update_weights(NcclUpdateInfo::from_metas(Model().metas()),
                                       [&](std::span<const TensorView> v, void*) {
                                         loaded += v.size();
                                         std::this_thread::sleep_for(1ms);
                                       });
      e.finish_weight_update();
      check_calls(calls, st, "worker");
      require(st.load >= 4ms && st.load <= st.data, "worker: load time not within data");
    }
  });
  ws_test::expect_all_ok(procs.wait_all(60s));
}

TEST_CASE("progress: a transfer without chunks still makes its last call", "[unit][progress]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  EngineOptions base;
  base.backend = "host";
  base.timeout = 15s;
  procs.spawn([=] {
    int calls = 0;
    EngineOptions o = base;
    o.progress = [&](const TransferProgress& p) {
      ++calls;
      require(p.done() && p.bytes_total == 0, "an empty transfer is done at once");
    };
    TrainerEngine t(ws_test::options_for<TrainerEngine>(o));
    t.trainer_init(init_info(port));
    struct Empty {
      std::vector<TensorMeta> metas() const { return {}; }
      std::vector<SourceTensorRef> iterate() { return {}; }
    } src;
    t.send_weights(src);
    require(calls >= 1, "no progress call");
  });
  procs.spawn([=] {
    WeightTransferEngine e(ws_test::options_for<WeightTransferEngine>(base));
    e.init_transfer_engine(init_info(port));
    e.start_weight_update();
    e.update_weights(NcclUpdateInfo::from_metas({}), [](std::span<const TensorView>, void*) {});
    e.finish_weight_update();
  });
  ws_test::expect_all_ok(procs.wait_all(60s));
}

TEST_CASE("phase trace: one line of points in microseconds, nothing when off, at most kMax points",
          "[pipeline][trace]") {
  const auto t0 = std::chrono::steady_clock::now() - std::chrono::microseconds(1500);
  detail::PhaseTrace on(t0, true);
  on.mark("planned");
  on.mark("exchanged");
  const std::string l = on.line(1, "consumer");
  CHECK(l.rfind("weightsync trace rank 1 consumer: planned ", 0) == 0);
  REQUIRE(l.find(", exchanged ") != std::string::npos);
  // Each time is at least the 1.5 ms before t0 was taken, with one decimal.
  const double first = std::stod(l.substr(l.find("planned ") + 8));
  const double second = std::stod(l.substr(l.find("exchanged ") + 10));
  CHECK(first >= 1500.0);
  CHECK(second >= first);
  CHECK(l.back() != ',');

  detail::PhaseTrace off(t0, false);
  off.mark("planned");
  CHECK(off.line(0, "producer").empty());
  CHECK(detail::PhaseTrace(t0, true).line(0, "producer").empty());  // no points

  detail::PhaseTrace many(t0, true);
  for (std::size_t i = 0; i < detail::PhaseTrace::kMax + 5; ++i) many.mark("p");
  const std::string m = many.line(0, "producer");
  std::size_t points = 0;
  for (std::size_t at = m.find(" p "); at != std::string::npos; at = m.find(" p ", at + 1)) ++points;
  CHECK(points == detail::PhaseTrace::kMax);
}

}  // namespace ws_test_progress_test
