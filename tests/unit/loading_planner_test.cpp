// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Model-aware loading, the planner: name patterns and rename maps, bad maps and tables named by
// tensor, and declared dtypes or shapes other than the plan's (through the pipeline, in real
// processes).
#include <weightsync/host/communicator.hpp>
#include <weightsync/loading.hpp>
#include <weightsync/packed_broadcast.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/loading_model.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_loading_planner_test {

using namespace weightsync;
using namespace std::chrono_literals;
using namespace ws_test::loading_model;

TEST_CASE("loading: name patterns and rename maps", "[unit][loading]") {
  std::vector<std::pair<std::string, std::string>> cap;
  const NamePattern p("model.layers.{i}.mlp.experts.{e}.up_proj.weight");
  REQUIRE(p.match("model.layers.12.mlp.experts.0.up_proj.weight", cap));
  CHECK(cap == std::vector<std::pair<std::string, std::string>>{{"i", "12"}, {"e", "0"}});
  CHECK(NamePattern("layers.{i}.w{e}").format(cap) == "layers.12.w0");
  CHECK_FALSE(p.match("model.layers.x.mlp.experts.0.up_proj.weight", cap));
  CHECK_FALSE(p.match("model.layers.1.mlp.experts.0.up_proj.weight.extra", cap));
  CHECK_FALSE(p.match("model.layers..mlp.experts.0.up_proj.weight", cap));
  CHECK_THROWS_AS(NamePattern("a.{i"), config_error);
  CHECK_THROWS_AS(NamePattern("a.{}"), config_error);

  RenameMap m({1, 2});
  m.add("h.{i}.attn.c_attn.weight", "model.layers.{i}.qkv", 0)
      .add("wte", "embed", -1)
      .add("h.{i}.proj", "o.{i}", 1);
  const auto a = m({"h.3.attn.c_attn.weight", DType::bfloat16, {8, 4}});
  REQUIRE(a);
  CHECK(*a == Placement{"model.layers.3.qkv", -1, 0, 0, 4, 4, 0});
  CHECK(*m({"wte", DType::bfloat16, {5, 4}}) == Placement{"embed"});
  CHECK(*m({"h.0.proj", DType::bfloat16, {4, 6}}) == Placement{"o.0", -1, 0, 1, 3, 3, 0});
  CHECK_FALSE(m({"other", DType::bfloat16, {1}}));
  CHECK_THROWS_AS(m({"h.0.proj", DType::bfloat16, {4, 5}}), config_error);  // 5 columns over TP 2
}

TEST_CASE("loading planner: bad maps and tables are config_errors naming the tensor",
          "[unit][loading]") {
  std::vector<std::byte> mem(64 * 4);
  std::vector<ParamInfo> params{{"w", mem.data(), DType::bfloat16, {4, 8}},
                                {"n", mem.data() + 64, DType::float32, {8}},
                                {"i", mem.data() + 128, DType::int32, {8}}};
  const std::vector<TensorMeta> one{{"a", DType::bfloat16, {4, 8}}};
  const auto err = [&](std::vector<TensorMeta> metas, LoadMap map,
                       const PlanOptions& opt = {}) -> std::string {
    try {
      (void)plan_loading(metas, params, map, opt);
    } catch (const config_error& e) {
      return e.what();
    }
    return "no error";
  };
  const auto to = [](Placement p) {
    return LoadMap([p](const TensorMeta&) { return std::optional<Placement>(p); });
  };
  CHECK(has(err(one, to({"nope"})), {"'a'", "unknown parameter 'nope'"}));
  CHECK(has(err(one, [](const TensorMeta&) { return std::optional<Placement>(); }),
            {"'a'", "does not place it"}));
  CHECK(err(one, [](const TensorMeta&) { return std::optional<Placement>(); },
            {.ignore_unmapped = true}) == "no error");
  CHECK(has(err({{"a", DType::bfloat16, {4, 7}}}, to({"w"})), {"rows hold 7"}));
  CHECK(has(err({{"a", DType::bfloat16, {5, 8}}}, to({"w"})), {"do not fit"}));
  CHECK(has(err({{"a", DType::bfloat16, {2, 8}}}, to({"w", -1, 3})), {"do not fit"}));
  CHECK(has(err({{"a", DType::bfloat16, {8}}}, to({"i"})), {"cannot cast bfloat16 to int32"}));
  CHECK(has(err({{"a", DType::bfloat16, {6, 8}}}, to({"w", -1, 0, 0, 5, 4})), {"outside dim 0"}));
  CHECK(
      has(err({{"a", DType::bfloat16, {6, 8}}}, to({"w", -1, 0, 0, 0, 4, 2})), {"rotary permute"}));
  CHECK(has(err({{"a", DType::bfloat16, {4, 8}}}, to({"w", 4})), {"expert 4"}));
  // Two tensors writing the same rows; a region nobody writes.
  const LoadMap half = [](const TensorMeta& m) {
    return std::optional<Placement>(Placement{"w", -1, m.name == "a" ? 0 : 1});
  };
  CHECK(has(err({{"a", DType::bfloat16, {2, 8}}, {"b", DType::bfloat16, {2, 8}}}, half),
            {"'b'", "overlaps"}));
  CHECK(has(err({{"a", DType::bfloat16, {2, 8}}}, half, {.require_full_coverage = true}),
            {"w[16, 32)"}));
  CHECK(
      has(err({{"a", DType::bfloat16, {2, 8}}, {"a", DType::bfloat16, {2, 8}}}, half), {"twice"}));
  // A device stream cannot run a gather (no CUDA kernel yet): a clear error, not a silent skip.
  const std::vector<TensorMeta> n{{"x", DType::bfloat16, {8}}};
  const auto plan = plan_loading(n, params, to({"n"}));
  std::uint16_t buf[8]{};
  const TensorView v{&n[0], buf, 16};
  const TensorMeta stranger{"y", DType::bfloat16, {8}};
  const TensorView sv{&stranger, buf, 16};
  CHECK_THROWS_AS(plan.load(std::span<const TensorView>(&sv, 1), HostStream{}), config_error);
  struct FakeDeviceStream {};
  CHECK_THROWS_AS(plan.load(std::span<const TensorView>(&v, 1), FakeDeviceStream{}), state_error);
}

