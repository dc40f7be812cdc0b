// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Sharded delta syncs (ShardedDeltaSource): M trainer ranks each diff the pieces they hold, share
// their parts, and send their changed pieces as blobs that the workers apply in place; rounds of
// random deltas over the host backend end bit-exact on every worker, a wrong base is refused on
// every rank, and the update info's piece_bytes is checked field by field.
#include <weightsync/delta/codec.hpp>
#include <weightsync/delta/receive.hpp>
#include <weightsync/delta/sharded_source.hpp>
#include <weightsync/engine.hpp>
#include <weightsync/loading.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/files.hpp"
#include "support/host_world.hpp"
#include "support/outcomes.hpp"
#include "support/process.hpp"
#include "support/shard_model.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_delta_sharded_test {

using namespace weightsync;
using namespace std::chrono_literals;

namespace {

// Every kind of split from the sharded tests (dim-0 and later-dim splits, uneven, replicated,
// empty and 0-dim tensors), plus two larger dim-0 splits where deltas pay.
struct FullModel {
  std::vector<TensorMeta> metas;
  std::vector<ShardSpec> specs;
  std::vector<std::vector<std::byte>> full;
  explicit FullModel(int m) {
    ws_test::sharded_layout(m, metas, specs);
    metas.push_back({"layers.0.mlp", DType::bfloat16, {96, 64}});
    specs.push_back({0, {}, {}});
    metas.push_back({"layers.0.attn", DType::float32, {40, 48}});
    specs.push_back({0, {}, {}});
    std::mt19937 rng(7);
    for (const auto& t : metas) {
      std::vector<std::byte> b(t.nbytes());
      for (auto& x : b) x = std::byte(rng());
      full.push_back(std::move(b));
    }
  }
  // Round r: a `density` share of the elements flipped by one bit, at random positions (NaNs and
  // -0.0 come out too), deterministic per round.
  void step(int round, double density) {
    std::mt19937 rng(static_cast<unsigned>(round) * 131u);
    std::bernoulli_distribution pick(density);
    for (std::size_t i = 0; i < metas.size(); ++i) {
      const std::size_t eb = dtype_size(metas[i].dtype);
      for (std::size_t e = 0; e < full[i].size() / eb; ++e)
        if (pick(rng)) full[i][e * eb + rng() % eb] ^= std::byte(1u << (rng() % 8));
    }
  }
};

// Trainer rank `rank`'s pieces of the full model, cut by the test's own arithmetic.
struct ShardSource {
  const FullModel* model;
  int m, rank;
  std::vector<std::vector<std::byte>> local;
  std::vector<std::size_t> tensor;
  void cut() {
    local.clear();
    tensor.clear();
    for (std::size_t i = 0; i < model->metas.size(); ++i)
      for (const auto& p : ws_test::test_pieces(model->metas[i], model->specs[i], m))
        if (p.rank == rank) {
          local.push_back(ws_test::cut(model->metas[i], model->full[i], model->specs[i].dim,
                                       p.begin, p.end));
          tensor.push_back(i);
        }
  }
  std::vector<TensorMeta> metas() const { return model->metas; }
  std::vector<ShardSpec> shard_specs() const { return model->specs; }
  std::vector<SourceTensorRef> iterate() const {
    std::vector<SourceTensorRef> v;
    for (std::size_t k = 0; k < local.size(); ++k) v.push_back({&model->metas[tensor[k]], local[k].data()});
    return v;
  }
};
static_assert(ShardedWeightSource<ShardedDeltaSource<ShardSource>>);

NcclInitInfo host_info(int port, int world, int trainers) {
  NcclInitInfo i = ws_test::loopback_init_info(port, world, trainers);
  i.packed = true;
  i.packed_buffer_size_bytes = 1024;
  return i;
}

EngineOptions host_engine() {
  EngineOptions o;
  o.backend = "host";
  o.timeout = 20s;
  o.acknowledge = Acknowledge::each_transfer;
  return o;
}

constexpr double kDensity[] = {0, 0.0, 0.01, 0.02, 0.05, 0.3, 0.002};  // round r uses [r]
constexpr int kRounds = 6;

}  // namespace

