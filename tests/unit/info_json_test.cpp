// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#include <cstdint>
#include <weightsync/vllm.hpp>

#include <string>
#include <variant>
#include <vector>

#include "support/catch.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_info_json_test {

using namespace weightsync;
using nlohmann::json;

namespace {
// Calls f and returns the config_error's field and message; fails if nothing is thrown.
template <class F>
std::pair<std::string, std::string> config_failure(F&& f) {
  try {
    f();
  } catch (const config_error& e) {
    return {e.field(), e.what()};
  }
  FAIL("no config_error thrown");
  return {};
}
std::string uid_b64() {
  std::vector<std::byte> id(128);
  for (std::size_t i = 0; i < id.size(); ++i) id[i] = std::byte(i * 7 + 3);
  return detail::base64_encode(id);
}
}  // namespace

TEST_CASE("vLLM's init info JSON parses unchanged", "[unit][json]") {
  // json.dumps(asdict(NCCLWeightTransferInitInfo(master_address="10.0.0.1", master_port=29500,
  //                                               rank_offset=1, world_size=5)))
  const auto j = json::parse(R"({"master_address": "10.0.0.1", "master_port": 29500,
      "rank_offset": 1, "world_size": 5, "nccl_unique_id_b64": null, "packed": false,
      "packed_buffer_size_bytes": 1073741824, "packed_num_buffers": 2})");
  const auto info = j.get<NcclInitInfo>();
  CHECK(info.master_address == "10.0.0.1");
  CHECK(info.master_port == 29500);
  CHECK(info.rank_offset == 1);
  CHECK(info.world_size == 5);
  CHECK_FALSE(info.nccl_unique_id_b64.has_value());
  CHECK_FALSE(info.packed);
  CHECK(info.packed_buffer_size_bytes == (1 << 30));
  CHECK(info.packed_num_buffers == 2);
  // worker_init_payload() drops the None values; the older dataclass had only four fields.
  const auto k = json::parse(R"({"master_address": "10.0.0.1", "master_port": 29500,
      "rank_offset": 1, "world_size": 5})");
  CHECK(k.get<NcclInitInfo>() == info);
}

TEST_CASE("init info round-trips through JSON in both modes", "[unit][json]") {
  NcclInitInfo tcp;
  tcp.master_address = "127.0.0.1";
  tcp.master_port = 12345;
  tcp.rank_offset = 1;
  tcp.world_size = 3;
  tcp.packed = true;
  tcp.packed_buffer_size_bytes = 64 << 20;
  tcp.packed_num_buffers = 3;
  json j = tcp;
  CHECK(j.get<NcclInitInfo>() == tcp);
  NcclInitInfo uid;
  uid.nccl_unique_id_b64 = uid_b64();
  uid.world_size = 2;
  json k = uid;
  CHECK(k["master_address"].is_null());
  CHECK(k.get<NcclInitInfo>() == uid);
  CHECK(decode_unique_id_b64(*uid.nccl_unique_id_b64)[5] == std::byte(38));
}

