// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Shadow mode (engine/shadow.hpp): snapshots, the reuse of a copy after its last reader, and the
// commit of a TP=2 engine that flips on both ranks or on neither (host backend, real processes).
#include <weightsync/engine.hpp>
#include <weightsync/engine/shadow.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support/catch.hpp"
#include "support/engine_options.hpp"
#include "support/host_world.hpp"
#include "support/outcomes.hpp"
#include "support/process.hpp"
#include "support/shard_model.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_shadow_test {

using namespace weightsync;
using namespace std::chrono_literals;

namespace {

// The trainer's model; round r's bytes are a function of r (round 0: the server's initial weights).
struct Model {
  std::vector<TensorMeta> m = {{"w1", DType::float32, {3, 5}},
                               {"b1", DType::float32, {5}},
                               {"scale", DType::bfloat16, {}},
                               {"empty", DType::int8, {0}},
                               {"w2", DType::float16, {64, 7}}};
  std::vector<std::vector<std::byte>> data;

  explicit Model(int round) {
    for (std::size_t i = 0; i < m.size(); ++i) {
      data.emplace_back(m[i].nbytes());
      std::mt19937 rng(static_cast<unsigned>(round * 100 + static_cast<int>(i)));
      for (auto& b : data.back()) b = std::byte(rng());
    }
  }
  std::vector<TensorMeta> metas() const { return m; }
  std::vector<SourceTensorRef> iterate() {
    std::vector<SourceTensorRef> v;
    for (std::size_t i = 0; i < m.size(); ++i) v.push_back({&m[i], data[i].data()});
    return v;
  }
};
static_assert(WeightSource<Model>);

// A TP=2 worker's parameters: w1, b1, scale, empty replicated; w2 split by rows (32 rows each).
constexpr std::int64_t kRows = 32;
std::vector<TensorMeta> worker_metas() {
  auto m = Model(0).m;
  m[4].shape = {kRows, 7};
  return m;
}
// What worker `local_rank` holds in round r.
std::vector<std::byte> worker_bytes(int round, int local_rank, std::size_t i) {
  Model model(round);
  if (i != 4) return model.data[i];
  const std::size_t half = model.data[4].size() / 2;
  const auto* from = model.data[4].data() + half * static_cast<std::size_t>(local_rank);
  return {from, from + half};
}

NcclInitInfo host_info(int port, int world) {
  NcclInitInfo i = ws_test::loopback_init_info(port, world, 1);
  i.packed = true;
  i.packed_buffer_size_bytes = 64;
  return i;
}

EngineOptions shadow_engine(std::chrono::milliseconds timeout = 15s) {
  EngineOptions o;
  o.backend = "host";
  o.timeout = timeout;
  o.acknowledge = Acknowledge::each_transfer;
  o.checksum = true;  // every chunk verified before the commit
  return o;
}

WeightTransferEngine::Options worker_options(int local_rank, int tp,
                                             std::chrono::milliseconds timeout = 15s) {
  auto o = ws_test::options_for<WeightTransferEngine>(shadow_engine(timeout));
  o.parallel.tensor_parallel_size = tp;
  o.parallel.local_rank = local_rank;
  o.shadow.enabled = true;
  return o;
}

// The server's own parameter memory, holding round 0 (version "default").
struct ServerWeights {
  std::vector<TensorMeta> metas = worker_metas();
  std::vector<std::vector<std::byte>> live;
  explicit ServerWeights(int local_rank) {
    for (std::size_t i = 0; i < metas.size(); ++i) live.push_back(worker_bytes(0, local_rank, i));
  }
  std::vector<ShadowParameter> table() {
    std::vector<ShadowParameter> t;
    for (std::size_t i = 0; i < metas.size(); ++i) t.push_back({metas[i], live[i].data(), nullptr});
    return t;
  }
};

// Throws unless `s` holds exactly round `round`'s bytes for this worker.
void expect_snapshot(const Snapshot& s, int round, int local_rank) {
  const auto metas = worker_metas();
  for (std::size_t i = 0; i < metas.size(); ++i) {
    const auto& p = s.at(metas[i].name);
    const auto want = worker_bytes(round, local_rank, i);
    if (p.nbytes() != want.size() ||
        (!want.empty() && std::memcmp(p.data, want.data(), want.size())))
      throw std::runtime_error("snapshot '" + s.version() + "': " + metas[i].name +
                               " is not round " + std::to_string(round) + "'s");
  }
}
int round_of(const std::string& version) {
  return version == "default" ? 0 : std::stoi(version.substr(1));
}

// One update of the TP worker: w2 (a shard) through load_weights into the shadow, the rest
// directly into it. `fail`: load_weights throws.
void receive_round(WeightTransferEngine& e, int local_rank, bool fail) {
  const auto u = NcclUpdateInfo::from_metas(Model(0).metas());
  e.update_weights(u, [&](std::span<const TensorView> batch, void*) {
    if (fail) throw std::runtime_error("disk full");
    const auto shadow = e.shadow_snapshot();
    for (const auto& v : batch) {
      if (v.name() != "w2") throw std::runtime_error("unexpected view of " + v.name());
      const auto& p = shadow->at("w2");
      std::memcpy(p.data, static_cast<const std::byte*>(v.data) + p.nbytes() * local_rank,
                  p.nbytes());
    }
  });
}

}  // namespace