TEST_CASE("delta part: serialize and parse are inverse, and bad text is refused by name",
          "[unit][delta][sharded]") {
  DeltaPart p{2, "v8 with space", "v7:odd", false, {-1, 0, 17, 123456789012}};
  CHECK(DeltaPart::parse(p.serialize()) == p);
  DeltaPart w{0, "v1", "", true, {}};
  CHECK(DeltaPart::parse(w.serialize()) == w);
  const std::string good = p.serialize();
  for (const std::string& bad :
       {std::string(), std::string("hello"), good + " 5", good.substr(0, good.size() - 1) + "x",
        std::string("weightsync-delta-part 1 0 2 2:v1 0: 0"),
        std::string("weightsync-delta-part 1 0 0 99:v1 0: 0"),
        std::string("weightsync-delta-part 1 0 0 2:v1 0: 3 1 2"),
        std::string("weightsync-delta-part 1 0 0 2:v1 0: 1 -2")}) {
    INFO(bad);
    try {
      (void)DeltaPart::parse(bad);
      FAIL("parsed");
    } catch (const config_error& e) {
      CHECK(std::string(e.what()).find("delta part") != std::string::npos);
    }
  }
}

TEST_CASE("sharded delta update info: piece_bytes round-trips as JSON and is checked, naming the "
          "field",
          "[unit][delta][sharded]") {
  const std::vector<TensorMeta> metas = {{"a", DType::float32, {8, 4}},
                                         {"b", DType::bfloat16, {4, 6}}};
  UpdateRequest u;
  u.metas = metas;
  u.sharded = true;
  u.trainer_ranks = 2;
  u.shards = {ShardSpec{0, {}, {}}, ShardSpec{1, {}, {}}};
  DeltaUpdate d;
  d.base_version = "v1";
  d.bucket_elems = 32;
  d.payload_bytes = {100, -1};
  d.piece_bytes = {60, 40};
  u.delta = d;
  REQUIRE_NOTHROW(u.validate());
  const NcclUpdateInfo info = to_update_info(u);
  const nlohmann::json j = info;
  CHECK(j["delta"]["piece_bytes"] == nlohmann::json::array({60, 40}));
  CHECK(to_update_request(j.get<NcclUpdateInfo>(), UpdateContext{}) == u);

  const auto field_of = [&](UpdateRequest x) -> std::string {
    try {
      x.validate();
    } catch (const config_error& e) {
      return e.field();
    }
    try {  // the JSON side checks the same
      (void)nlohmann::json(to_update_info(x)).get<NcclUpdateInfo>();
    } catch (const config_error& e) {
      return "json:" + e.field();
    }
    return "";
  };
  auto x = u;
  x.delta->piece_bytes = {60};
  CHECK(field_of(x) == "delta.piece_bytes");
  x.delta->piece_bytes = {60, 41};
  CHECK(field_of(x) == "delta.payload_bytes[0]");
  x.delta->piece_bytes = {60, -3};
  CHECK(field_of(x) == "delta.piece_bytes[1]");
  x = u;  // b is split along dim 1: its pieces are not contiguous, it cannot go as blobs
  x.delta->payload_bytes = {100, 20};
  x.delta->piece_bytes = {60, 40, 10, 10};
  CHECK(field_of(x) == "delta.piece_bytes[2]");
  x = u;
  x.trainer_ranks.reset();
  CHECK(field_of(x) == "num_trainer_ranks");
  x = u;
  x.sharded = false;
  x.shards.clear();
  x.trainer_ranks.reset();
  x.delta->payload_bytes = {100, -1};
  CHECK(field_of(x) == "delta.piece_bytes");
}