TEST_CASE("init info errors name the field", "[unit][json]") {
  const json base = json::parse(
      R"({"master_address": "h", "master_port": 1, "rank_offset": 1, "world_size": 2})");
  struct Case {
    const char* patch;
    const char* field;
    const char* text;
  };
  const Case cases[] = {
      {R"({"extra": 1})", "extra", "unknown key"},
      {R"({"master_port": "29500"})", "master_port", "expected an integer, got string"},
      {R"({"master_port": 29500.0})", "master_port", "expected an integer, got float"},
      {R"({"master_port": 0})", "master_port", "must be in 1..65535, got 0"},
      {R"({"master_port": 65536})", "master_port", "got 65536"},
      {R"({"world_size": 0})", "world_size", "must be >= 1, got 0"},
      {R"({"rank_offset": -1})", "rank_offset", "must be >= 0, got -1"},
      {R"({"rank_offset": 2})", "rank_offset", "must be < world_size"},
      {R"({"packed": 1})", "packed", "expected a boolean, got integer"},
      {R"({"packed_buffer_size_bytes": 0})", "packed_buffer_size_bytes", "must be >= 1, got 0"},
      {R"({"packed_num_buffers": 0})", "packed_num_buffers", "must be in 1..8, got 0"},
      {R"({"packed_num_buffers": 9})", "packed_num_buffers", "must be in 1..8, got 9"},
      {R"({"master_address": 5})", "master_address", "expected a string"},
      {R"({"master_port": null})", "master_port", "required with master_address"},
      {R"({"master_address": null, "master_port": null})", "master_address",
       "need nccl_unique_id_b64"},
      {R"({"nccl_unique_id_b64": "AAAA"})", "nccl_unique_id_b64", "not both"},
  };
  for (const auto& c : cases) {
    json j = base;
    const json patch = json::parse(c.patch);
    j.merge_patch(patch);
    // merge_patch deletes keys patched with null; put them back as explicit nulls
    for (auto& [k, v] : patch.items())
      if (v.is_null()) j[k] = nullptr;
    INFO(c.patch);
    auto [field, what] = config_failure([&] { (void)j.get<NcclInitInfo>(); });
    CHECK(field == c.field);
    CHECK(what.find(c.text) != std::string::npos);
  }
  json missing = base;
  missing.erase("world_size");
  auto [field, what] = config_failure([&] { (void)missing.get<NcclInitInfo>(); });
  CHECK(field == "world_size");
  CHECK(what.find("missing required key") != std::string::npos);
  CHECK_THROWS_AS(json::array().get<NcclInitInfo>(), config_error);
}

TEST_CASE("unique id: bad base64 and wrong length are errors", "[unit][json]") {
  auto uid_info = [](const std::string& b64) {
    json j{{"nccl_unique_id_b64", b64}, {"rank_offset", 1}, {"world_size", 2}};
    return j;
  };
  CHECK_NOTHROW(uid_info(uid_b64()).get<NcclInitInfo>());
  for (const std::string& bad : {std::string("!!!!"), std::string("abc"), uid_b64() + "=",
                                 std::string("ab=c"), uid_b64().replace(4, 1, "-")}) {
    auto [field, what] = config_failure([&] { (void)uid_info(bad).get<NcclInitInfo>(); });
    CHECK(field == "nccl_unique_id_b64");
    CHECK(what.find("base64") != std::string::npos);
  }
  auto [field, what] = config_failure([&] { (void)uid_info("AAAA").get<NcclInitInfo>(); });
  CHECK(field == "nccl_unique_id_b64");
  CHECK(what.find("must decode to 128 bytes, got 3") != std::string::npos);
}

TEST_CASE("base64 matches Python's b64encode", "[unit][json]") {
  auto enc = [](std::string_view s) {
    return detail::base64_encode(std::as_bytes(std::span(s.data(), s.size())));
  };
  CHECK(enc("") == "");
  CHECK(enc("f") == "Zg==");
  CHECK(enc("fo") == "Zm8=");
  CHECK(enc("foo") == "Zm9v");
  CHECK(enc("foobar") == "Zm9vYmFy");
  std::string why;
  auto d = detail::base64_decode("Zm9vYg==", why);
  REQUIRE(d);
  CHECK(d->size() == 4);
  CHECK_FALSE(detail::base64_decode("Zm9vYh==", why));  // non-zero padding bits
  CHECK_FALSE(detail::base64_decode("Zm9v\nYg==", why));
}

