// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// TrainerEngine with M trainer ranks (rank_offset = M) and WeightTransferEngine workers over the
// host backend, across real processes: sharded sources, vLLM's M2N JSON, a plain source with
// several trainer ranks, a trainer killed mid-sync.
#include <weightsync/engine.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/catch.hpp"
#include "support/host_world.hpp"
#include "support/process.hpp"
#include "support/shard_model.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_sharded_engine_test {

using namespace weightsync;
using namespace std::chrono_literals;
using ws_test::Outcome;
using ws_test::ShardedModel;

namespace {

struct ShardedSource {
  ShardedModel model;
  std::vector<TensorMeta> metas() const { return model.metas; }
  std::vector<ShardSpec> shard_specs() const { return model.specs; }
  std::vector<SourceTensorRef> iterate() const { return model.items(); }
};
static_assert(ShardedWeightSource<ShardedSource>);

NcclInitInfo host_info(int port, int world, int trainers) {
  NcclInitInfo i = ws_test::loopback_init_info(port, world, trainers);
  i.packed = true;
  i.packed_buffer_size_bytes = 200;
  return i;
}

EngineOptions host_options(std::chrono::milliseconds timeout = 20s) {
  EngineOptions o;
  o.backend = "host";
  o.timeout = timeout;
  return o;
}

WeightTransferEngine::Options worker_options(int worker, int workers,
                                             std::chrono::milliseconds timeout = 20s) {
  WeightTransferEngine::Options o;
  o.engine = host_options(timeout);
  o.parallel.data_parallel_size = workers;
  o.parallel.data_parallel_index = worker;
  o.liveness_interval = 0ms;
  return o;
}

// Receives one update described by `update_json` (destinations for even tensors) and checks it
// against `want`'s full tensors bit-exactly.
void receive_and_check(WeightTransferEngine& e, const nlohmann::json& update_json,
                       const std::vector<TensorMeta>& metas,
                       const std::vector<std::vector<std::byte>>& want) {
  std::vector<std::vector<std::byte>> got;
  for (const auto& t : metas) got.emplace_back(t.nbytes(), std::byte{0xCD});
  e.start_weight_update();
  e.update_weights(
      update_json,
      [&](std::span<const TensorView> batch, void*) {
        for (const auto& v : batch) {
          std::size_t i = 0;
          while (metas[i].name != v.name()) ++i;
          if (v.nbytes) std::memcpy(got[i].data(), v.data, v.nbytes);
        }
      },
      [&](const TensorMeta& t) -> void* {
        std::size_t i = 0;
        while (metas[i].name != t.name) ++i;
        return i % 2 == 0 && !got[i].empty() ? got[i].data() : nullptr;
      });
  e.finish_weight_update();
  for (std::size_t i = 0; i < metas.size(); ++i)
    if (got[i] != want[i])
      throw std::runtime_error("tensor '" + metas[i].name + "' differs from the full tensor");
}

// A trainer rank's pieces of `full` (split by `specs`), cut by the test's own arithmetic.
struct CutSource {
  std::vector<TensorMeta> m;
  std::vector<ShardSpec> s;
  std::vector<std::vector<std::byte>> local;
  std::vector<std::size_t> local_tensor;
  CutSource(std::vector<TensorMeta> metas, std::vector<ShardSpec> specs,
            const std::vector<std::vector<std::byte>>& full, int trainers, int rank)
      : m(std::move(metas)), s(std::move(specs)) {
    for (std::size_t i = 0; i < m.size(); ++i)
      for (const auto& p : ws_test::test_pieces(m[i], s[i], trainers))
        if (p.rank == rank) {
          local.push_back(ws_test::cut(m[i], full[i], s[i].dim, p.begin, p.end));
          local_tensor.push_back(i);
        }
  }
  std::vector<TensorMeta> metas() const { return m; }
  std::vector<ShardSpec> shard_specs() const { return s; }
  std::vector<SourceTensorRef> iterate() const {
    std::vector<SourceTensorRef> v;
    for (std::size_t k = 0; k < local.size(); ++k)
      v.push_back({&m[local_tensor[k]], local[k].data()});
    return v;
  }
};
static_assert(ShardedWeightSource<CutSource>);

// Deterministic bytes of tensor `name` in round `round`.
std::vector<std::byte> fill(const TensorMeta& t, int round) {
  std::vector<std::byte> b(t.nbytes());
  const std::size_t h = std::hash<std::string>{}(t.name) + static_cast<std::size_t>(round) * 7919;
  for (std::size_t k = 0; k < b.size(); ++k) b[k] = std::byte((k * 31 + h) & 0xFF);
  return b;
}

void expect_all_ok(ws_test::Processes& procs, std::chrono::seconds limit = 60s) {
  const auto res = procs.wait_all(limit);
  for (std::size_t r = 0; r < res.size(); ++r) {
    INFO(r << ": " << ws_test::outcome_name(res[r].outcome) << ": " << res[r].message);
    CHECK(res[r].outcome == Outcome::ok);
  }
}

}  // namespace

