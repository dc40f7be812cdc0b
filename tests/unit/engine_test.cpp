// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// WeightTransferEngine / TrainerEngine over the host backend, across real processes.
#include <weightsync/engine.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/engine_options.hpp"
#include "support/host_world.hpp"
#include "support/outcomes.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_engine_test {

using namespace weightsync;
using namespace std::chrono_literals;

namespace {

// A tiny model whose contents depend on the round.
struct TestSource {
  std::vector<TensorMeta> m = {{"w1", DType::float32, {3, 5}},
                               {"b1", DType::float32, {5}},
                               {"scale", DType::bfloat16, {}},
                               {"empty", DType::int8, {0}},
                               {"w2", DType::float16, {64, 7}}};
  std::vector<std::vector<std::byte>> data;
  int round = 0;
  TensorMeta liar;  // round -1: item 1 claims the wrong dtype

  explicit TestSource(int r) : round(r) {
    for (std::size_t i = 0; i < m.size(); ++i) {
      data.emplace_back(m[i].nbytes());
      std::mt19937 rng(static_cast<unsigned>(r * 100 + static_cast<int>(i)));
      for (auto& b : data.back()) b = std::byte(rng());
    }
  }
  std::vector<TensorMeta> metas() const { return m; }
  std::vector<SourceTensorRef> iterate() {
    std::vector<SourceTensorRef> v;
    for (std::size_t i = 0; i < m.size(); ++i) v.push_back({&m[i], data[i].data()});
    if (round < 0) {
      liar = m[1];
      liar.dtype = DType::int32;
      v[1].meta_ = &liar;
    }
    return v;
  }
};
static_assert(WeightSource<TestSource>);

NcclInitInfo host_info(int port, int world, int offset = 1) {
  NcclInitInfo i = ws_test::loopback_init_info(port, world, offset);
  i.packed = true;
  i.packed_buffer_size_bytes = 64;
  return i;
}

EngineOptions host_options() {
  EngineOptions o;
  o.backend = "host";
  o.timeout = 15s;  // generous: these tests check behaviour, not speed, on a loaded CI machine
  return o;
}

// Receives one update into a map name -> bytes.
std::vector<std::vector<std::byte>> receive(WeightTransferEngine& e, const NcclUpdateInfo& u) {
  const auto metas = u.metas();
  std::vector<std::vector<std::byte>> got(metas.size());
  e.update_weights(u, [&](std::span<const TensorView> batch, void* stream) {
    if (stream != nullptr) throw std::runtime_error("the host backend has no stream");
    for (const auto& v : batch) {
      std::size_t i = 0;
      while (metas[i].name != v.name()) ++i;
      got[i].assign(static_cast<std::byte*>(v.data), static_cast<std::byte*>(v.data) + v.nbytes);
    }
  });
  return got;
}

void expect_round(const std::vector<std::vector<std::byte>>& got, int round) {
  TestSource want(round);
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want.data[i])
      throw std::runtime_error("tensor " + want.m[i].name + " differs in round " +
                               std::to_string(round));
}

template <class F>
void expect_state_error(F&& f, const std::string& text) {
  try {
    f();
  } catch (const state_error& e) {
    if (std::string(e.what()).find(text) == std::string::npos)
      throw std::runtime_error(std::string("wrong state_error: ") + e.what());
    return;
  }
  throw std::runtime_error("no state_error for: " + text);
}

// A trainer process that joins a world of `world` ranks and sends `rounds` rounds.
void spawn_trainer(ws_test::Processes& procs, int port, int world, std::vector<int> rounds) {
  procs.spawn([=] {
    TrainerEngine t(ws_test::options_for<TrainerEngine>(host_options()));
    t.trainer_init(host_info(port, world));
    for (int round : rounds) {
      TestSource src(round);
      t.send_weights(src);
    }
  });
}

