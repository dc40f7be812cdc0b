// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Deltas applied through a LoadPlan (delta/gather.hpp, UpdateReceiver's gather): q / k / v into
// rows of a fused qkv (in place: their destination), a TP shard of q with the rotary permutation,
// a column shard of o cast from bf16 to float32, gate / up into a TP shard of a fused gate_up.
// After each random delta round the engine's parameters equal the plan's gather of the new
// tensors, bit for bit; no dense copy of a tensor is made (the blob's elements go straight to
// their places); vLLM's sparse pairs, and the refusal of a blob with neither destination nor gather.
#include <weightsync/delta/codec.hpp>
#include <weightsync/delta/gather.hpp>
#include <weightsync/delta/receive.hpp>
#include <weightsync/loading/planner.hpp>
#include <weightsync/vllm.hpp>

#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_delta_load_plan_test {

using namespace weightsync;

namespace {

using Bytes = std::vector<std::byte>;

// bf16 bits of moderate finite values (so casts are exact either way round).
Bytes weights(std::size_t n, std::mt19937& rng) {
  Bytes b(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto v = static_cast<std::uint16_t>((rng() & 0x8000u) | (0x3c00u + rng() % 0x600u));
    std::memcpy(b.data() + 2 * i, &v, 2);
  }
  return b;
}
void step(Bytes& b, double density, std::mt19937& rng) {
  std::bernoulli_distribution pick(density);
  for (std::size_t i = 0; i < b.size() / 2; ++i)
    if (pick(rng)) b[2 * i] ^= std::byte(1u << (rng() % 8));
}

struct Param {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  Bytes data;
};

}  // namespace

