// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Model-aware loading from param_mappings files (the torchtitan bridge's form): renames, shards,
// permutes, fused q/k/v and w1/w3, replicated unsharded tensors.
#include <weightsync/loading.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/loading_model.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_loading_mappings_test {

using namespace weightsync;
using namespace std::chrono_literals;
using namespace ws_test::loading_model;

TEST_CASE("loading: a param_mappings file renames, shards and permutes", "[unit][loading]") {
  const auto j = nlohmann::json::parse(R"({
    "tp_degree": 2, "dp_shard_degree": 1,
    "param_mappings": {
      "layers.0.attention.wq.weight": {"vllm_name": "model.layers.0.self_attn.q.weight", "needs_permute": true,
                                       "tp_shard_dim": 0, "local_shape": [16, 8]},
      "layers.0.attention.wo.weight": {"sglang_name": "model.layers.0.self_attn.o_proj.weight", "needs_permute": false,
                                       "tp_shard_dim": 1, "local_shape": [8, 16]},
      "norm.weight": {"vllm_name": "model.norm.weight", "needs_permute": false, "tp_shard_dim": 0, "local_shape": [8]}
    }})");
  const auto pm = parse_param_mappings(j);
  REQUIRE(pm.mappings.size() == 3);
  const auto map = param_mappings_map(pm, {1, 2}, /*head_dim=*/4);
  const auto q = map({"layers.0.attention.wq.weight", DType::bfloat16, {32, 8}});
  REQUIRE(q);
  CHECK(*q == Placement{"model.layers.0.self_attn.q.weight", -1, 0, 0, 16, 16, 8});
  CHECK(*map({"layers.0.attention.wo.weight", DType::bfloat16, {8, 32}}) ==
        Placement{"model.layers.0.self_attn.o_proj.weight", -1, 0, 1, 16, 16, 0});
  // local_shape is the full shape: replicated, although the bridge writes tp_shard_dim 0.
  CHECK(*map({"norm.weight", DType::bfloat16, {8}}) == Placement{"model.norm.weight"});
  // A trainer without TP cannot say what is sharded: everything lands whole.
  auto pm1 = pm;
  pm1.tp_degree = 1;
  CHECK(*param_mappings_map(pm1, {1, 2},
                            4)({"layers.0.attention.wo.weight", DType::bfloat16, {8, 16}}) ==
        Placement{"model.layers.0.self_attn.o_proj.weight"});
  CHECK_FALSE(map({"unknown", DType::bfloat16, {8}}));
  try {
    (void)map({"layers.0.attention.wq.weight", DType::bfloat16, {30, 8}});
    FAIL("a shape that fits no local_shape was accepted");
  } catch (const config_error& e) {
    CHECK(has(e.what(), {"local_shape"}));
  }
  CHECK_THROWS_AS(parse_param_mappings(
                      nlohmann::json::parse(R"({"param_mappings": {"a": {"local_shape": [1]}}})")),
                  config_error);
  CHECK_THROWS_AS(
      parse_param_mappings(nlohmann::json::parse(R"({"param_mappings": {}, "extra": 1})")),
      config_error);
  CHECK_THROWS_AS(param_mappings_map(pm, {0, 1}), config_error);  // needs_permute without head_dim

  // End to end at TP 2 rank 1: the permuted q rows [16, 32), through the planner.
  std::vector<std::uint16_t> wq(32 * 8), out(16 * 8, 0);
  for (std::size_t i = 0; i < wq.size(); ++i) wq[i] = static_cast<std::uint16_t>(i);
  const std::vector<TensorMeta> metas{{"layers.0.attention.wq.weight", DType::bfloat16, {32, 8}}};
  const std::vector<ParamInfo> params{
      {"model.layers.0.self_attn.q.weight", out.data(), DType::bfloat16, {16, 8}}};
  const auto plan = plan_loading(metas, params, map);
  const TensorView v{&metas[0], wq.data(), wq.size() * 2};
  plan.load(std::span<const TensorView>(&v, 1), HostStream{});
  const auto full = permute_ref(wq, 8, 32, 8);
  CHECK(std::vector<std::uint16_t>(full.begin() + 16 * 8, full.end()) == out);
}