TEST_CASE("sharded engines: every trainer rank sends its shards - workers get the specs as JSON",
          "[unit][engine][sharded]") {
  for (const int m : {2, 3})
    for (const int n : {1, 2}) {
      ws_test::Processes procs;
      const int port = ws_test::free_port();
      const int world = m + n;
      for (int r = 0; r < m; ++r)
        procs.spawn([=] {
          TrainerEngine::Options o;
          o.engine = host_options();
          o.trainer_rank = r;
          o.trainer_world = m;
          TrainerEngine t(o);
          t.trainer_init(host_info(port, world, m));
          if (!t.is_sender()) throw std::runtime_error("every trainer rank sends");
          for (int round = 0; round < 3; ++round) {
            ShardedSource src{ShardedModel(m, r, 21, round)};
            t.send_weights(src);
          }
        });
      for (int w = 0; w < n; ++w)
        procs.spawn([=] {
          WeightTransferEngine e(worker_options(w, n));
          e.init_transfer_engine(nlohmann::json(host_info(port, world, m)));
          for (int round = 0; round < 3; ++round) {
            const ShardedModel want(m, -1, 21, round);
            TrainerEngine::Options to;
            to.engine = host_options();
            to.trainer_world = m;
            TrainerEngine maker(to);  // only for update_info: what a trainer sends its workers
            auto u = maker.update_info(want.metas, want.specs);
            u.packed.reset();  // `maker` has no init info: keep the packing of ours
            u.packed_buffer_size_bytes.reset();
            u.packed_num_buffers.reset();
            const nlohmann::json j = u;
            receive_and_check(e, j, want.metas, want.full);
          }
        });
      INFO("M=" << m << " N=" << n);
      expect_all_ok(procs);
    }
}

TEST_CASE("sharded engines: vLLM's M2N JSON (src_mesh_dims, src_placements)",
          "[unit][engine][sharded]") {
  // A [1, 2] trainer mesh: M = 2, sharding over axis 1 (ranks 0 and 1).
  const auto update = nlohmann::json::parse(R"({"names": ["embed", "q", "norm"],
      "dtype_names": ["bfloat16", "float32", "float32"], "shapes": [[8, 4], [4, 6], [5]],
      "src_mesh_dims": [1, 2], "src_placements": [[-1, 0], [-1, 1], null],
      "packed": true, "packed_buffer_size_bytes": 40})");
  const auto info = update.get<NcclUpdateInfo>();
  const auto metas = info.metas();
  const auto specs = info.shard_specs();
  constexpr int m = 2, n = 2, world = 4;
  std::vector<std::vector<std::byte>> full;
  for (std::size_t i = 0; i < metas.size(); ++i) {
    full.emplace_back(metas[i].nbytes());
    for (std::size_t b = 0; b < full[i].size(); ++b) full[i][b] = std::byte(b * 13 + i * 101);
  }
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  for (int r = 0; r < m; ++r)
    procs.spawn([=] {
      // The trainer's shards, cut by the test's own arithmetic.
      struct Source {
        std::vector<TensorMeta> m;
        std::vector<ShardSpec> s;
        std::vector<std::vector<std::byte>> local;
        std::vector<const TensorMeta*> local_meta;
        std::vector<TensorMeta> metas() const { return m; }
        std::vector<ShardSpec> shard_specs() const { return s; }
        std::vector<SourceTensorRef> iterate() const {
          std::vector<SourceTensorRef> v;
          for (std::size_t i = 0; i < local.size(); ++i)
            v.push_back({local_meta[i], local[i].data()});
          return v;
        }
      } src{metas, specs, {}, {}};
      for (std::size_t i = 0; i < metas.size(); ++i)
        for (const auto& p : ws_test::test_pieces(metas[i], specs[i], m))
          if (p.rank == r) {
            src.local.push_back(ws_test::cut(metas[i], full[i], specs[i].dim, p.begin, p.end));
            src.local_meta.push_back(&src.m[i]);
          }
      TrainerEngine::Options o;
      o.engine = host_options();
      o.trainer_rank = r;
      o.trainer_world = m;
      TrainerEngine t(o);
      t.trainer_init(host_info(port, world, m));
      t.send_weights(src, info);
    });
  for (int w = 0; w < n; ++w)
    procs.spawn([=] {
      WeightTransferEngine e(worker_options(w, n));
      e.init_transfer_engine(host_info(port, world, m));
      receive_and_check(e, update, metas, full);
    });
  expect_all_ok(procs);
}