TEST_CASE("vLLM's update info JSON parses unchanged", "[unit][json]") {
  const auto j = json::parse(R"({"names": ["embed", "layers.0.q", "scale"],
      "dtype_names": ["bfloat16", "bfloat16", "float32"],
      "shapes": [[151936, 1024], [2048, 1024], []], "packed": true,
      "packed_buffer_size_bytes": 1073741824, "packed_num_buffers": 2,
      "is_checkpoint_format": true})");
  const auto u = j.get<NcclUpdateInfo>();
  const auto metas = u.metas();
  REQUIRE(metas.size() == 3);
  CHECK(metas[0] == TensorMeta{"embed", DType::bfloat16, {151936, 1024}});
  CHECK(metas[2].numel() == 1);
  CHECK(u.packed == true);
  json back = u;
  CHECK(back.get<NcclUpdateInfo>() == u);
  // the packed fields are optional
  const auto minimal = json::parse(R"({"names": [], "dtype_names": [], "shapes": []})");
  const auto m = minimal.get<NcclUpdateInfo>();
  CHECK_FALSE(m.packed.has_value());
  CHECK(NcclUpdateInfo::from_metas(metas).metas() == metas);
}

TEST_CASE("update info errors name the field", "[unit][json]") {
  const json base = json::parse(
      R"({"names": ["a", "b"], "dtype_names": ["float32", "int8"], "shapes": [[2], [3, 4]]})");
  struct Case {
    const char* patch;
    const char* field;
    const char* text;
  };
  const Case cases[] = {
      {R"({"names": ["a"]})", "dtype_names", "has 2 entries but names has 1"},
      {R"({"shapes": [[2]]})", "shapes", "has 1 entries but names has 2"},
      {R"({"dtype_names": ["float32", "float"]})", "dtype_names[1]", "unknown dtype 'float'"},
      {R"({"shapes": [[2], [3, -4]]})", "shapes[1][1]", "must be >= 0, got -4"},
      {R"({"shapes": [[2], [3, "4"]]})", "shapes[1][1]", "expected an integer, got string"},
      {R"({"shapes": [[2], 3]})", "shapes[1]", "expected an array, got integer"},
      {R"({"names": ["a", 2]})", "names[1]", "expected a string"},
      {R"({"packed": "yes"})", "packed", "expected a boolean"},
      {R"({"packed_num_buffers": 0})", "packed_num_buffers", "must be in 1..8, got 0"},
      {R"({"packed_buffer_size_bytes": -5})", "packed_buffer_size_bytes", "must be >= 1, got -5"},
      {R"({"tensors": []})", "tensors", "unknown key"},
  };
  for (const auto& c : cases) {
    json j = base;
    j.merge_patch(json::parse(c.patch));
    INFO(c.patch);
    auto [field, what] = config_failure([&] { (void)j.get<NcclUpdateInfo>(); });
    CHECK(field == c.field);
    CHECK(what.find(c.text) != std::string::npos);
  }
  json missing = base;
  missing.erase("shapes");
  CHECK(config_failure([&] { (void)missing.get<NcclUpdateInfo>(); }).first == "shapes");
  // A shape whose byte count overflows is an error naming the entry.
  json huge = base;
  huge["shapes"][1] = json::array({std::int64_t{1} << 62, 8});
  CHECK(config_failure([&] { (void)huge.get<NcclUpdateInfo>(); }).first == "shapes[1]");
}

namespace {
json sharded_update() {
  return json::parse(R"({"names": ["embed", "q", "norm", "o"],
      "dtype_names": ["bfloat16", "float32", "float32", "float16"],
      "shapes": [[37, 8], [5, 7], [11], [3, 9, 4]],
      "shards": [{"dim": 0}, {"dim": 1, "ranks": [1, 0]}, null,
                 {"dim": 1, "sizes": [1, 3, 5], "ranks": [2, 1, 0]}]})");
}
}  // namespace

TEST_CASE("update info: shards parse, round-trip, and give one ShardSpec per tensor",
          "[unit][json][sharded]") {
  const auto u = sharded_update().get<NcclUpdateInfo>();
  REQUIRE(u.sharded());
  const auto specs = u.shard_specs();
  REQUIRE(specs.size() == 4);
  CHECK(specs[0] == ShardSpec{0, {}, {}});
  CHECK(specs[1] == ShardSpec{1, {}, {1, 0}});
  CHECK(specs[2] == ShardSpec{});
  CHECK(specs[3] == ShardSpec{1, {1, 3, 5}, {2, 1, 0}});
  const json back = u;
  CHECK(back.get<NcclUpdateInfo>() == u);
  // Replicated on another rank: dim -1 (or absent) and one rank.
  auto j = sharded_update();
  j["shards"][2] = json::parse(R"({"dim": -1, "ranks": [2]})");
  CHECK(j.get<NcclUpdateInfo>().shard_specs()[2] == ShardSpec{-1, {}, {2}});
}