TEST_CASE("deltas through a load plan: fused, TP-sharded, permuted and cast parameters end equal "
          "to the plan's gather of the new tensors",
          "[unit][delta][loading]") {
  // A layer: q (64, 48) 4 heads, k (32, 48) 2 heads, v (32, 48), o (48, 64), gate / up (96, 48).
  // This rank: TP rank 1 of 2.
  const std::vector<TensorMeta> metas = {{"q", DType::bfloat16, {64, 48}},
                                         {"k", DType::bfloat16, {32, 48}},
                                         {"v", DType::bfloat16, {32, 48}},
                                         {"o", DType::bfloat16, {48, 64}},
                                         {"gate", DType::bfloat16, {96, 48}},
                                         {"up", DType::bfloat16, {96, 48}},
                                         {"norm", DType::bfloat16, {48}}};
  std::vector<Param> params = {
      {"qkv_full", DType::bfloat16, {128, 48}, {}},  // unsharded fused qkv: in place
      {"q_tp", DType::bfloat16, {32, 48}, {}},       // TP shard of q, rotary-permuted
      {"o_tp", DType::float32, {48, 32}, {}},        // column shard of o, cast to float32
      {"gate_up_tp", DType::bfloat16, {96, 48}, {}},  // TP shards of gate and up, fused
      {"norm_w", DType::bfloat16, {48}, {}}};        // renamed: in place
  for (auto& p : params) p.data.assign(TensorMeta{p.name, p.dtype, p.shape}.nbytes(), std::byte{0});
  std::vector<ParamInfo> infos;
  for (auto& p : params) infos.push_back({p.name, p.data.data(), p.dtype, p.shape});
  // Two plans over the same parameters: q / k / v both into qkv_full (in place) and, for q, into
  // q_tp (a gather). A real engine has one; two let one test cover both ways.
  const LoadMap map = [](const TensorMeta& m) -> std::optional<Placement> {
    if (m.name == "q") return Placement{"q_tp", -1, 0, 0, 32, 32, 4};
    if (m.name == "k") return Placement{"qkv_full", -1, 64};
    if (m.name == "v") return Placement{"qkv_full", -1, 96};
    if (m.name == "o") return Placement{"o_tp", -1, 0, 1, 32, 32};
    if (m.name == "gate") return Placement{"gate_up_tp", -1, 0, 0, 48, 48};
    if (m.name == "up") return Placement{"gate_up_tp", -1, 48, 0, 48, 48};
    if (m.name == "norm") return Placement{"norm_w"};
    return std::nullopt;
  };
  const LoadMap map_full = [](const TensorMeta& m) -> std::optional<Placement> {
    if (m.name == "q") return Placement{"qkv_full", -1, 0};
    return std::nullopt;
  };
  const LoadPlan plan = plan_loading(metas, infos, map);
  PlanOptions ignore;
  ignore.ignore_unmapped = true;
  const LoadPlan plan_q = plan_loading(metas, infos, map_full, ignore);
  REQUIRE(plan.gather("q") != nullptr);  // permuted shard: a gather
  REQUIRE(plan.gather("o") != nullptr);  // cast: a gather
  REQUIRE(plan.gather("gate") != nullptr);
  REQUIRE(plan.destination(metas[1]) != nullptr);  // k: in place in qkv_full
  REQUIRE(plan.destination(metas[6]) != nullptr);  // norm: renamed, in place

  std::mt19937 rng(5);
  std::vector<Bytes> model;
  for (const auto& m : metas) model.push_back(weights(m.numel(), rng));
  // v0 everywhere: the plan's gathers of the first model
  auto load_all = [&](const std::vector<Bytes>& src, std::vector<Param>& into) {
    (void)into;
    std::vector<TensorView> views;
    for (std::size_t i = 0; i < metas.size(); ++i)
      views.push_back(TensorView{&metas[i], const_cast<std::byte*>(src[i].data()), src[i].size()});
    plan.load(std::span<const TensorView>(views), HostStream{});
    std::vector<TensorView> q{views[0]};
    plan_q.load(std::span<const TensorView>(q), HostStream{});
  };
  load_all(model, params);
  std::vector<Param> want = params;  // the gather of each round's model, into fresh memory
  for (int round = 1; round <= 5; ++round) {
    CAPTURE(round);
    const double density = round == 3 ? 0.3 : round == 4 ? 1.0 : 0.02;
    const auto before = model;
    for (auto& t : model) step(t, density, rng);
    // the trainer's blobs (bucket 256: the four kinds appear)
    NcclUpdateInfo info = NcclUpdateInfo::from_metas(metas);
    DeltaUpdate d;
    d.base_version = "v" + std::to_string(round - 1);
    d.bucket_elems = 256;
    std::vector<Bytes> blobs;
    for (std::size_t i = 0; i < metas.size(); ++i) {
      blobs.push_back(delta::encode_delta_host(model[i].data(), before[i].data(), metas[i].numel(),
                                               2, 256));
      d.payload_bytes.push_back(static_cast<std::int64_t>(blobs.back().size()));
    }
    info.delta = d;
    // the receiver: destinations and gathers from the plans (q in both)
    for (const LoadPlan* pl : {&plan, &plan_q}) {
      auto wire = weightsync::detail::update_wire(info, d.base_version);
      weightsync::detail::UpdateReceiver rx(
          wire, [](std::span<const TensorView>, void*) {},
          [&](const TensorMeta& m) { return pl->destination(m); }, false,
          [&](const TensorMeta& m) { return pl->gather(m.name); });
      if (pl == &plan_q) {  // only q: the others have no place in this plan
        CHECK(rx.cannot_apply().find("no destination for k") != std::string::npos);
        wire.metas.resize(2);  // the marker and q
        wire.what.resize(2);
        rx = weightsync::detail::UpdateReceiver(
            wire, [](std::span<const TensorView>, void*) {},
            [&](const TensorMeta& m) { return pl->destination(m); }, false,
            [&](const TensorMeta& m) { return pl->gather(m.name); });
      }
      REQUIRE(rx.cannot_apply().empty());
      std::vector<TensorView> views;
      for (std::size_t k = 0; k < rx.metas().size(); ++k) {
        const auto& x = wire.what[k];
        const void* data = x.kind == weightsync::detail::WireTensor::Kind::marker
                               ? static_cast<const void*>(blobs[0].data())
                               : static_cast<const void*>(blobs[x.tensor].data());
        views.push_back(TensorView{&rx.metas()[k], const_cast<void*>(data), rx.metas()[k].nbytes()});
      }
      rx.load()(std::span<const TensorView>(views), nullptr);
    }
    // what the plan's gather of the new model writes
    std::vector<ParamInfo> winfos;
    for (auto& p : want) winfos.push_back({p.name, p.data.data(), p.dtype, p.shape});
    const LoadPlan wplan = plan_loading(metas, winfos, map);
    const LoadPlan wplan_q = plan_loading(metas, winfos, map_full, ignore);
    std::vector<TensorView> views;
    for (std::size_t i = 0; i < metas.size(); ++i)
      views.push_back(TensorView{&metas[i], model[i].data(), model[i].size()});
    wplan.load(std::span<const TensorView>(views), HostStream{});
    std::vector<TensorView> q{views[0]};
    wplan_q.load(std::span<const TensorView>(q), HostStream{});
    for (std::size_t p = 0; p < params.size(); ++p) {
      CAPTURE(params[p].name);
      CHECK(params[p].data == want[p].data);
    }
  }
}

TEST_CASE("deltas through a load plan: the inverse rotary permutation and the element map",
          "[unit][delta][loading]") {
  for (std::int64_t hr : {2, 4, 64, 128})
    for (std::int64_t s = 0; s < 3 * hr; ++s) {
      CAPTURE(hr, s);
      REQUIRE(weightsync::detail::unpermuted_row(weightsync::detail::permuted_row(s, hr), hr) == s);
    }
  // a column shard: elements outside it have no target
  std::vector<std::byte> dst(4 * 3 * 2);
  GatherOp op;
  op.dst = dst.data();
  op.src_cols = 6;
  op.rows = 4;
  op.cols = 2;
  op.col0 = 3;
  CHECK(delta::gather_target(op, 0) == nullptr);
  CHECK(delta::gather_target(op, 3) == dst.data());
  CHECK(delta::gather_target(op, 6 + 4) == dst.data() + (2 + 1) * 2);
  CHECK(delta::gather_target(op, 4 + 6 * 3) == dst.data() + (3 * 2 + 1) * 2);
  CHECK(delta::gather_target(op, 5 + 6 * 3) == nullptr);  // past the shard's columns
  CHECK(delta::gather_target(op, 6 * 4) == nullptr);  // past the rows
}

}  // namespace ws_test_delta_load_plan_test