TEST_CASE("sharded engines: vLLM's M2N init info JSON - then updates of names only",
          "[unit][engine][sharded]") {
  // What vLLM's nccl_m2n trainer sends the workers: a 2 x 2 trainer mesh (M = 4, rank i * 2 + j),
  // 2 workers, the whole plan at init.
  constexpr int m = 4, n = 2;  // world_size 6
  const int port = ws_test::free_port();
  auto init_json = nlohmann::json::parse(R"({"master_address": "127.0.0.1", "master_port": 1,
      "rank_offset": 4, "world_size": 6, "src_mesh_dims": [2, 2], "dst_mesh_dims": [1, 2],
      "names": ["embed", "q", "norm", "w", "e3"],
      "dtype_names": ["bfloat16", "float32", "float32", "float16", "int32"],
      "shapes": [[8, 4], [4, 6], [5], [6, 10], [2, 4, 6]],
      "src_placements": [[0, -1], [-1, 1], null, [1, -1], [-1, 2]],
      "nccl_unique_id_b64": null, "max_cta": null})");
  init_json["master_port"] = port;
  // Round 0: every tensor in declared order (vLLM's trainer); round 1: a subset, reordered.
  const std::vector<nlohmann::json> updates = {
      nlohmann::json::parse(R"({"names": ["embed", "q", "norm", "w", "e3"]})"),
      nlohmann::json::parse(R"({"names": ["w", "norm", "embed"]})")};
  ws_test::Processes procs;
  for (int r = 0; r < m; ++r)
    procs.spawn([=] {
      const auto init = init_json.get<M2NInitInfo>();
      TrainerEngine::Options o;
      o.engine = host_options();
      o.trainer_rank = r;
      o.trainer_world = m;
      TrainerEngine t(o);
      t.trainer_init(init.rendezvous());
      for (int round = 0; round < 2; ++round) {
        const auto u = init.update(updates[static_cast<std::size_t>(round)].get<M2NUpdateInfo>());
        const auto metas = u.metas();
        std::vector<std::vector<std::byte>> full;
        for (const auto& meta : metas) full.push_back(fill(meta, round));
        CutSource src(metas, u.shard_specs(), full, m, r);
        t.send_weights(src);
      }
    });
  for (int w = 0; w < n; ++w)
    procs.spawn([=] {
      WeightTransferEngine e(worker_options(w, n));
      e.init_transfer_engine(init_json);  // as vLLM's JSON, unchanged
      if (e.rank() != m + w) throw std::runtime_error("worker rank " + std::to_string(e.rank()));
      for (int round = 0; round < 2; ++round) {
        const auto& update = updates[static_cast<std::size_t>(round)];
        std::vector<TensorMeta> metas;
        std::vector<std::vector<std::byte>> full;
        const auto names = update.at("names").get<std::vector<std::string>>();
        const auto all = init_json.at("names").get<std::vector<std::string>>();
        for (const auto& name : names) {
          const auto i =
              static_cast<std::size_t>(std::find(all.begin(), all.end(), name) - all.begin());
          metas.push_back({name, parse_dtype(init_json["dtype_names"][i].get<std::string>()),
                           init_json["shapes"][i].get<std::vector<std::int64_t>>()});
          full.push_back(fill(metas.back(), round));
        }
        receive_and_check(e, update, metas, full);  // {"names": [...]}, as vLLM sends it
      }
    });
  expect_all_ok(procs);
}