TEST_CASE("shadow weights: snapshots keep their version and a copy is reused after its last reader",
          "[unit][shadow]") {
  std::vector<std::byte> a(16, std::byte{1}), b(3, std::byte{2}), b2(3);
  std::vector<ShadowParameter> params = {{{"a", DType::float32, {4}}, a.data(), nullptr},
                                         {{"b", DType::int8, {3}}, b.data(), b2.data()}};
  ShadowWeights w(params, nullptr, "v0");
  CHECK(w.parameter_bytes() == 19);
  CHECK(w.extra_bytes() == 256);  // a's second copy, aligned
  CHECK(w.provided_bytes() == 3);

  auto s0 = w.acquire();
  CHECK(s0->version() == "v0");
  CHECK(s0->generation() == 0);
  CHECK(s0->at("a").data == a.data());
  CHECK(s0->find("nope") == nullptr);
  CHECK_THROWS_AS(s0->at("nope"), config_error);

  w.begin(100ms, true);
  auto shadow = w.shadow();
  REQUIRE(shadow);
  CHECK(shadow->copy() == 1);
  CHECK(shadow->at("b").data == b2.data());
  CHECK(std::memcmp(shadow->at("a").data, a.data(), 16) == 0);  // starts as a copy of live
  CHECK(w.destination({"a", DType::float32, {4}}) == shadow->at("a").data);
  CHECK(w.destination({"a", DType::float32, {2, 2}}) == nullptr);  // another shape: to load
  CHECK(w.destination({"a", DType::int32, {4}}) == nullptr);
  std::memset(shadow->at("a").data, 7, 16);
  shadow.reset();
  w.publish("v1");

  auto s1 = w.acquire();
  CHECK(s1->version() == "v1");
  CHECK(s1->generation() == 1);
  CHECK(static_cast<std::byte*>(s1->at("a").data)[0] == std::byte{7});
  CHECK(s0->version() == "v0");  // a reader of v0 still sees v0's bytes
  CHECK(static_cast<std::byte*>(s0->at("a").data)[15] == std::byte{1});

  // v0's copy is the next shadow: held, the next session cannot start.
  try {
    w.begin(50ms, true);
    FAIL("begin did not wait for the reader of v0");
  } catch (const timeout_error& e) {
    CHECK(e.phase() == "shadow");
    const std::string what = e.what();
    CHECK(what.find("version 'v0'") != std::string::npos);
    CHECK(what.find("held by 1 snapshot") != std::string::npos);
  }
  CHECK(w.acquire()->version() == "v1");  // the failed start changed nothing
  // Released within the timeout: the start waits for it.
  std::thread reader([s = std::move(s0)]() mutable {
    std::this_thread::sleep_for(50ms);
    s.reset();
  });
  w.begin(10s, true);
  reader.join();
  CHECK(std::memcmp(w.shadow()->at("a").data, s1->at("a").data, 16) == 0);
  w.discard();
  CHECK(w.acquire()->version() == "v1");

  std::vector<ShadowParameter> twice = {params[0], params[0]};
  try {
    ShadowWeights bad(twice, nullptr, "x");
    FAIL("a name registered twice was accepted");
  } catch (const config_error& e) {
    CHECK(e.field() == "parameters[1] (a)");
  }
}