TEST_CASE("loading planner: a declared dtype or shape other than the plan's gets no destination",
          "[unit][loading]") {
  // "w" is exactly a's size, with guard bytes after it: a larger declared shape must not get a
  // pointer into it (the consumer would write meta.nbytes() bytes there).
  std::vector<std::byte> mem(2 * 8 * 2 + 64, std::byte{0xCD});
  const std::vector<ParamInfo> params{{"w", mem.data(), DType::bfloat16, {2, 8}}};
  const std::vector<TensorMeta> metas{{"a", DType::bfloat16, {2, 8}}};
  const auto plan = plan_loading(metas, params, RenameMap().add("a", "w"));
  CHECK(plan.destination(metas[0]) == mem.data());
  CHECK(plan.destination({"unknown", DType::bfloat16, {2, 8}}) == nullptr);
  const auto refused = [&](const TensorMeta& m) -> std::string {
    try {
      (void)plan.destination(m);
    } catch (const config_error& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(has(refused({"a", DType::bfloat16, {4, 8}}), {"'a'", "shape", "(4, 8)", "(2, 8)"}));
  CHECK(has(refused({"a", DType::bfloat16, {16}}), {"'a'", "shape", "(16,)", "(2, 8)"}));
  CHECK(has(refused({"a", DType::float32, {2, 8}}), {"'a'", "dtype", "float32", "bfloat16"}));
  // The same through the consumer pipeline in real processes: the update declares a larger "a";
  // the consumer refuses it before a byte moves, and the parameter and its guard are untouched.
  const std::vector<TensorMeta> big{{"a", DType::bfloat16, {64, 8}}};
  std::vector<std::uint16_t> bytes(64 * 8, 0x1234);
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  for (int rank = 0; rank < 2; ++rank)
    procs.spawn([&, rank] {
      RendezvousOptions o;
      o.port = port;
      o.rank = rank;
      o.world_size = 2;
      o.timeout = 20000ms;
      auto comm = HostCommunicator::connect(o, 30000ms);
      TransferOptions opt;
      opt.timeout = 20000ms;
      if (rank == 0) {
        std::vector<SourceTensorRef> items{{&big[0], bytes.data()}};
        try {
          (void)packed_broadcast_producer(big, items, comm, 0, opt);
        } catch (const error&) {  // the consumer's abort: expected
        }
        return;
      }
      opt.destination = plan.destination_fn();
      try {
        (void)packed_broadcast_consumer(big, comm, 0, plan.loader(), opt);
        throw std::runtime_error("the consumer accepted a larger shape than the plan's");
      } catch (const config_error& e) {
        if (!has(e.what(), {"'a'", "shape", "(64, 8)", "(2, 8)"})) throw;
      }
      for (const auto b : mem)
        if (b != std::byte{0xCD})
          throw std::runtime_error("the parameter or its guard was written");
    });
  for (const auto& res : procs.wait_all(60s)) {
    INFO(ws_test::outcome_name(res.outcome) << ": " << res.message);
    CHECK(res.outcome == ws_test::Outcome::ok);
  }
  // load() checks every view before it writes anything: a good view followed by a bad one
  // leaves the parameter as it was.
  std::vector<std::byte> mem2(64, std::byte{0xCD});
  const std::vector<ParamInfo> two{{"w", mem2.data(), DType::float32, {2, 8}}};
  const auto cast_plan = plan_loading(metas, two, RenameMap().add("a", "w"));
  const TensorMeta wrong{"a", DType::bfloat16, {4, 4}};
  const std::vector<TensorView> views{{&metas[0], bytes.data(), 32}, {&wrong, bytes.data(), 32}};
  CHECK_THROWS_AS(cast_plan.load(std::span<const TensorView>(views), HostStream{}), config_error);
  CHECK(mem2 == std::vector<std::byte>(64, std::byte{0xCD}));
}

}  // namespace ws_test_loading_planner_test