// Receives one update of round `round` in a session and finishes it.
void receive_round(WeightTransferEngine& e, int round, std::optional<std::string> version = {}) {
  e.start_weight_update();
  expect_round(receive(e, NcclUpdateInfo::from_metas(TestSource(0).metas())), round);
  e.finish_weight_update(version);
}

void expect_all_ok(ws_test::Processes& procs) {
  ws_test::expect_all_ok(procs.wait_all(45s));
}

}  // namespace

TEST_CASE("worker rank follows vLLM's formula", "[unit][engine]") {
  ParallelConfig p;
  p.tensor_parallel_size = 2;
  p.pipeline_parallel_size = 2;
  p.data_parallel_size = 3;
  p.data_parallel_index = 2;
  p.local_rank = 3;
  CHECK(worker_rank(p, 1) == 2 * 4 + 3 + 1);
  CHECK(p.workers() == 12);
  p.data_parallel_index = 0;
  p.local_rank = 0;
  CHECK(worker_rank(p, 5) == 5);
  p.local_rank = 4;
  CHECK_THROWS_AS(worker_rank(p, 1), config_error);
  p.local_rank = 0;
  p.data_parallel_index = 3;
  CHECK_THROWS_AS(worker_rank(p, 1), config_error);
  p.data_parallel_index = 0;
  CHECK_THROWS_AS(worker_rank(p, -1), config_error);
}

TEST_CASE("AnyTensorRange asks its generator for a tensor only when it is looked at",
          "[unit][engine]") {
  const std::vector<TensorMeta> m = {{"a", DType::int8, {1}}, {"b", DType::int8, {2}}};
  const std::byte bytes[2] = {};
  int calls = 0;
  AnyTensorRange r([&, i = std::size_t{0}](SourceTensorRef& out) mutable {
    ++calls;
    if (i == m.size()) return false;
    out = {&m[i], bytes};
    ++i;
    return true;
  });
  auto it = r.begin();
  CHECK(calls == 0);
  CHECK((*it).meta().name == "a");
  CHECK(calls == 1);
  ++it;  // moves on; asks for nothing yet
  CHECK(calls == 1);
  CHECK_FALSE(it == r.end());
  CHECK(calls == 2);
  CHECK((*it).meta().name == "b");
  CHECK(calls == 2);
  ++it;
  ++it;  // consumes the end marker without a look: the generator is asked once more, then never
  CHECK(calls == 3);
  CHECK(it == r.end());
  ++it;
  CHECK(it == r.end());
  CHECK(calls == 3);
}

TEST_CASE("backend registry: unknown and duplicate names are errors listing the known ones",
          "[unit][engine]") {
  auto& reg = BackendRegistry::global();
  try {
    (void)reg.make("carrier-pigeon");
    FAIL("made an unknown backend");
  } catch (const config_error& e) {
    CHECK(std::string(e.what()).find("unknown backend 'carrier-pigeon'") != std::string::npos);
    CHECK(std::string(e.what()).find("host") != std::string::npos);
  }
  CHECK_THROWS_AS(reg.add("host", make_host_backend), config_error);
  reg.add("host-copy", make_host_backend);
  CHECK(reg.make("host-copy")->name() == "host");
  WeightTransferEngine::Options o;
  o.engine.backend = "no-such";
  WeightTransferEngine e(o);
  CHECK_THROWS_AS(e.init_transfer_engine(host_info(12345, 2)), config_error);
}

TEST_CASE("engine state machine before init", "[unit][engine]") {
  WeightTransferEngine e;
  CHECK(e.weight_version() == "default");
  CHECK_THROWS_AS(e.start_weight_update(), state_error);
  CHECK_THROWS_AS(e.update_weights(NcclUpdateInfo{}, [](std::span<const TensorView>, void*) {}),
                  state_error);
  CHECK_THROWS_AS(e.finish_weight_update("v1"), state_error);
  // A worker may not take the trainer's rank 0.
  CHECK_THROWS_AS(e.init_transfer_engine(host_info(12345, 2, 0)), config_error);
  // The rank from the parallel config must fit in the world.
  WeightTransferEngine::Options o;
  o.parallel.data_parallel_size = 3;
  o.parallel.data_parallel_index = 2;
  WeightTransferEngine f(o);
  CHECK_THROWS_AS(f.init_transfer_engine(host_info(12345, 3)), config_error);
}