TEST_CASE("shadow mode: options that cannot commit together are refused, naming the field",
          "[unit][shadow]") {
  auto field_of = [](WeightTransferEngine::Options o) -> std::string {
    try {
      WeightTransferEngine e(o);
    } catch (const config_error& x) {
      return x.field();
    }
    return "";
  };
  auto o = worker_options(0, 1);
  o.engine.acknowledge = Acknowledge::next_transfer;
  CHECK(field_of(o) == "acknowledge");
  o = worker_options(0, 1);
  o.engine.protocol = Protocol::vllm;
  CHECK(field_of(o) == "protocol");
  o = worker_options(0, 1);
  o.engine.backend = "nccl";
  CHECK(field_of(o) == "shadow.memory");
  CHECK(field_of(worker_options(0, 1)).empty());
  CHECK(WeightTransferEngine::transfer_options({}, {}, shadow_engine()).checksum);
  auto ipc = shadow_engine();
  ipc.backend = "ipc";  // the ipc backends carry checksums too (whole-tensor syncs)
  CHECK(WeightTransferEngine::transfer_options({}, {}, ipc).checksum);

  WeightTransferEngine in_place;
  CHECK_THROWS_AS(in_place.register_parameters({}), config_error);
  CHECK_THROWS_AS(in_place.acquire(), state_error);
  WeightTransferEngine shadow(worker_options(0, 1));
  CHECK_THROWS_AS(shadow.acquire(), state_error);
  ServerWeights mine(0);
  shadow.register_parameters(mine.table());
  CHECK(shadow.shadow_extra_bytes() == 3 * 256 + 0 + 512);  // w1 60, b1 20, scale 2, w2 448
  CHECK(shadow.acquire()->version() == "default");
  CHECK(shadow.shadow_snapshot() == nullptr);
}

TEST_CASE(
    "shadow mode: a TP=2 engine commits on both ranks or neither - a failed load on rank 2 "
    "discards both shadows and v keeps serving bit-exact",
    "[unit][shadow][engine]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  procs.spawn([=] {  // the trainer: rounds 1-3, round 4 fails on rank 2, round 5
    TrainerEngine t(ws_test::options_for<TrainerEngine>(shadow_engine()));
    t.trainer_init(host_info(port, 3));
    for (int round = 1; round <= 5; ++round) {
      Model src(round);
      if (round != 4) {
        t.send_weights(src);
        continue;
      }
      bool reported = false;
      try {
        t.send_weights(src);
      } catch (const remote_error& e) {
        reported = e.peer() == 2 && std::string(e.what()).find("disk full") != std::string::npos;
      }
      if (!reported) throw std::runtime_error("the trainer did not see rank 2's failure");
    }
  });
  for (int local = 0; local < 2; ++local) {
    procs.spawn([=] {
      WeightTransferEngine e(worker_options(local, 2));
      ServerWeights server(local);
      e.register_parameters(server.table());
      e.init_transfer_engine(host_info(port, 3));
      // A reader that keeps serving during the syncs: every snapshot is one whole version.
      std::atomic<bool> stop{false};
      std::atomic<int> reads{0};
      std::string reader_error;
      std::thread reader([&] {
        try {
          while (!stop) {
            const auto s = e.acquire();
            expect_snapshot(*s, round_of(s->version()), local);
            ++reads;
          }
        } catch (const std::exception& x) {
          reader_error = x.what();
        }
      });
      // The syncs start once the reader runs (on a busy machine its thread may start late; the
      // five rounds can take only milliseconds).
      for (int i = 0; i < 5000 && reads == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::string error;
      try {
        std::shared_ptr<const Snapshot> held;
        for (int round = 1; round <= 5; ++round) {
          e.start_weight_update();
          if (round != 4) {
            receive_round(e, local, false);
            if (round == 2) held = e.acquire();  // a reader across the flip: v1 throughout
            e.finish_weight_update("v" + std::to_string(round));
            if (round == 2) {
              expect_snapshot(*held, 1, local);
              held.reset();  // let v1's copy become the next shadow
            }
            const auto now = e.acquire();
            if (now->version() != "v" + std::to_string(round))
              throw std::runtime_error("round " + std::to_string(round) + " did not flip");
            expect_snapshot(*now, round, local);
            continue;
          }
          // Round 4: rank 2 (local 1) fails its load; rank 1 learns it in the same call.
          bool failed = false;
          try {
            receive_round(e, local, local == 1);
          } catch (const remote_error& x) {
            failed = local == 0 && x.peer() == 2 &&
                     std::string(x.what()).find("disk full") != std::string::npos;
          } catch (const std::runtime_error& x) {
            failed = local == 1 && std::string(x.what()) == "disk full";
          }
          if (!failed) throw std::runtime_error("round 4 did not fail as expected");
          if (e.updating()) throw std::runtime_error("the failed update did not end the session");
          const auto now = e.acquire();
          if (now->version() != "v3" || e.weight_version() != "v3")
            throw std::runtime_error("a failed round flipped to " + now->version());
          expect_snapshot(*now, 3, local);
        }
      } catch (const std::exception& x) {
        error = x.what();
      }
      stop = true;
      reader.join();
      if (!error.empty()) throw std::runtime_error(error);
      if (!reader_error.empty()) throw std::runtime_error("reader: " + reader_error);
      if (reads == 0) throw std::runtime_error("the reader never read");
    });
  }
  ws_test::expect_all_ok(procs.wait_all(60s));
}