TEST_CASE("sharded delta pieces through a load plan's gather: row and column shards and casts end "
          "equal to the plan's gather of the new tensors - a rotary-permuted piece is refused by name",
          "[unit][delta][sharded][loading]") {
  // Split along dim 0 over M = 2 trainer ranks: o (48, 64) lands as this TP rank's column shard,
  // cast to float32; gate (96, 48) as a row shard; norm (48) renamed in place (pieces of 24).
  const std::vector<TensorMeta> metas = {{"o", DType::bfloat16, {48, 64}},
                                         {"gate", DType::bfloat16, {96, 48}},
                                         {"norm", DType::bfloat16, {48}}};
  struct Param {
    std::string name;
    DType dtype;
    std::vector<std::int64_t> shape;
    std::vector<std::byte> data;
  };
  auto make_params = [] {
    std::vector<Param> ps = {{"o_tp", DType::float32, {48, 32}, {}},
                             {"gate_tp", DType::bfloat16, {48, 48}, {}},
                             {"norm_w", DType::bfloat16, {48}, {}}};
    for (auto& p : ps) p.data.assign(TensorMeta{p.name, p.dtype, p.shape}.nbytes(), std::byte{0});
    return ps;
  };
  const LoadMap map = [](const TensorMeta& m) -> std::optional<Placement> {
    if (m.name == "o") return Placement{"o_tp", -1, 0, 1, 32, 32};
    if (m.name == "gate") return Placement{"gate_tp", -1, 0, 0, 48, 48};
    if (m.name == "norm") return Placement{"norm_w"};
    return std::nullopt;
  };
  auto plan_of = [&](std::vector<Param>& ps) {
    std::vector<ParamInfo> infos;
    for (auto& p : ps) infos.push_back({p.name, p.data.data(), p.dtype, p.shape});
    return plan_loading(metas, infos, map);
  };
  auto gather_all = [&](const LoadPlan& pl, std::vector<std::vector<std::byte>>& model) {
    std::vector<TensorView> views;
    for (std::size_t i = 0; i < metas.size(); ++i)
      views.push_back(TensorView{&metas[i], model[i].data(), model[i].size()});
    pl.load(std::span<const TensorView>(views), HostStream{});
  };
  std::mt19937 rng(11);
  std::vector<std::vector<std::byte>> v0, v1;
  for (const auto& m : metas) {  // bf16 of moderate values (exact in float32)
    std::vector<std::byte> b(m.nbytes());
    for (std::size_t e = 0; e < m.numel(); ++e) {
      const auto x = static_cast<std::uint16_t>((rng() & 0x8000u) | (0x3c00u + rng() % 0x600u));
      std::memcpy(b.data() + 2 * e, &x, 2);
    }
    v0.push_back(b);
    for (std::size_t e = 0; e < m.numel(); ++e)
      if (rng() % 20 == 0) b[2 * e] ^= std::byte{0x01};
    v1.push_back(b);
  }
  auto params = make_params();
  const LoadPlan plan = plan_of(params);
  REQUIRE(plan.gather("o") != nullptr);
  REQUIRE(plan.gather("gate") != nullptr);
  gather_all(plan, v0);  // the worker holds v0
  // the trainer ranks' blobs, piece by piece
  UpdateRequest u;
  u.metas = metas;
  u.sharded = true;
  u.trainer_ranks = 2;
  u.shards.assign(metas.size(), ShardSpec{0, {}, {}});
  DeltaUpdate d;
  d.base_version = "v0";
  d.bucket_elems = 256;
  std::vector<std::vector<std::vector<std::byte>>> blobs(metas.size());
  const auto pieces = u.pieces(2);
  for (std::size_t i = 0; i < metas.size(); ++i) {
    std::int64_t sum = 0;
    for (const auto& p : pieces[i]) {
      const std::size_t e0 = p.offset / 2, n = p.bytes() / 2;
      blobs[i].push_back(delta::encode_delta_host(v1[i].data() + 2 * e0, v0[i].data() + 2 * e0, n,
                                                  2, 256));
      d.piece_bytes.push_back(static_cast<std::int64_t>(blobs[i].back().size()));
      sum += d.piece_bytes.back();
    }
    d.payload_bytes.push_back(sum);
  }
  u.delta = d;
  REQUIRE_NOTHROW(u.validate());
  const auto wire = weightsync::detail::update_wire(u, "v0");
  weightsync::detail::UpdateReceiver rx(
      wire, [](std::span<const TensorView>, void*) {},
      [&](const TensorMeta& m) { return plan.destination(m); }, false,
      [&](const TensorMeta& m) { return plan.gather(m.name); });
  REQUIRE(rx.cannot_apply().empty());
  std::vector<TensorView> views;
  for (std::size_t k = 0; k < wire.metas.size(); ++k) {
    const auto& x = wire.what[k];
    if (x.kind == weightsync::detail::WireTensor::Kind::marker) {
      views.push_back(TensorView{&rx.metas()[k], nullptr, 0});
      continue;
    }
    REQUIRE(x.kind == weightsync::detail::WireTensor::Kind::blob);
    std::size_t p = 0;
    while (pieces[x.tensor][p].offset / 2 != x.elem_offset) ++p;
    auto& b = blobs[x.tensor][p];
    views.push_back(TensorView{&rx.metas()[k], b.data(), b.size()});
  }
  rx.load()(std::span<const TensorView>(views), nullptr);
  auto want = make_params();
  gather_all(plan_of(want), v1);
  for (std::size_t p = 0; p < params.size(); ++p) {
    CAPTURE(params[p].name);
    CHECK(params[p].data == want[p].data);
  }
  // a rotary-permuted gather does not shift to a piece: refused, naming the tensor
  std::vector<Param> qp = {{"q_tp", DType::bfloat16, {32, 64}, {}}};
  qp[0].data.assign(32 * 64 * 2, std::byte{0});
  std::vector<ParamInfo> qinfo{{"q_tp", qp[0].data.data(), DType::bfloat16, {32, 64}}};
  const std::vector<TensorMeta> qmetas = {{"q", DType::bfloat16, {32, 64}}};
  const LoadPlan qplan = plan_loading(qmetas, qinfo, [](const TensorMeta&) -> std::optional<Placement> {
    return Placement{"q_tp", -1, 0, 0, 0, -1, 4};
  });
  REQUIRE(qplan.gather("q") != nullptr);
  UpdateRequest qu;
  qu.metas = qmetas;
  qu.sharded = true;
  qu.trainer_ranks = 2;
  qu.shards = {ShardSpec{0, {}, {}}};
  qu.delta = DeltaUpdate{"v0", 256, {200}, {100, 100}};
  REQUIRE_NOTHROW(qu.validate());
  weightsync::detail::UpdateReceiver qrx(
      weightsync::detail::update_wire(qu, "v0"), [](std::span<const TensorView>, void*) {},
      [](const TensorMeta&) -> void* { return nullptr; }, false,
      [&](const TensorMeta& m) { return qplan.gather(m.name); });
  const std::string why = qrx.cannot_apply();
  INFO(why);
  CHECK(why.find("a piece of q") != std::string::npos);
  CHECK(why.find("rotary") != std::string::npos);
}

