// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The versioned JSON on the path a user runs: a trainer writes the init and update infos of one
// wire version as text, the workers' engines read that text with the same version's reader, and
// the bytes arrive (host backend, processes over loopback). M2N schema 2 likewise, its plan with
// one mesh per tensor.
#include <weightsync/engine.hpp>
#include <weightsync/vllm.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/host_world.hpp"
#include "support/process.hpp"
#include "support/shard_model.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_wire_engine_test {

using namespace weightsync;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

EngineOptions host_options() {
  EngineOptions o;
  o.backend = "host";
  o.timeout = 20s;
  return o;
}

WeightTransferEngine::Options worker_options(int worker, int workers) {
  WeightTransferEngine::Options o;
  o.engine = host_options();
  o.parallel.data_parallel_size = workers;
  o.parallel.data_parallel_index = worker;
  o.liveness_interval = 0ms;
  return o;
}

std::vector<std::byte> fill(const TensorMeta& t, int round) {
  std::vector<std::byte> b(t.nbytes());
  const std::size_t h = std::hash<std::string>{}(t.name) + static_cast<std::size_t>(round) * 7919;
  for (std::size_t k = 0; k < b.size(); ++k) b[k] = std::byte((k * 31 + h) & 0xFF);
  return b;
}

// Receives one update (already read into `update`) and checks every byte against `fill`.
template <class U>
void receive_and_check(WeightTransferEngine& e, const U& update,
                       const std::vector<TensorMeta>& metas, int round) {
  std::vector<std::vector<std::byte>> got;
  for (const auto& t : metas) got.emplace_back(t.nbytes(), std::byte{0xCD});
  e.start_weight_update();
  e.update_weights(update, [&](std::span<const TensorView> batch, void*) {
    for (const auto& v : batch) {
      std::size_t i = 0;
      while (metas[i].name != v.name()) ++i;
      if (v.nbytes) std::memcpy(got[i].data(), v.data, v.nbytes);
    }
  });
  e.finish_weight_update();
  for (std::size_t i = 0; i < metas.size(); ++i)
    if (got[i] != fill(metas[i], round))
      throw std::runtime_error("tensor '" + metas[i].name + "' differs");
}