TEST_CASE(
    "shadow mode: a start whose shadow is still held waits within the timeout then fails "
    "naming the version held - released the next start works",
    "[unit][shadow][engine]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  procs.spawn([=] {
    TrainerEngine t(ws_test::options_for<TrainerEngine>(shadow_engine()));
    t.trainer_init(host_info(port, 2));
    for (int round = 1; round <= 2; ++round) {
      Model src(round);
      t.send_weights(src);
    }
  });
  procs.spawn([=] {
    WeightTransferEngine e(worker_options(0, 1, 2s));
    // TP=1: the worker holds w2 whole (load_weights gets nothing).
    std::vector<std::vector<std::byte>> live = Model(0).data;
    std::vector<ShadowParameter> table;
    for (std::size_t i = 0; i < live.size(); ++i)
      table.push_back({Model(0).m[i], live[i].data(), nullptr});
    e.register_parameters(table);
    e.init_transfer_engine(host_info(port, 2));
    auto no_load = [](std::span<const TensorView> b, void*) {
      if (!b.empty()) throw std::runtime_error("every tensor should have landed in the shadow");
    };
    const auto u = NcclUpdateInfo::from_metas(Model(0).metas());
    auto held = e.acquire();  // "default", in copy 0: the shadow after round 1
    e.start_weight_update();
    e.update_weights(u, no_load);
    e.finish_weight_update("v1");
    const auto t0 = std::chrono::steady_clock::now();
    bool named = false;
    try {
      e.start_weight_update();
    } catch (const timeout_error& x) {
      named = std::string(x.what()).find("version 'default'") != std::string::npos;
    }
    if (!named) throw std::runtime_error("the start did not fail naming version 'default'");
    if (std::chrono::steady_clock::now() - t0 < 1900ms)
      throw std::runtime_error("the start did not wait for the timeout");
    if (e.updating()) throw std::runtime_error("the failed start left a session open");
    held.reset();
    e.start_weight_update();
    e.update_weights(u, no_load);
    e.finish_weight_update("v2");
    const auto s = e.acquire();
    if (s->version() != "v2") throw std::runtime_error("no v2");
    Model want(2);
    for (std::size_t i = 0; i < want.m.size(); ++i)
      if (want.data[i].size() &&
          std::memcmp(s->at(want.m[i].name).data, want.data[i].data(), want.data[i].size()))
        throw std::runtime_error("v2 differs in " + want.m[i].name);
  });
  ws_test::expect_all_ok(procs.wait_all(60s));
}

TEST_CASE(
    "shadow mode: a deadline on rank 2 (its load outlives the timeout) fails the update on every "
    "rank and neither flips",
    "[unit][shadow][engine]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  procs.spawn([=] {
    TrainerEngine t(ws_test::options_for<TrainerEngine>(shadow_engine(2s)));
    t.trainer_init(host_info(port, 3));
    Model r1(1), r2(2);
    t.send_weights(r1);
    bool failed = false;
    try {
      t.send_weights(r2);
    } catch (const weightsync::error&) {
      failed = true;
    }
    if (!failed) throw std::runtime_error("the trainer's round 2 did not fail");
  });
  for (int local = 0; local < 2; ++local) {
    procs.spawn([=] {
      WeightTransferEngine e(worker_options(local, 2, 2s));
      ServerWeights server(local);
      e.register_parameters(server.table());
      e.init_transfer_engine(host_info(port, 3));
      e.start_weight_update();
      receive_round(e, local, false);
      e.finish_weight_update("v1");
      e.start_weight_update();
      const auto u = NcclUpdateInfo::from_metas(Model(0).metas());
      bool failed = false;
      try {
        e.update_weights(u, [&](std::span<const TensorView>, void*) {
          if (local == 1) std::this_thread::sleep_for(3s);  // past every rank's deadline
          const auto shadow = e.shadow_snapshot();
          std::memset(shadow->at("w2").data, 0x5a, shadow->at("w2").nbytes());
        });
      } catch (const weightsync::error&) {
        failed = true;
      }
      if (!failed) throw std::runtime_error("round 2 did not fail on this rank");
      const auto now = e.acquire();
      if (now->version() != "v1") throw std::runtime_error("flipped to " + now->version());
      expect_snapshot(*now, 1, local);
    });
  }
  ws_test::expect_all_ok(procs.wait_all(60s));
}

