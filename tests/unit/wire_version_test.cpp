// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#include <weightsync/vllm.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/catch.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_wire_version_test {

using namespace weightsync;
using nlohmann::json;

namespace {
json golden(const std::string& name) {
  const std::string path = std::string(WEIGHTSYNC_SOURCE_DIR) + "/tests/golden/" + name;
  std::ifstream in(path);
  INFO(path);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
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
bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}
std::array<std::byte, kNcclUniqueIdBytes> uid_bytes() {
  std::array<std::byte, kNcclUniqueIdBytes> id{};
  for (std::size_t i = 0; i < id.size(); ++i) id[i] = std::byte((i * 7 + 3) & 255);
  return id;
}
}  // namespace

TEST_CASE("wire version: golden JSON of each version reads and writes back unchanged",
          "[unit][json][wire_version]") {
  const auto before = WireVersion::vllm_before_0_28;
  const auto since = WireVersion::vllm_0_28;
  SECTION("vLLM < 0.28") {
    const auto gi = golden("vllm-0.27/init_info.json");
    const auto info = read_init_info(gi, before);
    CHECK(info.master_address == "10.0.0.1");
    CHECK_FALSE(info.packed);  // the packing rides the updates
    CHECK(write_init_info(info, before) == gi);
    for (const char* f :
         {"vllm-0.27/update_info.json", "vllm-0.27/update_info_kernel_format.json"}) {
      INFO(f);
      const auto gu = golden(f);
      const auto u = read_update_info(gu, before);
      REQUIRE(u.packed.has_value());
      CHECK(write_update_info(u, before) == gu);
    }
    CHECK(read_update_info(golden("vllm-0.27/update_info.json"), before).packed == true);
    CHECK_FALSE(read_update_info(golden("vllm-0.27/update_info_kernel_format.json"), before)
                    .is_checkpoint_format);
  }
  SECTION("vLLM >= 0.28") {
    for (const char* f : {"vllm-0.28/init_info_tcp.json", "vllm-0.28/init_info_uid.json"}) {
      INFO(f);
      const auto gi = golden(f);
      const auto info = read_init_info(gi, since);
      CHECK(info.packed);
      CHECK(write_init_info(info, since) == gi);
      CHECK(write_init_info(info) == gi);  // the newest vLLM's is the default
    }
    const auto gu = golden("vllm-0.28/update_info.json");
    const auto u = read_update_info(gu, since);
    CHECK_FALSE(u.packed.has_value());
    CHECK(write_update_info(u, since) == gu);
    CHECK(read_update_info(gu) == u);
  }
  SECTION("SGLang") {
    const auto gi = golden("sglang/init_weights_update_group.json");
    const auto req = gi.get<SglangInitGroupRequest>();
    CHECK(json(req) == gi);
    CHECK(write_init_info(read_init_info(gi, WireVersion::sglang), WireVersion::sglang) == gi);
    const auto gu = golden("sglang/update_weights_from_distributed.json");
    const auto up = gu.get<SglangUpdateRequest>();
    CHECK(up.weight_version == "step-12");
    CHECK_FALSE(up.load_format.has_value());
    CHECK(json(up) == gu);
    const auto u = read_update_info(gu, WireVersion::sglang);
    CHECK(u.dtype_names == up.dtypes);
    CHECK(u.packed == false);
  }
}

