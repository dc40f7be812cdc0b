// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#include <weightsync/vllm.hpp>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "support/catch.hpp"
#include "support/files.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_m2n_v2_test {

using namespace weightsync;
using nlohmann::json;

namespace {
json golden(const std::string& name) {
  std::ifstream in(std::string(WEIGHTSYNC_SOURCE_DIR) + "/tests/golden/" + name);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}
std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
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
std::string sha(const std::string& s) {
  return detail::sha256_hex(s);
}
}  // namespace

TEST_CASE("sha256: the FIPS 180-4 example vectors", "[unit][m2n]") {
  CHECK(sha("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnop"
            "qrlmnopqrsmnopqrstnopqrstu") ==
        "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  // One million 'a', fed in uneven pieces (the block boundary falls inside them).
  detail::Sha256 h;
  const std::string piece(997, 'a');
  std::size_t left = 1000000;
  while (left) {
    const auto n = std::min(left, piece.size());
    h.update(std::string_view(piece).substr(0, n));
    left -= n;
  }
  std::string hex;
  for (auto b : h.digest()) {
    static constexpr char k[] = "0123456789abcdef";
    hex += k[b >> 4];
    hex += k[b & 15];
  }
  CHECK(hex == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("py_json_dumps writes what Python's json.dumps(sort_keys, compact) writes",
          "[unit][m2n]") {
  // python3 -c 'import json; print(json.dumps(v, sort_keys=True, separators=(",", ":")))'
  const json v = {
      {"z",
       {1.0, 1e-05, 0.0001, 1e16, 1e15, -0.0, 123.456, 1.5e300, 2.5e-300,
        std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
        -std::numeric_limits<double>::infinity(), 0.1, 100.0, -7}},
      {"a", "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\"\\\n\x01\x7f/"},
      {"B", nullptr},
      {"t", true}};
  CHECK(detail::py_json_dumps(v) ==
        R"({"B":null,"a":"\u00e9\u4e2d\ud83d\ude00\"\\\n\u0001\u007f/","t":true,)"
        R"("z":[1.0,1e-05,0.0001,1e+16,1000000000000000.0,-0.0,123.456,1.5e+300,2.5e-300,)"
        R"(NaN,Infinity,-Infinity,0.1,100.0,-7]})");
  CHECK(config_failure([] { (void)detail::py_json_dumps(json{{"k", "\xc3"}}); }).first == "k");
  CHECK(config_failure([] { (void)detail::py_json_dumps(json{"\xed\xa0\x80"}); }).first == "[0]");
}

TEST_CASE("M2N schema 2: the golden init info reads, checks its digest and writes back",
          "[unit][json][m2n]") {
  const auto g = golden("m2n-v2/init_info.json");
  const auto info = g.get<M2NInitInfoV2>();
  CHECK(info.schema_version == 2);
  CHECK(info.params.size() == 3);
  CHECK(info.source_digest == "3c74db7bba8611203170670918cfdb9dfe085610947daaf0d2f9378f404a9e85");
  CHECK(m2n_source_digest(info.params) == info.source_digest);  // the golden's is Python's
  CHECK(json(info) == g);
  const auto any = parse_init_info(g);
  REQUIRE(std::holds_alternative<M2NInitInfoV2>(any));
  CHECK(std::get<M2NInitInfoV2>(any) == info);
  // The plan: each tensor over its own mesh; M = 4.
  const auto plan = info.plan();
  CHECK(plan.trainer_ranks(0) == 4);
  const auto specs = plan.shard_specs();
  CHECK(specs[0] == ShardSpec{0, {}, {0, 2}});        // [2, 2], dim 0 over axis 0
  CHECK(specs[1] == ShardSpec{1, {}, {0, 1, 2, 3}});  // [4, 1], dim 1 over axis 0
  CHECK(specs[2] == ShardSpec{});
  const auto r = to_init_request(info, InitContext{});
  CHECK(r.trainer_ranks == 4);
  CHECK(r.rank_offset == 4);
  REQUIRE(r.plan);
  CHECK(r.group.nccl_unique_id.has_value());  // the data plane's id, when given
  // An update names tensors of the plan (M2NUpdateInfo, as in schema 1).
  UpdateContext uc;
  uc.init = &r;
  const auto up = to_update_request(json::parse(R"({"names": ["model.norm.weight"]})"), uc);
  REQUIRE(up.metas.size() == 1);
  CHECK(up.metas[0].name == "model.norm.weight");
}

TEST_CASE("M2N schema 2: bad init infos are config_errors naming the field", "[unit][json][m2n]") {
  const auto good = golden("m2n-v2/init_info.json");
  auto field_of = [](const json& j) {
    return config_failure([&] { (void)j.get<M2NInitInfoV2>(); }).first;
  };
  auto j = good;
  j["params"][2]["shape"] = {2048};  // not what the digest covers
  CHECK(field_of(j) == "source_digest");
  j = good;
  j["schema_version"] = 1;
  CHECK(field_of(j) == "schema_version");
  j = good;
  j["params"][0]["placements"] = nullptr;
  CHECK(field_of(j) == "placements");
  j = good;
  j["params"][0].erase("src_placements");
  CHECK(field_of(j) == "params[0].src_placements");
  j = good;
  j["params"][1]["src_mesh_dims"] = {2, 1};
  CHECK(field_of(j) == "params[1].src_mesh_dims");
  j = good;
  j["params"][1]["shape"] = {2048, 1023};
  CHECK(field_of(j) == "params[1].src_placements");  // 1023 over 4 ranks
  j = good;
  j["params"][2]["shape"] = json::array();
  CHECK(field_of(j) == "params[2].shape");
  j = good;
  j["params"][2]["name"] = "model.embed_tokens.weight";
  CHECK(field_of(j) == "params[2].name");
  j = good;
  j["worker_rank_offset"] = 6;
  CHECK(field_of(j) == "worker_rank_offset");
  j = good;
  j["dst_mesh_dims"] = {2, 2};
  CHECK(field_of(j) == "dst_mesh_dims");
  j = good;
  j.erase("master_address");  // the metadata rendezvous is always TCP
  CHECK(field_of(j) == "master_address");
  j = good;
  j["names"] = json::array();  // schema 1's key
  CHECK(field_of(j) == "names");
  // A trainer fills params and seals: the digest follows.
  auto info = good.get<M2NInitInfoV2>();
  info.params[2].shape = {2048};
  CHECK(config_failure([&] { info.validate(); }).first == "source_digest");
  info.seal();
  CHECK_NOTHROW(info.validate());
  CHECK(json(info).get<M2NInitInfoV2>() == info);
  // Schema 1 still reads, and converts.
  const auto v1 = json::parse(R"({"master_address": "10.0.0.1", "master_port": 29500,
      "rank_offset": 4, "world_size": 6, "src_mesh_dims": [2, 2], "dst_mesh_dims": [1, 2],
      "names": ["embed", "norm"], "dtype_names": ["bfloat16", "float32"],
      "shapes": [[8, 4], [4]], "src_placements": [[0, -1], null]})");
  REQUIRE(std::holds_alternative<M2NInitInfo>(parse_init_info(v1)));
  const auto v2 = to_m2n_v2(v1.get<M2NInitInfo>());
  CHECK_NOTHROW(v2.validate());
  CHECK(v2.plan().shard_specs() == v1.get<M2NInitInfo>().plan().shard_specs());
}

TEST_CASE("M2N schema 2: the source digest equals Python's hashlib/json byte for byte",
          "[unit][m2n][python]") {
  if (std::system("python3 -c 'import json, hashlib' > /dev/null 2>&1") != 0)
    WS_SKIP("python3 is not available");
  constexpr std::int64_t big = std::numeric_limits<std::int64_t>::max();
  std::vector<std::vector<M2NParam>> plans = {
      {},
      {{"model.embed_tokens.weight",
        "bfloat16",
        {151936, 4096},
        {2, 4},
        std::vector<std::int64_t>{0, -1}}},
      {{"caf\xc3\xa9.\xe5\xb1\x82.\xf0\x9f\x98\x80.weight",
        "float32",
        {big, 1},
        {1, 1},
        std::nullopt},
       {"quote\"back\\slash\ttab\x01\x7f/",
        "float8_e4m3fn",
        {std::int64_t{1} << 62, 3, 5},
        {4, 2},
        std::vector<std::int64_t>{-1, 1}},
       {"\xd0\xbc\xd0\xbe\xd0\xb4\xd0\xb5\xd0\xbb\xd1\x8c", "int64", {1}, {8, 1}, std::nullopt}},
  };
  const ws_test::TempDir tmp;
  const std::string& dir = tmp.path();
  json input = json::array();
  for (const auto& p : plans) {
    json a = json::array();
    for (const auto& x : p) a.push_back(m2n_param_json(x));
    input.push_back(a);
  }
  ws_test::write_file(dir + "/plans.json", input.dump());  // UTF-8, not escaped
  ws_test::write_file(
      dir + "/digest.py",
      "import hashlib, json, sys\n"
      "plans = json.load(open(sys.argv[1], encoding='utf-8'))\n"
      "with open(sys.argv[2], 'w') as out:\n"
      "    for p in plans:\n"
      "        t = json.dumps({'schema_version': 2, 'params': p}, sort_keys=True,"
      " separators=(',', ':'))\n"
      "        out.write(t + '\\n' + hashlib.sha256(t.encode()).hexdigest() + '\\n')\n");
  const std::string cmd =
      "python3 " + dir + "/digest.py " + dir + "/plans.json " + dir + "/out.txt";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::istringstream lines(read_text(dir + "/out.txt"));
  for (const auto& p : plans) {
    std::string text, digest;
    REQUIRE(std::getline(lines, text));
    REQUIRE(std::getline(lines, digest));
    json a = json::array();
    for (const auto& x : p) a.push_back(m2n_param_json(x));
    CHECK(detail::py_json_dumps(json{{"schema_version", 2}, {"params", a}}) == text);
    CHECK(m2n_source_digest(p) == digest);
  }
  // Floats and keys beyond the plan's: Python's repr and code point order.
  const json odd = {{"\xc3\xa9", 1},
                    {"e", {0.1, 1e22, 5e-324, 1.7976931348623157e308, 1e-7, 12345.678, 3.0}},
                    {"E", -1}};
  ws_test::write_file(dir + "/odd.json", odd.dump());
  const std::string cmd2 =
      "python3 -c \"import json,sys; print(json.dumps(json.load(open(sys.argv[1],"
      " encoding='utf-8')), sort_keys=True, separators=(',', ':')), end='')\" " +
      dir + "/odd.json > " + dir + "/odd.txt";
  REQUIRE(std::system(cmd2.c_str()) == 0);
  CHECK(detail::py_json_dumps(odd) == read_text(dir + "/odd.txt"));
}

}  // namespace ws_test_m2n_v2_test