TEST_CASE(
    "update info: vLLM's plain JSON means trainer rank 0 sends everything, and writes no "
    "sharding keys",
    "[unit][json][sharded]") {
  const auto u = json::parse(R"({"names": ["a", "b"], "dtype_names": ["float32", "int8"],
      "shapes": [[2, 3], []], "packed": true})")
                     .get<NcclUpdateInfo>();
  CHECK_FALSE(u.sharded());
  const auto specs = u.shard_specs();
  REQUIRE(specs.size() == 2);
  for (const auto& s : specs) {
    CHECK_FALSE(s.split());
    CHECK(shard_pieces(TensorMeta{"x", DType::float32, {2, 3}}, 0, s, 1)[0].rank == 0);
  }
  const json back = u;
  CHECK_FALSE(back.contains("shards"));
  CHECK_FALSE(back.contains("src_mesh_dims"));
  CHECK_FALSE(back.contains("src_placements"));
}

TEST_CASE("update info: vLLM's M2N fields give the same specs as shard_spec_from_m2n",
          "[unit][json][sharded]") {
  // A 2 x 2 trainer mesh (M = 4): embed sharded on dim 0 over axis 0 (ranks 0 and 2), q on dim 1
  // over axis 1 (ranks 0 and 1), norm replicated.
  const auto j = json::parse(R"({"names": ["embed", "q", "norm"],
      "dtype_names": ["bfloat16", "float32", "float32"], "shapes": [[8, 4], [4, 6], [4]],
      "src_mesh_dims": [2, 2], "src_placements": [[0, -1], [-1, 1], null]})");
  const auto u = j.get<NcclUpdateInfo>();
  REQUIRE(u.sharded());
  const auto specs = u.shard_specs();
  CHECK(specs[0] == ShardSpec{0, {}, {0, 2}});
  CHECK(specs[1] == ShardSpec{1, {}, {0, 1}});
  CHECK(specs[2] == ShardSpec{});
  const json back = u;
  CHECK(back.get<NcclUpdateInfo>() == u);
  const auto p = shard_pieces(TensorMeta{"embed", DType::bfloat16, {8, 4}}, 0, specs[0], 4);
  REQUIRE(p.size() == 2);
  CHECK(p[0].rank == 0);
  CHECK(p[1].rank == 2);
  CHECK(p[1].begin == 4);
}