TEST_CASE("wire version: each version rejects the other's keys, naming the key and the version",
          "[unit][json][wire_version]") {
  const auto before = WireVersion::vllm_before_0_28;
  const auto since = WireVersion::vllm_0_28;
  // The old update info on new vLLM: its `packed` is "Invalid update_info" there.
  auto [f1, m1] =
      config_failure([&] { (void)read_update_info(golden("vllm-0.27/update_info.json"), since); });
  CHECK(f1 == "packed");
  CHECK(has(m1, "vLLM >= 0.28"));
  CHECK(has(m1, "init info"));
  auto [f2, m2] =
      config_failure([&] { (void)read_init_info(golden("vllm-0.28/init_info_tcp.json"), before); });
  CHECK(f2 == "packed");
  CHECK(has(m2, "vLLM < 0.28"));
  auto [f3, m3] =
      config_failure([&] { (void)read_init_info(golden("vllm-0.28/init_info_uid.json"), before); });
  CHECK(f3 == "nccl_unique_id_b64");
  CHECK(has(m3, "vLLM < 0.28"));
  auto kernel = golden("vllm-0.28/update_info.json");
  kernel["is_checkpoint_format"] = false;
  CHECK(config_failure([&] { (void)read_update_info(kernel, since); }).first ==
        "is_checkpoint_format");
  auto extra = golden("vllm-0.28/update_info.json");
  extra["shards"] = json::array();
  CHECK(config_failure([&] { (void)read_update_info(extra, since); }).first == "shards");
  CHECK(config_failure([&] { (void)read_update_info(extra, before); }).first == "shards");
  // Required and None, as the dataclasses say.
  auto gi = golden("vllm-0.27/init_info.json");
  gi.erase("master_port");
  auto [f4, m4] = config_failure([&] { (void)read_init_info(gi, before); });
  CHECK(f4 == "master_port");
  CHECK(has(m4, "missing required key"));
  CHECK(has(m4, "vLLM < 0.28"));
  auto nul = golden("vllm-0.28/init_info_tcp.json");
  nul["packed"] = nullptr;
  auto [f5, m5] = config_failure([&] { (void)read_init_info(nul, since); });
  CHECK(f5 == "packed");
  CHECK(has(m5, "must not be null"));
  // asdict() with its None values is what an older trainer sends: read as the same info.
  auto asdict = golden("vllm-0.28/init_info_tcp.json");
  asdict["nccl_unique_id_b64"] = nullptr;
  CHECK(read_init_info(asdict, since) ==
        read_init_info(golden("vllm-0.28/init_info_tcp.json"), since));
  // SGLang: strict too, and its own field names.
  auto sg = golden("sglang/update_weights_from_distributed.json");
  sg["packed"] = true;
  auto [f6, m6] = config_failure([&] { (void)read_update_info(sg, WireVersion::sglang); });
  CHECK(f6 == "packed");
  CHECK(has(m6, "SGLang"));
  sg = golden("sglang/update_weights_from_distributed.json");
  sg["dtypes"][1] = "float9";
  CHECK(config_failure([&] { (void)read_update_info(sg, WireVersion::sglang); }).first ==
        "dtypes[1]");
  auto sgi = golden("sglang/init_weights_update_group.json");
  sgi["backend"] = "gloo";
  CHECK(config_failure([&] { (void)read_init_info(sgi, WireVersion::sglang); }).first == "backend");
  sgi = golden("sglang/init_weights_update_group.json");
  sgi["rid"] = "r-1";
  CHECK(json(sgi.get<SglangInitGroupRequest>()) == sgi);  // BaseReq's rid is SGLang's
}

