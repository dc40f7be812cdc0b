// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Delta syncs between the engines over NCCL (two processes, on two GPUs or sharing one) and over
// the colocated ipc backend (two processes on GPU 0): a
// trainer's DeltaSource (CudaDeltaCodec) feeds a WeightTransferEngine that applies the blobs in
// place on the GPU. Rounds of random deltas end bit-exact; a delta onto a wrong base is refused
// on both ranks with nothing written, and the next round goes whole and repairs it.
//
// The update info travels over HTTP in a real setup; here the worker derives the same info from
// its own twin of the trainer's model (the step is deterministic), which is also what it checks
// its weights against.
#include <weightsync/cuda/delta_source.hpp>
#include <weightsync/cuda/stream.hpp>
#include <weightsync/delta/sharded_source.hpp>
#include <weightsync/delta/source.hpp>
#include <weightsync/engine.hpp>
#include <weightsync/ipc/backend.hpp>
#include <weightsync/layouts.hpp>
#include <weightsync/nccl/backend.hpp>

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/cuda_pattern.hpp"
#include "support/engine_options.hpp"
#include "support/files.hpp"
#include "support/gpu_model.hpp"
#include "support/gpu_peers.hpp"
#include "support/gpu_round.hpp"
#include "support/host_world.hpp"
#include "support/role.hpp"

using namespace weightsync;
using namespace std::chrono_literals;
using ws_test::device_count;
using ws_test::say;

