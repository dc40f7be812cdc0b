// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Model-aware loading of whole models: the rotary permute, GQA replication, tied embeddings, and
// Qwen3-8B / Qwen3-30B-A3B shaped updates at TP = 1, 2, 4 through the host pipeline in real
// processes, compared with a reference written as plain loops.
#include <weightsync/host/communicator.hpp>
#include <weightsync/loading.hpp>
#include <weightsync/packed_broadcast.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/loading_model.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_loading_models_test {

using namespace weightsync;
using namespace std::chrono_literals;
using namespace ws_test::loading_model;

namespace {

Dims dense8b() {
  Dims d;
  d.cfg = qwen3_8b_config();
  d.cfg.intermediate = 1024;  // reduced from 12288 (the attention shapes are Qwen3-8B's)
  d.layers = 2;
  return d;
}

Dims moe30b() {
  Dims d;
  d.cfg = qwen3_30b_a3b_config();
  d.cfg.n_experts = 8;  // reduced from 128 (per-expert and attention shapes are Qwen3-30B-A3B's)
  d.moe = true;
  return d;
}

// The real-process round: rank 0 sends the HF model, ranks 1..tp load it into their shards.
void run_processes(const Dims& d, int tp, bool packed) {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  const int world = 1 + tp;
  for (int rank = 0; rank < world; ++rank)
    procs.spawn([=] {
      RendezvousOptions o;
      o.port = port;
      o.rank = rank;
      o.world_size = world;
      o.timeout = 20000ms;
      auto comm = HostCommunicator::connect(o, 30000ms);
      const HfModel hf = make_hf(d);
      TransferOptions opt;
      opt.packed = packed;
      opt.buffer_size_bytes = 8 << 20;
      if (rank == 0) {
        (void)packed_broadcast_producer(hf.metas, hf.items(), comm, 0, opt);
        return;
      }
      const int r = rank - 1;
      Engine eng = make_engine(d, r, tp);
      const auto plan = plan_loading(
          hf.metas, eng.params, d.moe ? qwen3_moe_map(d.cfg, {r, tp}) : qwen3_map(d.cfg, {r, tp}));
      // At TP = 1 every bf16 tensor lands in place (q, k, v at their rows of qkv; gate, up of
      // gate_up; experts in w13/w2); only the fp32 norms are gathered (cast).
      const std::size_t norms = static_cast<std::size_t>(4 * d.layers + 1);
      if (tp == 1 &&
          (plan.in_place_count() != hf.metas.size() - norms || plan.gather_count() != norms))
        throw std::runtime_error("TP=1 plan: " + std::to_string(plan.in_place_count()) +
                                 " in place, " + std::to_string(plan.gather_count()) + " gathered");
      opt.destination = plan.destination_fn();
      (void)packed_broadcast_consumer(hf.metas, comm, 0, plan.loader(), opt);
      check_against_reference(d, hf, eng, r, tp);
    });
  for (const auto& res : procs.wait_all(240s)) {
    INFO(ws_test::outcome_name(res.outcome) << ": " << res.message);
    CHECK(res.outcome == ws_test::Outcome::ok);
  }
}

}  // namespace

TEST_CASE("loading: rotary permute (weight and 1-D bias), GQA replication, qkv bias, at TP 4",
          "[unit][loading]") {
  Dims d;
  d.cfg = {.hidden = 64, .n_heads = 8, .n_kv_heads = 2, .head_dim = 16, .intermediate = 96};
  d.cfg.permute_qk = GENERATE(false, true);
  d.qkv_bias = true;
  d.layers = 2;
  d.vocab = 70;  // padded to 128: rank 1's 32 rows are 6 real ones and 26 of padding
  const HfModel hf = make_hf(d);
  for (int tp : {1, 2, 4, 8}) {
    for (int r = 0; r < tp; ++r) {
      INFO("tp " << tp << " rank " << r << " permute " << d.cfg.permute_qk);
      Engine eng = make_engine(d, r, tp);
      const auto plan = plan_loading(hf.metas, eng.params, qwen2_map(d.cfg, {r, tp}));
      apply_in_process(hf, plan);
      CHECK_NOTHROW(check_against_reference(d, hf, eng, r, tp));
      // Without a destination callback, what could land in place arrives as views and is copied.
      Engine eng2 = make_engine(d, r, tp);
      const auto plan2 = plan_loading(hf.metas, eng2.params, qwen2_map(d.cfg, {r, tp}));
      apply_in_process(hf, plan2, false);
      CHECK_NOTHROW(check_against_reference(d, hf, eng2, r, tp));
      if (tp == 1 && !d.cfg.permute_qk)
        CHECK(plan.uncovered() == std::vector<std::string>{"model.embed_tokens.weight[4480, 8192)",
                                                           "lm_head.weight[4480, 8192)"});
    }
  }
  CHECK_THROWS_AS(qwen2_map(d.cfg, {0, 3}), config_error);
}

TEST_CASE("loading: with tie_word_embeddings the model maps skip lm_head", "[unit][loading]") {
  Dims d;
  d.cfg = {.hidden = 64, .n_heads = 8, .n_kv_heads = 2, .head_dim = 16, .intermediate = 96};
  d.vocab = 70;
  d.tied = true;
  const HfModel hf = make_hf(d);  // the trainer still sends lm_head.weight
  for (const int tp : {1, 2}) {
    INFO("tp " << tp);
    Engine eng = make_engine(d, tp - 1, tp);
    // Without the option lm_head maps to a parameter the engine does not have.
    try {
      (void)plan_loading(hf.metas, eng.params, qwen3_map(d.cfg, {tp - 1, tp}));
      FAIL("lm_head was planned into an engine without one");
    } catch (const config_error& e) {
      CHECK(has(e.what(), {"'lm_head.weight'", "unknown parameter"}));
    }
    ModelConfig c = d.cfg;
    c.tie_word_embeddings = true;
    const auto plan = plan_loading(hf.metas, eng.params, qwen3_map(c, {tp - 1, tp}));
    CHECK(plan.skipped_count() == 1);
    CHECK(plan.destination(hf.metas.back()) == nullptr);
    apply_in_process(hf, plan);
    CHECK_NOTHROW(check_against_reference(d, hf, eng, tp - 1, tp));
  }
}

TEST_CASE("loading: Qwen3-8B shapes through rename + fuse + shard at TP 1, 2, 4, real processes",
          "[unit][loading][pipeline]") {
  const int tp = GENERATE(1, 2, 4);
  INFO("tp " << tp);
  run_processes(dense8b(), tp, true);
}

TEST_CASE(
    "loading: GQA (2 kv heads) replicated over TP 4, permuted q/k/norms and qkv bias, real "
    "processes",
    "[unit][loading][pipeline]") {
  // Each kv head is shared by two ranks: ranks 0 and 1 load k/v head 0, ranks 2 and 3 head 1.
  Dims d;
  d.cfg = {.hidden = 64, .n_heads = 8, .n_kv_heads = 2, .head_dim = 16, .intermediate = 96};
  d.cfg.permute_qk = true;
  d.qkv_bias = true;
  d.layers = 2;
  d.vocab = 70;
  const bool packed = GENERATE(true, false);
  INFO("packed " << packed);
  run_processes(d, 4, packed);
}

TEST_CASE("loading: Qwen3-30B-A3B experts stacked into w13/w2 at TP 1, 2, 4, real processes",
          "[unit][loading][pipeline]") {
  const int tp = GENERATE(1, 2, 4);
  INFO("tp " << tp);
  run_processes(moe30b(), tp, tp != 2);
}

}  // namespace ws_test_loading_models_test