TEST_CASE("sharded engines: a worker whose rank would be a trainer rank is refused at init",
          "[unit][engine][sharded]") {
  // M = 2 known at init (Options::trainer_ranks), rank_offset 1: this worker would be rank 1.
  auto o = worker_options(0, 1, 3s);
  o.trainer_ranks = 2;
  WeightTransferEngine e(o);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    e.init_transfer_engine(host_info(ws_test::free_port(), 3, 1));
    FAIL("a worker joined as trainer rank 1");
  } catch (const config_error& x) {
    CHECK(x.field() == "rank_offset");
    CHECK(std::string(x.what()).find("would be a trainer rank") != std::string::npos);
  }
  // Refused before any rendezvous (nobody listens on that port: joining would time out).
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  CHECK_FALSE(e.initialized());
  // An M2N init info says M itself (rank_offset = the trainer mesh); it must agree.
  const auto m2n = nlohmann::json::parse(R"({"master_address": "127.0.0.1", "master_port": 1,
      "rank_offset": 1, "world_size": 3, "src_mesh_dims": [1, 1], "dst_mesh_dims": [2, 1],
      "names": [], "dtype_names": [], "shapes": [], "src_placements": []})");
  try {
    e.init_transfer_engine(m2n);
    FAIL("an M2N init info with 1 trainer rank, on an engine told 2");
  } catch (const config_error& x) {
    CHECK(x.field() == "rank_offset");
  }
  o.trainer_ranks = -1;
  try {
    WeightTransferEngine bad(o);
    FAIL("trainer_ranks -1 accepted");
  } catch (const config_error& x) {
    CHECK(x.field() == "trainer_ranks");
  }
}

TEST_CASE("sharded engines: a plain source with M trainer ranks: rank 0 sends everything",
          "[unit][engine][sharded]") {
  constexpr int m = 2, n = 2, world = 4;
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  struct Plain {
    ShardedModel model;
    int iterated = 0;
    std::vector<TensorMeta> metas() const { return model.metas; }
    std::vector<SourceTensorRef> iterate() {
      ++iterated;
      std::vector<SourceTensorRef> v;
      for (std::size_t i = 0; i < model.metas.size(); ++i)
        v.push_back({&model.metas[i], model.full[i].empty() ? nullptr : model.full[i].data()});
      return v;
    }
  };
  for (int r = 0; r < m; ++r)
    procs.spawn([=] {
      TrainerEngine::Options o;
      o.engine = host_options();
      o.trainer_rank = r;
      o.trainer_world = m;
      TrainerEngine t(o);
      t.trainer_init(host_info(port, world, m));
      Plain src{ShardedModel(m, -1, 8, 0)};
      t.send_weights(src);
      if (src.iterated != 1) throw std::runtime_error("every trainer rank iterates once");
    });
  for (int w = 0; w < n; ++w)
    procs.spawn([=] {
      WeightTransferEngine e(worker_options(w, n));
      e.init_transfer_engine(host_info(port, world, m));
      const ShardedModel want(m, -1, 8, 0);
      TrainerEngine::Options to;
      to.trainer_world = m;
      auto u = TrainerEngine(to).update_info(want.metas);
      if (u.num_trainer_ranks != m || u.shards) throw std::runtime_error("wrong update info");
      u.packed.reset();  // no init info there: keep the packing of ours
      u.packed_buffer_size_bytes.reset();
      u.packed_num_buffers.reset();
      receive_and_check(e, nlohmann::json(u), want.metas, want.full);
    });
  expect_all_ok(procs);
}