namespace {

// Round r's training step (deterministic): a density[r] share of every tensor's elements.
constexpr double kDensity[] = {0, 0.001, 0.01, 0.1, 0.6, 0.01, 0.01, 0.02};
void step(const ws_test::DeviceModel& m, const std::vector<TensorMeta>& metas, int round,
          cudaStream_t s) {
  for (std::size_t i = 0; i < metas.size(); ++i)
    ws_pattern::perturb(m.data(i), metas[i].numel(), static_cast<unsigned>(dtype_size(metas[i].dtype)),
                        kDensity[round], static_cast<std::uint64_t>(round) * 1000 + i, s);
  detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

// The rounds, on `backend` ("nccl": a GPU per rank, or one shared; "ipc": both on GPU 0), the
// trainer keeping a `reference` of what the worker holds.
void delta_rounds(const std::string& backend, DeltaReference reference = DeltaReference::full) {
  const auto& r = ws_test::role();
  const int device = backend == "ipc" ? 0 : r.rank % device_count();
  detail::check(cudaSetDevice(device), "cudaSetDevice");
  NcclInitInfo info = ws_test::loopback_init_info(r.port, 2);
  info.packed = true;
  info.packed_buffer_size_bytes = 64 << 20;
  const EngineOptions eo = ws_test::gpu_engine_options(backend, device, 60s);
  const auto metas = layouts::small1b();
  CudaStream s(device);
  // Both ranks' trainer model (the worker's is its twin of it), v0 = the pattern of round 1.
  ws_test::DeviceModel model(metas, device);
  ws_test::fill_now(model, 1, s.get());
  ws_test::ModelSource src{metas, model};
  DeltaOptions o;
  o.reference = reference;
  DeltaSource<ws_test::ModelSource, CudaDeltaCodec> d(src, o, CudaDeltaCodec(s.get(), device));
  d.seed("default");  // what a server that loaded the same checkpoint holds
  if (r.rank == 0)
    say(std::string("reference: ") + (reference == DeltaReference::full ? "full" : "low-byte") +
        ", " + std::to_string(d.reference_bytes()) + " bytes for " +
        std::to_string(model.bytes()) + " of tensors");
  constexpr int kRounds = 7;
  const auto plain = [&] {
    auto u = NcclUpdateInfo::from_metas(metas);
    u.packed = true;
    u.packed_buffer_size_bytes = info.packed_buffer_size_bytes;
    return u;
  }();
  if (r.rank == 0) {
    TrainerEngine t(ws_test::options_for<TrainerEngine>(eo));
    t.trainer_init(info);
    for (int round = 1; round <= kRounds; ++round) {
      step(model, metas, round, s.get());
      const auto u = d.prepare("v" + std::to_string(round), plain);
      const auto& st = d.stats();
      say("round " + std::to_string(round) + ": " + (st.whole_round ? "whole" : "delta") +
          ", wire " + std::to_string(st.wire_bytes) + " of " + std::to_string(st.tensor_bytes) +
          " bytes, " + std::to_string(st.blobs) + " blobs, " + std::to_string(st.whole) +
          " whole");
      REQUIRE(st.whole_round == (round == 6));  // 6: after the refused round 5
      if (round == 5) {  // the worker named round 4 otherwise: refused before a byte moved
        try {
          t.send_weights(d);
          FAIL("a delta onto a wrong base was sent");
        } catch (const std::exception& e) {
          const std::string what = e.what();
          say("refused: " + what);
          // (the NCCL handshake names the first differing tensor, the markers: both versions;
          // ipc's plan check compares digests, and its consumer's refusal reaches the trainer)
          if (backend == "nccl") {
            CHECK(dynamic_cast<const protocol_error*>(&e) != nullptr);
            CHECK(what.find("base_version=v4-other") != std::string::npos);
            CHECK(what.find("base_version=v4") != std::string::npos);
          }
        }
        continue;  // not committed: the next round goes whole
      }
      t.send_weights(d);
      d.commit();
    }
    return;
  }
  // The worker: its own parameters (start as v0), and the twin it checks them against.
  ws_test::DeviceModel params(metas, device);
  ws_test::fill_now(params, 1, s.get());
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < metas.size(); ++i) index[metas[i].name] = i;
  WeightTransferEngine e(ws_test::options_for<WeightTransferEngine>(eo));
  e.init_transfer_engine(info);
  for (int round = 1; round <= kRounds; ++round) {
    step(model, metas, round, s.get());
    const auto u = d.prepare("v" + std::to_string(round), plain);
    REQUIRE(u.delta);
    e.start_weight_update();
    auto run = [&] {
      return e.update_weights(
          nlohmann::json(u),
          [](std::span<const TensorView> views, void*) {
            for (const auto& v : views)
              if (v.nbytes > 0) throw std::runtime_error(v.name() + " came as a view");
          },
          [&](const TensorMeta& m) -> void* { return params.data(index.at(m.name)); });
    };
    if (round == 5) {
      ws_test::DeviceModel before(metas, device);
      detail::check(cudaMemcpy(before.arena(), params.arena(), params.arena_bytes(),
                               cudaMemcpyDeviceToDevice),
                    "cudaMemcpy");
      REQUIRE_THROWS_AS(run(), protocol_error);
      REQUIRE(before.count_diff(params, s.get()) == 0);  // nothing applied
      continue;
    }
    run();
    d.commit();
    e.finish_weight_update(round == 4 ? "v4-other" : "v" + std::to_string(round));
    REQUIRE(params.count_diff(model, s.get()) == 0);
  }
  say("delta rounds over " + backend + " ok: " + std::to_string(model.bytes()) +
      " bytes verified per round");
}

// A trainer rank's pieces of its full model (every tensor split along dim 0, FSDP's Shard(0); a
// tensor of one row, or none, whole from rank 0): each piece a range of the full tensor.
struct Dim0Shards {
  const std::vector<TensorMeta>& declared;
  const ws_test::DeviceModel& model;
  int rank, trainers;
  std::vector<TensorMeta> metas() const { return declared; }
  std::vector<ShardSpec> shard_specs() const {
    std::vector<ShardSpec> v;
    for (const auto& t : declared)
      v.push_back(!t.shape.empty() && t.shape[0] > 1 ? ShardSpec{0, {}, {}} : ShardSpec{});
    return v;
  }
  std::vector<SourceTensorRef> iterate() const {
    const auto specs = shard_specs();
    std::vector<SourceTensorRef> v;
    for (std::size_t i = 0; i < declared.size(); ++i)
      for (const auto& p : shard_pieces(declared[i], i, specs[i], trainers))
        if (p.rank == rank)
          v.push_back({&declared[i], static_cast<const std::byte*>(model.data(i)) + p.offset});
    return v;
  }
};

// M = 2 trainer ranks (a sharded ShardedDeltaSource each, CudaDeltaCodec, keeping a `reference`)
// -> 2 workers over NCCL, four processes: the parts and the update info travel as files.
void sharded_delta_rounds(DeltaReference reference = DeltaReference::full) {
  const auto& r = ws_test::role();
  constexpr int kTrainers = 2, kWorkers = 2, kRounds = 7;
  const int device = r.rank % device_count();
  detail::check(cudaSetDevice(device), "cudaSetDevice");
  NcclInitInfo info = ws_test::loopback_init_info(r.port, kTrainers + kWorkers, kTrainers);
  info.packed = true;
  info.packed_buffer_size_bytes = 64 << 20;
  const EngineOptions eo = ws_test::gpu_engine_options("nccl", device, 60s);
  const std::string dir = "/tmp/ws_sharded_delta_" + std::to_string(r.port);
  (void)::mkdir(dir.c_str(), 0700);  // (every rank: whichever comes first makes it)
  // Rank 0 removes it when it leaves: by then every rank has read what it needed (each round's
  // files are read before its sync, which needs every rank, and rank 0's last sync ends last).
  const ws_test::RemoveAtExit cleanup(r.rank == 0 ? dir : "");
  const auto metas = layouts::small1b();
  CudaStream s(device);
  ws_test::DeviceModel model(metas, device);  // the trainer's full model (and the worker's twin)
  ws_test::fill_now(model, 1, s.get());
  if (r.rank < kTrainers) {
    TrainerEngine::Options o = ws_test::options_for<TrainerEngine>(eo);
    o.trainer_rank = r.rank;
    o.trainer_world = kTrainers;
    TrainerEngine t(o);
    t.trainer_init(info);
    Dim0Shards src{metas, model, r.rank, kTrainers};
    DeltaOptions dopt;
    dopt.reference = reference;
    ShardedDeltaSource<Dim0Shards, CudaDeltaCodec> d(src, r.rank, kTrainers, dopt,
                                                     CudaDeltaCodec(s.get(), device));
    d.seed("default");
    for (int round = 1; round <= kRounds; ++round) {
      step(model, metas, round, s.get());
      const std::string tag = dir + "/part_" + std::to_string(round) + "_";
      ws_test::write_file(tag + std::to_string(r.rank), d.measure("v" + std::to_string(round)).serialize());
      std::vector<DeltaPart> parts;
      for (int q = 0; q < kTrainers; ++q)
        parts.push_back(DeltaPart::parse(ws_test::wait_for_file(tag + std::to_string(q), 60s)));
      auto plain = t.update_info(d.tensors(), d.tensor_specs());
      plain.packed = true;
      plain.packed_buffer_size_bytes = info.packed_buffer_size_bytes;
      const auto u = d.prepare(parts, plain);
      if (r.rank == 0)
        ws_test::write_file(dir + "/info_" + std::to_string(round) + ".json", nlohmann::json(u).dump());
      const auto& st = d.stats();
      say("trainer " + std::to_string(r.rank) + " round " + std::to_string(round) + ": " +
          (st.whole_round ? "whole" : "delta") + ", wire " + std::to_string(st.wire_bytes) +
          " of " + std::to_string(st.tensor_bytes) + " bytes, " + std::to_string(st.blobs) +
          " piece blobs, " + std::to_string(st.whole) + " whole");
      REQUIRE(st.whole_round == (round == 6));  // 6: after the refused round 5
      if (round == 1) REQUIRE(st.blobs > 0);  // (0.1 %: blobs with either reference)
      if (round == 5) {  // worker 3 named round 4 otherwise: refused before a byte moved
        try {
          t.send_weights(d);
          FAIL("a delta onto a wrong base was sent");
        } catch (const protocol_error& e) {
          say(std::string("refused: ") + e.what());
          CHECK(std::string(e.what()).find("base_version=v4-other") != std::string::npos);
        }
        continue;
      }
      t.send_weights(d);
      d.commit();
    }
    return;
  }
  ws_test::DeviceModel params(metas, device);  // the worker's weights, v0 ("default")
  ws_test::fill_now(params, 1, s.get());
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < metas.size(); ++i) index[metas[i].name] = i;
  auto wo = ws_test::options_for<WeightTransferEngine>(eo);
  wo.parallel.data_parallel_size = kWorkers;
  wo.parallel.data_parallel_index = r.rank - kTrainers;
  WeightTransferEngine e(wo);
  e.init_transfer_engine(info);
  for (int round = 1; round <= kRounds; ++round) {
    step(model, metas, round, s.get());
    const auto text = ws_test::wait_for_file(dir + "/info_" + std::to_string(round) + ".json", 60s);
    const auto u = nlohmann::json::parse(text);
    if (round == 1) REQUIRE(u["delta"].contains("piece_bytes"));
    e.start_weight_update();
    auto run = [&] {
      return e.update_weights(
          u,
          [](std::span<const TensorView> views, void*) {
            for (const auto& v : views)
              if (v.nbytes > 0) throw std::runtime_error(v.name() + " came as a view");
          },
          [&](const TensorMeta& m) -> void* { return params.data(index.at(m.name)); });
    };
    if (round == 5) {
      ws_test::DeviceModel before(metas, device);
      detail::check(cudaMemcpy(before.arena(), params.arena(), params.arena_bytes(),
                               cudaMemcpyDeviceToDevice),
                    "cudaMemcpy");
      REQUIRE_THROWS_AS(run(), protocol_error);
      REQUIRE(before.count_diff(params, s.get()) == 0);  // nothing applied
      continue;
    }
    run();
    e.finish_weight_update(round == 4 && r.rank == 3 ? "v4-other" : "v" + std::to_string(round));
    REQUIRE(params.count_diff(model, s.get()) == 0);
  }
  say("sharded delta rounds ok on worker " + std::to_string(r.rank) + ": " +
      std::to_string(model.bytes()) + " bytes verified per round");
}

}  // namespace