TEST_CASE("wire version: the writer refuses what a version cannot carry",
          "[unit][json][wire_version]") {
  const auto before = WireVersion::vllm_before_0_28;
  const auto since = WireVersion::vllm_0_28;
  auto init = read_init_info(golden("vllm-0.28/init_info_tcp.json"), since);
  init.packed_buffer_size_bytes = 64 << 20;
  init.packed_num_buffers = 3;
  auto u = read_update_info(golden("vllm-0.28/update_info.json"), since);
  // Before 0.28 the init's packing goes on every update.
  const auto old = write_update_info(u, before, &init);
  CHECK(old["packed"] == true);
  CHECK(old["packed_buffer_size_bytes"] == 64 << 20);
  CHECK(old["packed_num_buffers"] == 3);
  CHECK_FALSE(old.contains("is_checkpoint_format"));
  CHECK(write_init_info(init, before) == golden("vllm-0.27/init_info.json"));
  // Since 0.28 an update cannot change it.
  u.packed = true;
  CHECK(write_update_info(u, since, &init) == golden("vllm-0.28/update_info.json"));  // the init's
  auto [f1, m1] = config_failure([&] { (void)write_update_info(u, since); });
  CHECK(f1 == "packed");
  CHECK(has(m1, "vLLM >= 0.28"));
  u.packed = false;
  CHECK(config_failure([&] { (void)write_update_info(u, since, &init); }).first == "packed");
  u.packed.reset();
  u.is_checkpoint_format = false;
  CHECK(config_failure([&] { (void)write_update_info(u, since); }).first == "is_checkpoint_format");
  CHECK(write_update_info(u, before)["is_checkpoint_format"] == false);
  u.is_checkpoint_format = true;
  u.num_trainer_ranks = 2;
  for (auto v : {before, since}) {
    auto [f, m] = config_failure([&] { (void)write_update_info(u, v); });
    CHECK(f == "num_trainer_ranks");
    CHECK(has(m, std::string(wire_version_name(v))));
  }
  u.num_trainer_ranks.reset();
  // The unique-id mode: vLLM >= 0.28 only.
  const auto id = uid_bytes();
  const auto uid = unique_id_init_info(id, 3, 1, Packing{true, 256 << 20, 3});
  CHECK(write_init_info(uid, since) == golden("vllm-0.28/init_info_uid.json"));
  auto [f2, m2] = config_failure([&] { (void)write_init_info(uid, before); });
  CHECK(f2 == "nccl_unique_id_b64");
  CHECK(has(m2, "vLLM < 0.28"));
  CHECK(config_failure([&] { (void)write_init_info(uid, WireVersion::sglang); }).first ==
        "nccl_unique_id_b64");
  // SGLang: no packing, no sharding; the request's own defaults.
  CHECK(config_failure([&] { (void)write_init_info(init, WireVersion::sglang); }).first ==
        "packed");
  init.packed = false;
  CHECK(write_init_info(init, WireVersion::sglang) ==
        golden("sglang/init_weights_update_group.json"));
  u.packed = true;
  CHECK(config_failure([&] { (void)write_update_info(u, WireVersion::sglang); }).first == "packed");
  u.packed.reset();
  const auto sg = write_update_info(u, WireVersion::sglang);
  CHECK(sg["dtypes"] == json(u.dtype_names));
  CHECK(sg["flush_cache"] == true);
  CHECK(sg["group_name"] == "weight_update_group");
}

TEST_CASE(
    "wire version: the unique-id init info is 172 characters of standard base64 of the 128 bytes",
    "[unit][json][wire_version]") {
  auto id = uid_bytes();
  id[0] = std::byte{0xfb};  // '+' and '/' appear: standard, not URL-safe, base64
  id[1] = std::byte{0xff};
  const auto info = unique_id_init_info(id, 5, 2);
  REQUIRE(info.nccl_unique_id_b64.has_value());
  CHECK(info.nccl_unique_id_b64->size() == 172);
  CHECK(info.nccl_unique_id_b64->substr(0, 2) == "+/");
  CHECK(info.nccl_unique_id_b64->back() == '=');
  CHECK(decode_unique_id_b64(*info.nccl_unique_id_b64) == id);
  CHECK_FALSE(info.master_address.has_value());
  const auto j = write_init_info(info);
  CHECK_FALSE(j.contains("master_address"));  // None values are not sent
  CHECK_FALSE(j.contains("master_port"));
  CHECK(j["nccl_unique_id_b64"] == *info.nccl_unique_id_b64);
  CHECK(j["rank_offset"] == 2);
  CHECK(j["world_size"] == 5);
  CHECK(read_init_info(j).group_info().nccl_unique_id == id);
  CHECK(config_failure([&] { (void)unique_id_init_info(id, 2, 2); }).first == "rank_offset");
}

TEST_CASE("wire version: version names and keys", "[unit][wire_version]") {
  for (auto v : {WireVersion::vllm_before_0_28, WireVersion::vllm_0_28, WireVersion::sglang})
    CHECK(parse_wire_version(wire_version_key(v)) == v);
  CHECK(parse_wire_version("vllm") == WireVersion::vllm_0_28);
  CHECK_FALSE(parse_wire_version("vllm-0.26").has_value());
  STATIC_REQUIRE(kDefaultWireVersion == WireVersion::vllm_0_28);
}

}  // namespace ws_test_wire_version_test