TEST_CASE("update info: bad sharding fields are config_errors naming the entry",
          "[unit][json][sharded]") {
  auto field_of = [](json j) {
    return config_failure([&] { (void)j.get<NcclUpdateInfo>(); }).first;
  };
  auto j = sharded_update();
  j["shards"][3]["dim"] = 3;  // "o" has 3 dims
  CHECK(field_of(j) == "shards[3].dim");
  j = sharded_update();
  j["shards"][3]["dim"] = "1";
  CHECK(field_of(j) == "shards[3].dim");
  j = sharded_update();
  j["shards"][3]["dim"] = -2;
  CHECK(field_of(j) == "shards[3].dim");
  j = sharded_update();
  j["shards"][3]["sizes"] = json::array({1, 3, 4});  // sums to 8, dim 1 has 9
  CHECK(field_of(j) == "shards[3].sizes");
  j = sharded_update();
  j["shards"][3]["sizes"][1] = -3;
  CHECK(field_of(j) == "shards[3].sizes[1]");
  j = sharded_update();
  j["shards"][3]["ranks"] = json::array({0, 1});  // three sizes
  CHECK(field_of(j) == "shards[3].ranks");
  j = sharded_update();
  j["shards"][1]["ranks"][0] = -1;
  CHECK(field_of(j) == "shards[1].ranks[0]");
  j = sharded_update();
  j["shards"][0]["rank"] = 0;  // unknown key
  CHECK(field_of(j) == "rank");
  j = sharded_update();
  j["shards"][2] = json::parse(R"({"ranks": [0, 1]})");  // not split: one rank at most
  CHECK(field_of(j) == "shards[2].ranks");
  j = sharded_update();
  j["shards"].erase(3);
  CHECK(field_of(j) == "shards");
  j = sharded_update();
  j["shards"] = json::object();
  CHECK(field_of(j) == "shards");
  j = sharded_update();
  j["src_mesh_dims"] = json::array({2, 1});
  j["src_placements"] = json::array({nullptr, nullptr, nullptr, nullptr});
  CHECK(field_of(j) == "shards");  // both forms
  // M2N.
  auto m = json::parse(R"({"names": ["a", "b"], "dtype_names": ["float32", "float32"],
      "shapes": [[4, 4], [4]], "src_mesh_dims": [2, 1], "src_placements": [[0, -1], null]})");
  CHECK_NOTHROW(m.get<NcclUpdateInfo>());
  auto k = m;
  k.erase("src_mesh_dims");
  CHECK(field_of(k) == "src_mesh_dims");
  k = m;
  k.erase("src_placements");
  CHECK(field_of(k) == "src_placements");
  k = m;
  k["src_mesh_dims"] = json::array({2});
  CHECK(field_of(k) == "src_mesh_dims");
  k = m;
  k["src_mesh_dims"][1] = 0;
  CHECK(field_of(k) == "src_mesh_dims[1]");
  k = m;
  k["src_placements"][0] = json::array({0, 0});  // both axes shard
  CHECK(field_of(k) == "src_placements[0]");
  k = m;
  k["src_placements"][0] = json::array({0});
  CHECK(field_of(k) == "src_placements[0]");
  k = m;
  k["src_placements"][0] = json::array({-2, 0});
  CHECK(field_of(k) == "src_placements[0][0]");
  k = m;
  k["src_placements"][1] = json::array({1, -1});  // "b" has one dim
  CHECK(field_of(k) == "src_placements[1]");
  k = m;
  k["src_placements"].erase(1);
  CHECK(field_of(k) == "src_placements");
}

TEST_CASE("update info: num_trainer_ranks gives M - absent, the M2N mesh or rank_offset does",
          "[unit][json][sharded]") {
  auto j = sharded_update();
  CHECK(j.get<NcclUpdateInfo>().trainer_ranks(3) == 3);  // the init info's rank_offset
  j["num_trainer_ranks"] = 2;
  const auto u = j.get<NcclUpdateInfo>();
  CHECK(u.trainer_ranks(3) == 2);
  CHECK(json(u).get<NcclUpdateInfo>() == u);
  // Alone: sharded, every tensor whole from trainer rank 0.
  const auto plain = json::parse(R"({"names": ["a"], "dtype_names": ["float32"], "shapes": [[2]],
      "num_trainer_ranks": 2})")
                         .get<NcclUpdateInfo>();
  CHECK(plain.sharded());
  CHECK(plain.shard_specs()[0] == ShardSpec{});
  auto m2n = json::parse(R"({"names": ["a"], "dtype_names": ["float32"], "shapes": [[4]],
      "src_mesh_dims": [2, 3], "src_placements": [[0, -1]]})");
  CHECK(m2n.get<NcclUpdateInfo>().trainer_ranks(1) == 6);
  m2n["num_trainer_ranks"] = 4;
  CHECK(config_failure([&] { (void)m2n.get<NcclUpdateInfo>(); }).first == "num_trainer_ranks");
  j["num_trainer_ranks"] = 0;
  CHECK(config_failure([&] { (void)j.get<NcclUpdateInfo>(); }).first == "num_trainer_ranks");
}