TEST_CASE("nccl sharded delta rounds: M=2 trainer ranks -> 2 workers (four processes), pieces as "
          "blobs, bit-exact, a wrong base refused on every rank, then repaired",
          "[gpu][nccl][multi_gpu][engine][delta][sharded]") {
  if (ws_test::ran_as_parent(4, 300s, 4)) return;
  sharded_delta_rounds();
}

TEST_CASE("nccl sharded delta rounds with a low-byte reference: M=2 trainer ranks -> 2 workers, "
          "bit-exact, a wrong base refused on every rank, then repaired",
          "[gpu][nccl][multi_gpu][engine][delta][sharded]") {
  if (ws_test::ran_as_parent(4, 300s, 4)) return;
  sharded_delta_rounds(DeltaReference::low_byte);
}

TEST_CASE("nccl delta rounds: bit-exact on the GPU, a wrong base refused on both ranks, then "
          "repaired by a whole round",
          "[gpu][nccl][multi_gpu][engine][delta]") {
  if (ws_test::ran_as_parent(2, 240s)) return;
  delta_rounds("nccl");
}

TEST_CASE("ipc delta rounds with a low-byte reference on the GPU: bit-exact, a wrong base refused, "
          "then repaired by a whole round",
          "[gpu][ipc][engine][delta]") {
  if (ws_test::ran_as_parent_reporting(1, 240s)) return;
  delta_rounds("ipc", DeltaReference::low_byte);
}

TEST_CASE("ipc delta rounds (colocated, one GPU): bit-exact, a wrong base refused on both ranks, "
          "then repaired by a whole round",
          "[gpu][ipc][engine][delta]") {
  if (ws_test::ran_as_parent(1, 240s)) return;
  delta_rounds("ipc");
}