TEST_CASE("loading: a param_mappings file fuses q/k/v and w1/w3, replicates unsharded tensors",
          "[unit][loading]") {
  // The bridge's form for one torchtitan layer, trainer at tp_degree 2 and dp_shard_degree 2
  // (local_shape: dim 0 / dp, tp_shard_dim / tp when TP-sharded; tp_shard_dim 0 when not).
  // 4 q heads and 2 kv heads of head_dim 4, hidden 8, intermediate 12.
  const auto j = nlohmann::json::parse(R"({
    "tp_degree": 2, "dp_shard_degree": 2,
    "param_mappings": {
      "layers.0.attention.wq.weight": {"sglang_name": "model.layers.0.self_attn.qkv_proj.weight",
                                       "needs_permute": true, "tp_shard_dim": 0, "local_shape": [4, 8]},
      "layers.0.attention.wk.weight": {"sglang_name": "model.layers.0.self_attn.qkv_proj.weight",
                                       "needs_permute": true, "tp_shard_dim": 0, "local_shape": [2, 8]},
      "layers.0.attention.wv.weight": {"sglang_name": "model.layers.0.self_attn.qkv_proj.weight",
                                       "needs_permute": false, "tp_shard_dim": 0, "local_shape": [2, 8]},
      "layers.0.attention.q_norm.weight": {"sglang_name": "model.layers.0.self_attn.q_norm.weight",
                                           "needs_permute": true, "tp_shard_dim": 0, "local_shape": [2]},
      "layers.0.attention_norm.weight": {"sglang_name": "model.layers.0.input_layernorm.weight",
                                         "needs_permute": false, "tp_shard_dim": 0, "local_shape": [4]},
      "layers.0.feed_forward.w1.weight": {"sglang_name": "model.layers.0.mlp.gate_up_proj.weight",
                                          "needs_permute": false, "tp_shard_dim": 0, "local_shape": [3, 8]},
      "layers.0.feed_forward.w3.weight": {"sglang_name": "model.layers.0.mlp.gate_up_proj.weight",
                                          "needs_permute": false, "tp_shard_dim": 0, "local_shape": [3, 8]},
      "layers.0.feed_forward.w2.weight": {"sglang_name": "model.layers.0.mlp.down_proj.weight",
                                          "needs_permute": false, "tp_shard_dim": 1, "local_shape": [4, 6]},
      "extra.b": {"vllm_name": "fused_ab", "tp_shard_dim": 0, "local_shape": [1, 8]},
      "extra.a": {"vllm_name": "fused_ab", "tp_shard_dim": 0, "local_shape": [2, 8]},
      "norm.weight": {"vllm_name": "model.norm.weight", "tp_shard_dim": 0, "local_shape": [4]}
    }})");
  const auto pm = parse_param_mappings(j);
  // The trainer's full tensors.
  HfModel hf;
  hf.add("layers.0.attention.wq.weight", {16, 8});
  hf.add("layers.0.attention.wk.weight", {8, 8});
  hf.add("layers.0.attention.wv.weight", {8, 8});
  hf.add("layers.0.attention.q_norm.weight", {4});
  hf.add("layers.0.attention_norm.weight", {8});
  hf.add("layers.0.feed_forward.w1.weight", {12, 8});
  hf.add("layers.0.feed_forward.w3.weight", {12, 8});
  hf.add("layers.0.feed_forward.w2.weight", {8, 12});
  hf.add("extra.a", {4, 8});
  hf.add("extra.b", {2, 8});
  hf.add("norm.weight", {8});
  for (const int tp : {1, 2, 4}) {
    for (int r = 0; r < tp; ++r) {
      INFO("engine tp " << tp << " rank " << r);
      const std::int64_t q = 16 / tp, kv = 8 / tp, il = 12 / tp;
      Engine eng;
      eng.mem.reserve(16);
      eng.add("model.layers.0.self_attn.qkv_proj.weight", DType::bfloat16, {q + 2 * kv, 8});
      eng.add("model.layers.0.self_attn.q_norm.weight", DType::bfloat16, {4});
      eng.add("model.layers.0.input_layernorm.weight", DType::bfloat16, {8});
      eng.add("model.layers.0.mlp.gate_up_proj.weight", DType::bfloat16, {2 * il, 8});
      eng.add("model.layers.0.mlp.down_proj.weight", DType::bfloat16, {8, il});
      eng.add("fused_ab", DType::bfloat16, {6, 8});
      eng.add("model.norm.weight", DType::bfloat16, {8});
      const auto plan = plan_loading(hf.metas, eng.params, param_mappings_map(pm, {r, tp}, 4),
                                     {.require_full_coverage = true});
      apply_in_process(hf, plan);
      // The reference, as plain loops: fused rows in vLLM's order, this rank's share of each.
      std::map<std::string, Bytes> want;
      for (std::size_t i = 0; i < eng.params.size(); ++i)
        want[eng.params[i].name] = Bytes(eng.mem[i].size());
      Bytes& qkv = want["model.layers.0.self_attn.qkv_proj.weight"];
      copy_rows(qkv, 0, permute_ref(hf.at("layers.0.attention.wq.weight"), 4, 16, 8), r * q, q, 8);
      copy_rows(qkv, q, permute_ref(hf.at("layers.0.attention.wk.weight"), 2, 8, 8), r * kv, kv, 8);
      copy_rows(qkv, q + kv, hf.at("layers.0.attention.wv.weight"), r * kv, kv, 8);
      copy_rows(want["model.layers.0.self_attn.q_norm.weight"], 0,
                permute_ref(hf.at("layers.0.attention.q_norm.weight"), 1, 4, 1), 0, 4, 1);
      copy_rows(want["model.layers.0.input_layernorm.weight"], 0,
                hf.at("layers.0.attention_norm.weight"), 0, 8, 1);
      Bytes& gu = want["model.layers.0.mlp.gate_up_proj.weight"];
      copy_rows(gu, 0, hf.at("layers.0.feed_forward.w1.weight"), r * il, il, 8);
      copy_rows(gu, il, hf.at("layers.0.feed_forward.w3.weight"), r * il, il, 8);
      copy_cols(want["model.layers.0.mlp.down_proj.weight"], 0,
                hf.at("layers.0.feed_forward.w2.weight"), 8, 12, r * il, il);
      copy_rows(want["fused_ab"], 0, hf.at("extra.a"), 0, 4, 8);  // key order: a, then b
      copy_rows(want["fused_ab"], 4, hf.at("extra.b"), 0, 2, 8);
      copy_rows(want["model.norm.weight"], 0, hf.at("norm.weight"), 0, 8, 1);
      for (std::size_t i = 0; i < eng.params.size(); ++i) {
        INFO("parameter " << eng.params[i].name);
        CHECK(eng.mem[i] == want.at(eng.params[i].name));
      }
    }
  }
  // Pieces whose rows do not split over the engine's TP name the piece.
  try {
    (void)plan_loading(hf.metas, std::vector<ParamInfo>{}, param_mappings_map(pm, {0, 3}, 4));
    FAIL("16 q rows were split over TP 3");
  } catch (const config_error& e) {
    CHECK(has(e.what(), {"tensor 'layers.0.attention.w"}));
  }
}

}  // namespace ws_test_loading_mappings_test