TEST_CASE("sharded engines: a trainer rank killed mid-sync fails every rank within the deadline",
          "[unit][engine][sharded]") {
  constexpr int m = 3, n = 2, world = 5;
  const std::vector<TensorMeta> metas = {{"big", DType::float32, {3 << 20}},
                                         {"big2", DType::bfloat16, {1 << 20, 3}}};
  const std::vector<ShardSpec> specs = {{0, {}, {}}, {1, {}, {}}};
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  ws_test::SharedCounters rounds(world);  // rounds each rank has completed
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < m; ++r)
    procs.spawn([=, &rounds] {
      struct Source {
        const std::vector<TensorMeta>* m;
        const std::vector<ShardSpec>* s;
        std::vector<std::vector<std::byte>> local;
        std::vector<TensorMeta> metas() const { return *m; }
        std::vector<ShardSpec> shard_specs() const { return *s; }
        std::vector<SourceTensorRef> iterate() const {
          return {{&(*m)[0], local[0].data()}, {&(*m)[1], local[1].data()}};
        }
      } src{&metas, &specs, {}};
      for (const auto& t : metas) src.local.emplace_back(t.nbytes() / 3);
      TrainerEngine::Options o;
      o.engine = host_options(2000ms);
      o.trainer_rank = r;
      o.trainer_world = m;
      TrainerEngine t(o);
      auto info = host_info(port, world, m);
      info.packed_buffer_size_bytes = 1 << 20;
      t.trainer_init(info);
      for (int round = 0; round < 100000; ++round) {
        t.send_weights(src);
        rounds[static_cast<std::size_t>(r)]++;
      }
    });
  for (int w = 0; w < n; ++w)
    procs.spawn([=, &rounds] {
      WeightTransferEngine e(worker_options(w, n, 2000ms));
      auto info = host_info(port, world, m);
      info.packed_buffer_size_bytes = 1 << 20;
      e.init_transfer_engine(info);
      NcclUpdateInfo u = NcclUpdateInfo::from_metas(metas);
      u.shards.emplace(specs.begin(), specs.end());
      e.start_weight_update();
      for (int round = 0; round < 100000; ++round) {
        e.update_weights(u, [](std::span<const TensorView>, void*) {});
        rounds[static_cast<std::size_t>(m + w)]++;
      }
    });
  // The kill lands once every rank has completed a round (mid-sync, not in the rendezvous).
  (void)rounds.wait_all_at_least(1, 20s);
  const long rounds_before_kill = rounds.min();
  const double killed_at =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  procs.kill(1);
  const auto res = procs.wait_all(15s);
  CHECK(rounds_before_kill >= 1);
  for (int r : {0, 2, 3, 4}) {
    INFO(r << ": " << ws_test::outcome_name(res[r].outcome) << ": " << res[r].message);
    CHECK((res[r].outcome == Outcome::peer || res[r].outcome == Outcome::timeout ||
           res[r].outcome == Outcome::state));
    CHECK(res[r].seconds < killed_at + 2.0 + 2.0 + 1.0);
  }
}

TEST_CASE(
    "sharded engines: trainer_rank outside 0..M-1, or workers on trainer ranks, are config_errors",
    "[unit][engine][sharded]") {
  TrainerEngine::Options o;
  o.engine = host_options();
  o.trainer_rank = 2;
  o.trainer_world = 2;
  TrainerEngine t(o);
  try {
    t.trainer_init(host_info(12345, 4, 2));
    FAIL("joined as a trainer rank outside 0..M-1");
  } catch (const config_error& e) {
    CHECK(e.field() == "trainer_rank");
  }
  o.trainer_rank = 1;
  TrainerEngine u(o);
  try {
    u.trainer_init(host_info(12345, 4, 1));  // workers from rank 1 would be trainer ranks
    FAIL("accepted workers on trainer ranks");
  } catch (const config_error& e) {
    CHECK(e.field() == "rank_offset");
  }
}

TEST_CASE("sharded engines: a worker given an unsharded update fails with every trainer rank",
          "[unit][engine][sharded]") {
  constexpr int m = 2, world = 3;
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  for (int r = 0; r < m; ++r)
    procs.spawn([=] {
      TrainerEngine::Options o;
      o.engine = host_options();
      o.trainer_rank = r;
      o.trainer_world = m;
      TrainerEngine t(o);
      t.trainer_init(host_info(port, world, m));
      ShardedSource src{ShardedModel(m, r, 4, 0)};
      t.send_weights(src);
    });
  procs.spawn([=] {
    WeightTransferEngine e(worker_options(0, 1));
    e.init_transfer_engine(host_info(port, world, m));
    const ShardedModel want(m, -1, 4, 0);
    e.start_weight_update();
    // vLLM's plain JSON: "trainer rank 0 sends everything", which is not what the trainers do.
    e.update_weights(NcclUpdateInfo::from_metas(want.metas),
                     [](std::span<const TensorView>, void*) {
                       throw std::runtime_error("loaded after a mismatch");
                     });
  });
  const auto res = procs.wait_all(30s);
  for (std::size_t r = 0; r < res.size(); ++r) {
    INFO(r << ": " << ws_test::outcome_name(res[r].outcome) << ": " << res[r].message);
    CHECK(res[r].outcome == Outcome::protocol);
  }
}

}  // namespace ws_test_sharded_engine_test