// A trainer rank's pieces of each tensor (split by `specs`).
struct CutSource {
  std::vector<TensorMeta> m;
  std::vector<ShardSpec> s;
  std::vector<std::vector<std::byte>> local;
  std::vector<std::size_t> local_tensor;
  CutSource(std::vector<TensorMeta> metas, std::vector<ShardSpec> specs, int trainers, int rank,
            int round)
      : m(std::move(metas)), s(std::move(specs)) {
    for (std::size_t i = 0; i < m.size(); ++i)
      for (const auto& p : ws_test::test_pieces(m[i], s[i], trainers))
        if (p.rank == rank) {
          local.push_back(ws_test::cut(m[i], fill(m[i], round), s[i].dim, p.begin, p.end));
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

// A whole-tensor source (trainer rank 0 sends everything).
struct WholeSource {
  std::vector<TensorMeta> m;
  std::vector<std::vector<std::byte>> bytes;
  WholeSource(std::vector<TensorMeta> metas, int round) : m(std::move(metas)) {
    for (const auto& t : m) bytes.push_back(fill(t, round));
  }
  std::vector<TensorMeta> metas() const { return m; }
  std::vector<SourceTensorRef> iterate() const {
    std::vector<SourceTensorRef> v;
    for (std::size_t k = 0; k < m.size(); ++k) v.push_back({&m[k], bytes[k].data()});
    return v;
  }
};

void expect_all_ok(ws_test::Processes& procs) {
  const auto res = procs.wait_all(60s);
  for (std::size_t r = 0; r < res.size(); ++r) {
    INFO(r << ": " << ws_test::outcome_name(res[r].outcome) << ": " << res[r].message);
    CHECK(res[r].outcome == ws_test::Outcome::ok);
  }
}

const std::vector<TensorMeta> kMetas = {{"embed", DType::bfloat16, {40, 8}},
                                        {"q", DType::float32, {8, 12}},
                                        {"norm", DType::float32, {8}},
                                        {"scale", DType::float16, {}}};

}  // namespace

TEST_CASE("wire version: a packed sync through each vLLM version's JSON, read back as text",
          "[unit][engine][wire_version]") {
  for (const auto v : {WireVersion::vllm_before_0_28, WireVersion::vllm_0_28}) {
    INFO(wire_version_name(v));
    auto info = ws_test::loopback_init_info(ws_test::free_port(), 3);
    info.packed = true;
    info.packed_buffer_size_bytes = 256;  // several chunks
    info.packed_num_buffers = 3;
    // What travels: text of this version only (before 0.28: the packing on each update).
    const std::string init_text = write_init_info(info, v).dump();
    const std::string update_text =
        write_update_info(NcclUpdateInfo::from_metas(kMetas), v, &info).dump();
    CHECK((json::parse(init_text).contains("packed")) == (v == WireVersion::vllm_0_28));
    CHECK((json::parse(update_text).contains("packed")) == (v != WireVersion::vllm_0_28));
    ws_test::Processes procs;
    procs.spawn([=] {
      TrainerEngine::Options o;
      o.engine = host_options();
      TrainerEngine t(o);
      t.trainer_init(info);
      for (int round = 0; round < 2; ++round) {
        WholeSource src(kMetas, round);
        t.send_weights(src);
      }
    });
    for (int w = 0; w < 2; ++w)
      procs.spawn([=] {
        WeightTransferEngine e(worker_options(w, 2));
        e.init_transfer_engine(read_init_info(json::parse(init_text), v));
        for (int round = 0; round < 2; ++round)
          receive_and_check(e, read_update_info(json::parse(update_text), v), kMetas, round);
      });
    expect_all_ok(procs);
  }
}

TEST_CASE("wire version: M2N schema 2 - each tensor from its own mesh's ranks, names-only updates",
          "[unit][engine][m2n]") {
  constexpr int m = 4, n = 2;
  M2NInitInfoV2 info;
  info.master_address = "127.0.0.1";
  info.master_port = ws_test::free_port();
  info.rank_offset = m;
  info.world_size = m + n;
  info.dst_mesh_dims = {1, n};
  info.params = {
      {"embed", "bfloat16", {40, 8}, {2, 2}, std::vector<std::int64_t>{0, -1}},  // ranks 0, 2
      {"q", "float32", {8, 12}, {4, 1}, std::vector<std::int64_t>{1, -1}},       // ranks 0..3
      {"w", "float16", {6, 10}, {1, 4}, std::vector<std::int64_t>{-1, 1}},       // 10 is uneven
      {"norm", "float32", {8}, {2, 2}, std::nullopt}};
  const auto field_of = [](M2NInitInfoV2 i) -> std::string {
    try {
      i.seal().validate();
    } catch (const config_error& e) {
      return e.field();
    }
    return "(none)";
  };
  CHECK(field_of(info) == "params[2].src_placements");
  info.params[2].shape = {6, 12};
  const std::string init_text = json(info.seal()).dump();
  const std::vector<json> updates = {json::parse(R"({"names": ["embed", "q", "w", "norm"]})"),
                                     json::parse(R"({"names": ["norm", "q"]})")};
  ws_test::Processes procs;
  for (int r = 0; r < m; ++r)
    procs.spawn([=] {
      const auto plan = json::parse(init_text).get<M2NInitInfoV2>();
      TrainerEngine::Options o;
      o.engine = host_options();
      o.trainer_rank = r;
      o.trainer_world = m;
      TrainerEngine t(o);
      t.trainer_init(plan.rendezvous());
      for (int round = 0; round < 2; ++round) {
        const auto req = plan_update(
            *to_init_request(plan, InitContext{}).plan,
            updates[static_cast<std::size_t>(round)].at("names").get<std::vector<std::string>>());
        CutSource src(req.metas, req.shards, m, r, round);
        t.send_weights(src);
      }
    });
  for (int w = 0; w < n; ++w)
    procs.spawn([=] {
      WeightTransferEngine e(worker_options(w, n));
      e.init_transfer_engine(json::parse(init_text));  // vLLM's JSON, schema 2
      if (e.rank() != m + w) throw std::runtime_error("worker rank " + std::to_string(e.rank()));
      for (int round = 0; round < 2; ++round) {
        const auto& u = updates[static_cast<std::size_t>(round)];
        std::vector<TensorMeta> metas;
        for (const auto& name : u.at("names").get<std::vector<std::string>>())
          for (const auto& p : json::parse(init_text).get<M2NInitInfoV2>().params)
            if (p.name == name) metas.push_back({p.name, parse_dtype(p.dtype_name), p.shape});
        receive_and_check(e, u, metas, round);
      }
    });
  expect_all_ok(procs);
}

}  // namespace ws_test_wire_engine_test