TEST_CASE(
    "shadow mode: sharded trainers (M=2) and 2 workers - a failed load on one worker fails both "
    "workers and neither flips",
    "[unit][shadow][engine][sharded]") {
  constexpr int m = 2, n = 2, world = m + n;
  struct Source {
    ws_test::ShardedModel model;
    std::vector<TensorMeta> metas() const { return model.metas; }
    std::vector<ShardSpec> shard_specs() const { return model.specs; }
    std::vector<SourceTensorRef> iterate() const { return model.items(); }
  };
  auto info = [](int port) {
    NcclInitInfo i = ws_test::loopback_init_info(port, world, m);
    i.packed = true;
    i.packed_buffer_size_bytes = 200;
    return i;
  };
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  for (int r = 0; r < m; ++r)
    procs.spawn([=] {
      TrainerEngine::Options o;
      o.engine = shadow_engine();
      o.engine.checksum = true;  // sharded transfers carry them too
      o.trainer_rank = r;
      o.trainer_world = m;
      TrainerEngine t(o);
      t.trainer_init(info(port));
      for (int round = 1; round <= 3; ++round) {
        Source src{ws_test::ShardedModel(m, r, 5, round)};
        bool failed = false;
        try {
          t.send_weights(src);
        } catch (const remote_error& e) {
          failed = e.peer() == m + 1;
        }
        if (failed != (round == 2))
          throw std::runtime_error("trainer round " + std::to_string(round) +
                                   ": unexpected outcome");
      }
    });
  for (int w = 0; w < n; ++w)
    procs.spawn([=] {
      auto o = worker_options(0, 1);
      o.engine.checksum = true;
      o.parallel.data_parallel_size = n;
      o.parallel.data_parallel_index = w;
      WeightTransferEngine e(o);
      // Every tensor but the last is registered (lands in the shadow); the last goes to load.
      const ws_test::ShardedModel initial(m, -1, 5, 0);
      auto live = initial.full;
      std::vector<ShadowParameter> table;
      for (std::size_t i = 0; i + 1 < initial.metas.size(); ++i)
        table.push_back({initial.metas[i], live[i].data(), nullptr});
      e.register_parameters(table);
      e.init_transfer_engine(info(port));
      auto expect_live = [&](int round) {
        const ws_test::ShardedModel want(m, -1, 5, round);
        const auto s = e.acquire();
        if (s->version() != "r" + std::to_string(round))
          throw std::runtime_error("live is " + s->version() + ", not r" + std::to_string(round));
        for (std::size_t i = 0; i + 1 < want.metas.size(); ++i)
          if (!want.full[i].empty() &&
              std::memcmp(s->at(want.metas[i].name).data, want.full[i].data(), want.full[i].size()))
            throw std::runtime_error(want.metas[i].name + " is not round " + std::to_string(round));
      };
      for (int round = 1; round <= 3; ++round) {
        const ws_test::ShardedModel want(m, -1, 5, round);
        TrainerEngine::Options to;
        to.trainer_world = m;
        auto u = TrainerEngine(to).update_info(want.metas, want.specs);
        u.packed.reset();
        u.packed_buffer_size_bytes.reset();
        u.packed_num_buffers.reset();
        e.start_weight_update();
        try {
          e.update_weights(u, [&](std::span<const TensorView> batch, void*) {
            if (round == 2 && w == 1) throw std::runtime_error("disk full");
            for (const auto& v : batch)
              if (v.name() != want.metas.back().name)
                throw std::runtime_error("unexpected view of " + v.name());
          });
          e.finish_weight_update("r" + std::to_string(round));
          if (round == 2)
            throw std::runtime_error("round 2 succeeded on worker " + std::to_string(w));
        } catch (const remote_error& x) {
          if (round != 2 || w != 0 || x.peer() != m + 1) throw;
        } catch (const std::runtime_error& x) {
          if (round != 2 || w != 1 || std::string(x.what()) != "disk full") throw;
        }
        expect_live(round == 2 ? 1 : round);
      }
    });
  ws_test::expect_all_ok(procs.wait_all(60s));
}

}  // namespace ws_test_shadow_test