TEST_CASE("sharded delta rounds over the host backend: M trainer ranks -> 2 workers end bit-exact, "
          "a wrong base is refused on every rank, then a whole round repairs it",
          "[unit][delta][sharded][engine]") {
  // (the low-byte reference: the random bit flips keep the low byte half the time, so blocks fail
  // their check and go whole; the rounds must still end bit-exact)
  for (const auto reference : {DeltaReference::full, DeltaReference::low_byte})
  for (const int m : {2, 3}) {
    const bool low = reference == DeltaReference::low_byte;
    INFO("M=" << m << (low ? ", low-byte reference" : ", full reference"));
    ws_test::Processes procs;
    const int port = ws_test::free_port();
    const int n = 2;
    const int world = m + n;
    const ws_test::TempDir tmp;
    const std::string dir = tmp.path();
    for (int rank = 0; rank < m; ++rank)
      procs.spawn([=] {
        TrainerEngine::Options o;
        o.engine = host_engine();
        o.trainer_rank = rank;
        o.trainer_world = m;
        TrainerEngine t(o);
        t.trainer_init(host_info(port, world, m));
        FullModel model(m);
        ShardSource src{&model, m, rank, {}, {}};
        DeltaOptions opt;
        opt.bucket_elems = 64;
        opt.reference = reference;
        ShardedDeltaSource<ShardSource> d(src, rank, m, opt);
        std::uint64_t blobs = 0;
        for (int r = 1; r <= kRounds; ++r) {
          model.step(r, kDensity[r]);
          src.cut();
          const std::string version = "v" + std::to_string(r);
          const std::string tag = dir + "/part_" + std::to_string(r) + "_";
          const DeltaPart mine = d.measure(version);
          ws_test::write_file(tag + std::to_string(rank), mine.serialize());
          std::vector<DeltaPart> parts;
          for (int q = m; q-- > 0;)  // (any order)
            parts.push_back(DeltaPart::parse(ws_test::wait_for_file(tag + std::to_string(q), 20s)));
          const auto info = d.prepare(parts, t.update_info(d.tensors(), d.tensor_specs()));
          if (rank == 0)
            ws_test::write_file(dir + "/info_" + std::to_string(r) + ".json",
                                nlohmann::json(info).dump());
          if ((r == 1 || r == 4) != d.stats().whole_round)
            throw std::runtime_error("round " + std::to_string(r) + (d.stats().whole_round
                                                                         ? " went whole"
                                                                         : " was not whole"));
          blobs += d.stats().blobs;
          if (!low && r == 2 && d.stats().wire_bytes * 2 > d.stats().tensor_bytes)
            throw std::runtime_error("1% density sent more than half of rank's bytes");
          if (r == 3) {  // worker 1 holds another version: refused on every rank
            try {
              t.send_weights(d);
              throw std::runtime_error("a delta onto a wrong base was sent");
            } catch (const protocol_error& e) {
              if (std::string(e.what()).find("base_version=v2-other") == std::string::npos)
                throw std::runtime_error(std::string("the refusal does not name it: ") + e.what());
            }
            continue;  // not committed: the next round goes whole
          }
          t.send_weights(d);
          d.commit();
        }
        if (blobs == 0) throw std::runtime_error("no piece of this rank went as a blob");
      });
    for (int w = 0; w < n; ++w)
      procs.spawn([=] {
        WeightTransferEngine::Options o;
        o.engine = host_engine();
        o.parallel.data_parallel_size = n;
        o.parallel.data_parallel_index = w;
        o.liveness_interval = 0ms;
        WeightTransferEngine e(o);
        e.init_transfer_engine(host_info(port, world, m));
        FullModel want(m);  // the trainer's full model after each round
        FullModel mine(m);  // this worker's parameters: round 0's ("default")
        for (int r = 1; r <= kRounds; ++r) {
          want.step(r, kDensity[r]);
          const auto text = ws_test::wait_for_file(dir + "/info_" + std::to_string(r) + ".json", 20s);
          const auto info = nlohmann::json::parse(text).get<NcclUpdateInfo>();
          if (!low && r == 2 && (!info.delta || info.delta->piece_bytes.empty()))
            throw std::runtime_error("round 2 sent no piece as a blob");
          e.start_weight_update();
          const auto before = mine.full;
          try {
            e.update_weights(
                info,
                [](std::span<const TensorView> views, void*) {
                  for (const auto& v : views)
                    if (v.nbytes > 0) throw std::runtime_error(v.name() + " without a destination");
                },
                [&](const TensorMeta& t) -> void* {
                  for (std::size_t i = 0; i < mine.metas.size(); ++i)
                    if (mine.metas[i] == t) return mine.full[i].data();
                  return nullptr;
                });
            if (r == 3) throw std::runtime_error("round 3 landed");
          } catch (const protocol_error& x) {
            if (r != 3) throw;
            if (mine.full != before) throw std::runtime_error("the refused delta wrote");
            continue;
          }
          e.finish_weight_update(r == 2 && w == 1 ? "v2-other" : "v" + std::to_string(r));
          for (std::size_t i = 0; i < want.metas.size(); ++i)
            if (mine.full[i] != want.full[i])
              throw std::runtime_error("round " + std::to_string(r) + ": " + want.metas[i].name +
                                       " differs from the trainer's");
        }
      });
    ws_test::expect_all_ok(procs.wait_all(120s));
  }
}

}  // namespace ws_test_delta_sharded_test