TEST_CASE("update info: an M2N mesh whose ranks do not fit an int is a config_error - not a wrap",
          "[unit][json][sharded]") {
  auto field_of = [](const json& j) {
    return config_failure([&] { (void)j.get<NcclUpdateInfo>(); }).first;
  };
  // 65536 x 65536 = 2^32 ranks: as an int it wrapped to 0.
  auto j = json::parse(R"({"names": ["a"], "dtype_names": ["float32"], "shapes": [[4]],
      "src_mesh_dims": [65536, 65536], "src_placements": [null]})");
  CHECK(field_of(j) == "src_mesh_dims");
  // A product past int64 (signed overflow) next to num_trainer_ranks.
  j["src_mesh_dims"] = json::array({std::int64_t{1} << 32, std::int64_t{1} << 32});
  j["num_trainer_ranks"] = 4;
  CHECK(field_of(j) == "src_mesh_dims");
  // The same through the C++ structs, which skip the JSON checks.
  NcclUpdateInfo u;
  u.names = {"a"};
  u.dtype_names = {"float32"};
  u.shapes = {{4}};
  u.src_mesh_dims = std::vector<std::int64_t>{65536, 65536};
  u.src_placements.emplace(1, std::vector<std::int64_t>{-1, 0});
  CHECK(config_failure([&] { (void)u.trainer_ranks(1); }).first == "src_mesh_dims");
  CHECK(config_failure([&] {
          (void)shard_spec_from_m2n({std::int64_t{1} << 31, 1}, std::vector<std::int64_t>{-1, 0},
                                    "src_placements[0]");
        }).first == "src_mesh_dims");
  CHECK(m2n_mesh_size({46340, 46340}) == 46340 * 46340);  // the largest square that fits
  CHECK(config_failure([&] { (void)m2n_mesh_size({46341, 46341}); }).first == "src_mesh_dims");
}

namespace {
// json.dumps(asdict(M2NWeightTransferInitInfo(...))) (vllm/distributed/weight_transfer/
// m2n_engine.py): a 2 x 2 trainer mesh (rank_offset 4) and 2 workers; embed sharded on dim 0 over
// mesh axis 0, q on dim 1 over axis 1, norm replicated.
json m2n_init_json() {
  return json::parse(R"({"master_address": "10.0.0.1", "master_port": 29500, "rank_offset": 4,
      "world_size": 6, "src_mesh_dims": [2, 2], "dst_mesh_dims": [1, 2],
      "names": ["embed", "q", "norm"], "dtype_names": ["bfloat16", "float32", "float32"],
      "shapes": [[8, 4], [4, 6], [4]], "src_placements": [[0, -1], [-1, 1], null],
      "nccl_unique_id_b64": null, "max_cta": null})");
}
}  // namespace