TEST_CASE("engine rounds: init, start, update, finish with versions, and state errors",
          "[unit][engine]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  spawn_trainer(procs, port, 2, {1, 2});
  procs.spawn([=] {
    WeightTransferEngine e(ws_test::options_for<WeightTransferEngine>(host_options()));
    e.init_transfer_engine(nlohmann::json(host_info(port, 2)));
    if (e.world_size() != 2 || e.rank() != 1) throw std::runtime_error("wrong rank/world");
    const auto u = NcclUpdateInfo::from_metas(TestSource(0).metas());
    expect_state_error([&] { receive(e, u); }, "without start_weight_update");
    expect_state_error([&] { e.finish_weight_update("x"); }, "without start_weight_update");
    for (int round : {1, 2}) {
      e.start_weight_update();
      expect_state_error([&] { e.start_weight_update(); }, "already started");
      expect_round(receive(e, u), round);
      if (e.weight_version() != (round == 1 ? "default" : "v1"))
        throw std::runtime_error("the version changed before finish");
      e.finish_weight_update("v" + std::to_string(round));
      if (e.weight_version() != "v" + std::to_string(round))
        throw std::runtime_error("finish did not set the version");
    }
  });
  expect_all_ok(procs);
}

TEST_CASE(
    "engine: a worker's failed load reaches the trainer - in the same send with "
    "acknowledge each_transfer - or as the refusal of the next send by default",
    "[unit][engine]") {
  for (const auto mode : {Acknowledge::each_transfer, Acknowledge::next_transfer}) {
    ws_test::Processes procs;
    const int port = ws_test::free_port();
    EngineOptions o = host_options();
    o.acknowledge = mode;
    const bool each = mode == Acknowledge::each_transfer;
    procs.spawn([=] {
      TrainerEngine t(ws_test::options_for<TrainerEngine>(o));
      t.trainer_init(host_info(port, 2));
      TestSource r1(1), r2(2), r3(3);
      std::string reported;
      for (auto* src : {&r1, &r2}) {  // each: the first send fails; next: the second is refused
        try {
          t.send_weights(*src);
        } catch (const remote_error& e) {
          if (e.peer() != 1)
            throw std::runtime_error("the error names rank " + std::to_string(e.peer()));
          reported = e.what();
          break;
        }
      }
      if (reported.find("disk full") == std::string::npos)
        throw std::runtime_error("the trainer got: '" + reported + "'");
      if (each) t.send_weights(r2);  // next_transfer: r2 was the refused send
      t.send_weights(r3);
    });
    procs.spawn([=] {
      WeightTransferEngine e(ws_test::options_for<WeightTransferEngine>(o));
      e.init_transfer_engine(host_info(port, 2));
      const auto u = NcclUpdateInfo::from_metas(TestSource(0).metas());
      e.start_weight_update();
      bool failed = false;
      try {
        e.update_weights(
            u, [](std::span<const TensorView>, void*) { throw std::runtime_error("disk full"); });
      } catch (const std::runtime_error& x) {
        failed = std::string(x.what()) == "disk full";
      }
      if (!failed) throw std::runtime_error("the worker's own call did not report its failure");
      if (!each) {  // the trainer's next send is refused here too, before any byte moves
        e.start_weight_update();
        bool refused = false;
        try {
          receive(e, u);
        } catch (const remote_error&) {
          refused = true;
        }
        if (!refused) throw std::runtime_error("the next transfer was not refused");
      }
      e.start_weight_update();
      expect_round(receive(e, u), 2 + (each ? 0 : 1));
      e.finish_weight_update("ok");
      if (each) {
        e.start_weight_update();
        expect_round(receive(e, u), 3);
        e.finish_weight_update("ok3");
      }
    });
    expect_all_ok(procs);
  }
}