TEST_CASE("vLLM's M2N init info JSON parses unchanged and keeps the plan",
          "[unit][json][sharded]") {
  const auto j = m2n_init_json();
  const auto info = j.get<M2NInitInfo>();
  CHECK(info.master_address == "10.0.0.1");
  CHECK(info.master_port == 29500);
  CHECK(info.rank_offset == 4);
  CHECK(info.world_size == 6);
  CHECK(info.src_mesh_dims == std::vector<std::int64_t>{2, 2});
  CHECK(info.dst_mesh_dims == std::vector<std::int64_t>{1, 2});
  CHECK(info.names == std::vector<std::string>{"embed", "q", "norm"});
  CHECK(info.shapes[1] == std::vector<std::int64_t>{4, 6});
  CHECK_FALSE(info.src_placements[2].has_value());
  CHECK_FALSE(info.nccl_unique_id_b64.has_value());
  CHECK_FALSE(info.max_cta.has_value());
  CHECK(json(info).get<M2NInitInfo>() == info);
  // parse_init_info (what the engine and the HTTP route use) tells the two backends apart.
  const auto any = parse_init_info(j);
  REQUIRE(std::holds_alternative<M2NInitInfo>(any));
  CHECK(std::get<M2NInitInfo>(any) == info);
  const auto nccl = json::parse(R"({"master_address": "10.0.0.1", "master_port": 29500,
      "rank_offset": 1, "world_size": 5})");
  CHECK(std::holds_alternative<NcclInitInfo>(parse_init_info(nccl)));
  // Without the None values, and with a unique id and max_cta instead.
  auto k = j;
  k.erase("nccl_unique_id_b64");
  k.erase("max_cta");
  CHECK(k.get<M2NInitInfo>() == info);
  k.erase("master_address");
  k.erase("master_port");
  k["nccl_unique_id_b64"] = uid_b64();
  k["max_cta"] = 16;
  const auto uid = k.get<M2NInitInfo>();
  CHECK(uid.rendezvous().uses_unique_id());
  CHECK(uid.max_cta == 16);
  // The group to join: the rendezvous fields, the packing defaults.
  const auto r = info.rendezvous();
  CHECK(r.master_address == "10.0.0.1");
  CHECK(r.rank_offset == 4);
  CHECK(r.world_size == 6);
  CHECK_FALSE(r.packed);
  // The plan: M = 4; embed's pieces on ranks 0 and 2 (axis 0), q's on 0 and 1 (axis 1).
  const auto plan = info.plan();
  CHECK(plan.trainer_ranks(0) == 4);
  const auto specs = plan.shard_specs();
  CHECK(specs[0] == ShardSpec{0, {}, {0, 2}});
  CHECK(specs[1] == ShardSpec{1, {}, {0, 1}});
  CHECK(specs[2] == ShardSpec{});
}

TEST_CASE("M2N update info: names only - resolved against the init info's plan",
          "[unit][json][sharded]") {
  const auto init = m2n_init_json().get<M2NInitInfo>();
  // What vLLM's trainer sends each round: every name, in declared order.
  const auto all = json::parse(R"({"names": ["embed", "q", "norm"]})").get<M2NUpdateInfo>();
  CHECK(init.update(all) == init.plan());
  // Any subset, in any order (the trainer sends in that order).
  const auto some = json::parse(R"({"names": ["norm", "embed"]})").get<M2NUpdateInfo>();
  const auto u = init.update(some);
  CHECK(u.names == std::vector<std::string>{"norm", "embed"});
  CHECK(u.dtype_names == std::vector<std::string>{"float32", "bfloat16"});
  CHECK(u.shapes == std::vector<std::vector<std::int64_t>>{{4}, {8, 4}});
  CHECK(u.trainer_ranks(0) == 4);
  const auto specs = u.shard_specs();
  CHECK(specs[0] == ShardSpec{});
  CHECK(specs[1] == ShardSpec{0, {}, {0, 2}});
  // vLLM's base-class field (newer versions) is carried; written only when false.
  const auto kernel = json::parse(R"({"names": [], "is_checkpoint_format": false})");
  CHECK_FALSE(kernel.get<M2NUpdateInfo>().is_checkpoint_format);
  CHECK(json(kernel.get<M2NUpdateInfo>()) == kernel);
  CHECK(json(all) == json::parse(R"({"names": ["embed", "q", "norm"]})"));
  // Errors name the field.
  auto field_of = [&](const json& j) {
    return config_failure([&] { (void)init.update(j.get<M2NUpdateInfo>()); }).first;
  };
  CHECK(field_of(json::parse(R"({"names": ["q", "lm_head"]})")) == "names[1]");
  CHECK(field_of(json::parse(R"({"names": ["q"], "dtype_names": ["float32"]})")) == "dtype_names");
  CHECK(field_of(json::parse(R"({"names": "q"})")) == "names");
  CHECK(field_of(json::parse(R"({"names": [3]})")) == "names[0]");
  CHECK(field_of(json::object()) == "names");
}

TEST_CASE("M2N init info: vLLM's checks and ours are config_errors naming the field",
          "[unit][json][sharded]") {
  auto field_of = [](const json& j) {
    return config_failure([&] { (void)j.get<M2NInitInfo>(); }).first;
  };
  auto message_of = [](const json& j) {
    return config_failure([&] { (void)j.get<M2NInitInfo>(); }).second;
  };
  const auto good = m2n_init_json();
  auto with = [&](const char* key, json v) {
    auto j = good;
    j[key] = std::move(v);
    return j;
  };
  auto without = [&](const char* key) {
    auto j = good;
    j.erase(key);
    return j;
  };
  CHECK(field_of(without("src_mesh_dims")) == "src_mesh_dims");
  CHECK(field_of(without("dst_mesh_dims")) == "dst_mesh_dims");
  CHECK(field_of(without("src_placements")) == "src_placements");
  CHECK(field_of(with("packed", true)) == "packed");  // NcclInitInfo's, not vLLM's M2N
  CHECK(field_of(with("shards", json::array())) == "shards");
  // vLLM: the source mesh covers the rank_offset trainer ranks, the destination the workers.
  CHECK(field_of(with("src_mesh_dims", {2, 1})) == "src_mesh_dims");
  CHECK(message_of(with("src_mesh_dims", {2, 1})).find("4 trainer ranks") != std::string::npos);
  CHECK(field_of(with("src_mesh_dims", {65536, 65536})) == "src_mesh_dims");  // no int wrap
  CHECK(field_of(with("src_mesh_dims", {2, 2, 1})) == "src_mesh_dims");
  CHECK(field_of(with("dst_mesh_dims", {2, 2})) == "dst_mesh_dims");
  CHECK(field_of(with("dst_mesh_dims", {2})) == "dst_mesh_dims");
  CHECK(field_of(with("dst_mesh_dims", {2, 0})) == "dst_mesh_dims[1]");
  CHECK(field_of(with("rank_offset", 6)) == "rank_offset");
  CHECK(field_of(with("rank_offset", 0)) == "rank_offset");
  CHECK(field_of(with("world_size", 1)) == "world_size");
  CHECK(field_of(with("dtype_names", {"bfloat16", "float32"})) == "dtype_names");
  CHECK(field_of(with("shapes", {{8, 4}})) == "shapes");
  CHECK(field_of(with("src_placements", {nullptr})) == "src_placements");
  CHECK(field_of(with("dtype_names", {"bfloat16", "float9", "float32"})) == "dtype_names[1]");
  CHECK(field_of(with("shapes", {{8, 4}, {4, -6}, {4}})) == "shapes[1][1]");
  CHECK(field_of(with("names", {"embed", "q", "embed"})) == "names[2]");
  // Placements: one sharding axis, a dim the tensor has, an even split (vLLM's validate_layout).
  CHECK(field_of(with("src_placements", {{0, 1}, {-1, 1}, nullptr})) == "src_placements[0]");
  CHECK(field_of(with("src_placements", {{0, -1}, {-1, 1}, {1, -1}})) == "src_placements[2]");
  CHECK(field_of(with("src_placements", {{-2, 0}, {-1, 1}, nullptr})) == "src_placements[0][0]");
  CHECK(field_of(with("shapes", {{7, 4}, {4, 6}, {4}})) == "src_placements[0]");  // 7 over 2
  CHECK(message_of(with("shapes", {{7, 4}, {4, 6}, {4}})).find("evenly") != std::string::npos);
  // The rendezvous: NcclInitInfo's rules.
  CHECK(field_of(without("master_address")) == "master_address");
  CHECK(field_of(with("nccl_unique_id_b64", uid_b64())) == "nccl_unique_id_b64");
  CHECK(field_of(with("master_port", 0)) == "master_port");
  CHECK(field_of(with("max_cta", 0)) == "max_cta");
  CHECK(field_of(with("max_cta", "8")) == "max_cta");
  // An init info with any M2N key is read as vLLM's M2N one, and says what it lacks.
  auto nccl = json::parse(R"({"master_address": "10.0.0.1", "master_port": 29500,
      "rank_offset": 1, "world_size": 3, "dst_mesh_dims": [1, 2]})");
  CHECK(config_failure([&] { (void)parse_init_info(nccl); }).first == "src_mesh_dims");
}

}  // namespace ws_test_info_json_test