TEST_CASE("engine: a failing round ends the session and the next round works", "[unit][engine]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  procs.spawn([=] {
    TrainerEngine t(ws_test::options_for<TrainerEngine>(host_options()));
    t.trainer_init(host_info(port, 2));
    TestSource bad(-1);
    bool threw = false;
    try {
      t.send_weights(bad);
    } catch (const config_error& e) {
      threw =
          std::string(e.what()).find("dtype int32 where float32 was declared") != std::string::npos;
    }
    if (!threw) throw std::runtime_error("the trainer did not report its bad tensor");
    TestSource good(7);
    t.send_weights(good);
  });
  procs.spawn([=] {
    WeightTransferEngine e(ws_test::options_for<WeightTransferEngine>(host_options()));
    e.init_transfer_engine(host_info(port, 2));
    const auto u = NcclUpdateInfo::from_metas(TestSource(0).metas());
    e.start_weight_update();
    bool remote = false;
    try {
      receive(e, u);
    } catch (const remote_error&) {
      remote = true;
    }
    if (!remote) throw std::runtime_error("the worker did not see the trainer's failure");
    if (e.updating()) throw std::runtime_error("the failed update did not end the session");
    expect_state_error([&] { e.finish_weight_update("bad"); }, "without start_weight_update");
    if (e.weight_version() != "default")
      throw std::runtime_error("a failed update changed the version");
    e.start_weight_update();
    expect_round(receive(e, u), 7);
    e.finish_weight_update("v7");
    if (e.weight_version() != "v7") throw std::runtime_error("version");
  });
  expect_all_ok(procs);
}

TEST_CASE("engine: 1 trainer and 3 workers at DP=3", "[unit][engine]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  spawn_trainer(procs, port, 4, {3});
  for (int dp = 0; dp < 3; ++dp)
    procs.spawn([=] {
      auto o = ws_test::options_for<WeightTransferEngine>(host_options());
      o.parallel.data_parallel_size = 3;
      o.parallel.data_parallel_index = dp;
      WeightTransferEngine e(o);
      e.init_transfer_engine(host_info(port, 4));
      if (e.rank() != dp + 1) throw std::runtime_error("rank is not dp_index + rank_offset");
      receive_round(e, 3, "dp");
    });
  expect_all_ok(procs);
}

TEST_CASE("engine: two TP=2 servers with different rank offsets", "[unit][engine]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  spawn_trainer(procs, port, 5, {4});
  for (int server = 0; server < 2; ++server)
    for (int local = 0; local < 2; ++local)
      procs.spawn([=] {
        auto o = ws_test::options_for<WeightTransferEngine>(host_options());
        o.parallel.tensor_parallel_size = 2;
        o.parallel.local_rank = local;
        WeightTransferEngine e(o);
        e.init_transfer_engine(host_info(port, 5, 1 + 2 * server));
        if (e.rank() != 1 + 2 * server + local) throw std::runtime_error("wrong rank");
        receive_round(e, 4);
      });
  expect_all_ok(procs);
}

TEST_CASE("trainer engine: non-sender ranks iterate but do not send", "[unit][engine]") {
  struct Counting {
    TestSource s{1};
    int iterated = 0;
    std::vector<TensorMeta> metas() const { return s.metas(); }
    std::vector<SourceTensorRef> iterate() {
      auto v = s.iterate();
      iterated += static_cast<int>(v.size());
      return v;
    }
  };
  TrainerEngine::Options o;
  o.trainer_rank = 1;
  TrainerEngine t(o);
  t.trainer_init(host_info(1, 3));  // returns at once: no rendezvous on a non-sender
  Counting c;
  const auto st = t.send_weights(c);
  CHECK(c.iterated == 5);
  CHECK(st.bytes == 0);
  TrainerEngine sender;
  Counting d;
  CHECK_THROWS_AS(sender.send_weights(d), state_error);
}

}  // namespace ws_test_engine_test
